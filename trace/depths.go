package trace

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/inspect"
)

// DepthOptions configures ObserveDepths. A nil DepthOptions means every
// default.
type DepthOptions struct {
	// MeterProvider makes the meter (named ScopeName). Default
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Management reaches RabbitMQ's management API, for the unacked and
	// held counts a Backend cannot tell. Default: none; on RabbitMQ only
	// the ready, dead and suspects counts are then reported. Ignored on
	// the memory backend, which tells everything itself.
	Management *inspect.Management
	// Timeout bounds one collection's look at the broker. Default
	// DefaultDepthTimeout.
	Timeout time.Duration
}

// DefaultDepthTimeout is DepthOptions.Timeout's default.
const DefaultDepthTimeout = 5 * time.Second

// depthGauges are the instruments of ObserveDepths, in the order of
// depthCounts.
var depthGauges = [...]struct{ name, desc string }{
	{"queuey.queue.ready", "Messages on the work queue waiting for a consumer, as the broker tells."},
	{"queuey.queue.unacked", "Messages of the work queue that consumers hold and have not settled, as the broker tells."},
	{"queuey.queue.held", "Messages waiting in the queue's hold queues, as the broker tells (not for quorum queues, whose delay levels every quorum queue shares)."},
	{"queuey.queue.dead", "Dead letters in the queue's dead-letter queue, as the broker tells."},
	{"queuey.queue.suspects", "Jobs in the queue's suspects queue, to run alone after a crash (WorkerConfig.PoisonAfter), as the broker tells."},
}

// depthCounts are a Depth's counts in the order of depthGauges.
func depthCounts(d inspect.Depth) [len(depthGauges)]int {
	return [...]int{d.Ready, d.Unacked, d.Held, d.Dead, d.Suspects}
}

// depthObserver reports a set's depths at each collection.
type depthObserver struct {
	inspector inspect.Inspector
	set       queuey.QueueSet
	names     []string
	timeout   time.Duration
	gauges    [len(depthGauges)]metric.Int64ObservableGauge
	attrs     map[string]metric.ObserveOption // by broker name, made once
}

// ObserveDepths reports, at each collection of the meter provider's
// readers, how many messages the broker holds for each queue of set on
// backend: ready, unacked, held, dead and suspects gauges ({message},
// with messaging.destination.name, the work queue's broker name). A
// count the broker cannot tell is not reported. Unregister the returned
// registration to stop.
//
// A collection costs one look at the broker, shared by the five gauges:
// no request on the memory backend; on RabbitMQ, one request to the
// management API when DepthOptions.Management is set, else one Depth call
// (a passive declare) for each queue's work, dead-letter and suspects
// queues, three a queue. A look that fails reports nothing and returns
// its error to the SDK, which hands it to otel.Handle.
func ObserveDepths(backend broker.Backend, set queuey.QueueSet, opts *DepthOptions) (metric.Registration, error) {
	var o DepthOptions
	if opts != nil {
		o = *opts
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultDepthTimeout
	}
	d := &depthObserver{inspector: inspect.For(backend, o.Management), set: set, names: inspect.Names(set),
		timeout: o.Timeout, attrs: map[string]metric.ObserveOption{}}
	for _, q := range set.Queues {
		b := set.BrokerName(q.Name)
		d.attrs[b] = metric.WithAttributeSet(attribute.NewSet(semconv.MessagingDestinationName(b)))
	}
	m := o.MeterProvider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	insts := make([]metric.Observable, len(depthGauges))
	for i, g := range depthGauges {
		var err error
		if d.gauges[i], err = m.Int64ObservableGauge(g.name, metric.WithDescription(g.desc), metric.WithUnit("{message}")); err != nil {
			return nil, err
		}
		insts[i] = d.gauges[i]
	}
	return m.RegisterCallback(d.observe, insts...)
}

// observe looks at the broker once and reports every gauge of every
// queue from that look.
func (d *depthObserver) observe(ctx context.Context, o metric.Observer) error {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	snap, err := d.inspector.Inspect(ctx, d.names)
	if err != nil {
		return fmt.Errorf("queuey: queue depths: %w", err)
	}
	for _, depth := range snap.Depths(d.set) {
		if depth.Missing {
			continue
		}
		for i, n := range depthCounts(depth) {
			if n != inspect.Unknown {
				o.ObserveInt64(d.gauges[i], int64(n), d.attrs[depth.BrokerName])
			}
		}
	}
	return nil
}
