package sdktest_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/trace"
)

// The depth gauges read the broker at each collection: here the memory
// backend, with two emails ready and one waiting out a delay. On RabbitMQ,
// give DepthOptions.Management for the unacked and held counts.
func ExampleObserveDepths() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()

	backend := memory.New(nil)
	defer backend.Close()
	set := queuey.QueueSet{Queues: []queuey.Queue{emails}}
	if _, err := trace.ObserveDepths(backend, set, &trace.DepthOptions{MeterProvider: mp}); err != nil {
		panic(err)
	}
	producer, err := queuey.NewProducer(ctx, backend, set, nil)
	if err != nil {
		panic(err)
	}
	_, _ = producer.Enqueue(ctx, email{To: "ann@example.com"})
	_, _ = producer.Enqueue(ctx, email{To: "bob@example.com"})
	_, _ = producer.EnqueueAfter(ctx, email{To: "cy@example.com"}, time.Hour)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
			q, _ := dp.Attributes.Value("messaging.destination.name")
			fmt.Printf("%s{%s} %d\n", m.Name, q.AsString(), dp.Value)
		}
	}
	// Output:
	// queuey.queue.ready{emails} 2
	// queuey.queue.unacked{emails} 0
	// queuey.queue.held{emails} 1
	// queuey.queue.dead{emails} 0
	// queuey.queue.suspects{emails} 0
}
