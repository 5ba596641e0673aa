package trace

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/queuey-go/queuey/trace"

// HeaderHeld is the header the publish hook puts on a message it sends into
// a hold queue, so that the worker that takes it up later can tell the hold
// is over (see the queuey.jobs.held metric in the package doc).
const HeaderHeld = "x-queuey-held"

// The attributes this package adds to the messaging semantic conventions'.
const (
	AttrPublishOp        = attribute.Key("queuey.publish.op")         // send span: a queuey.PublishOp
	AttrJobKind          = attribute.Key("queuey.job.kind")           // span and metric
	AttrJobAttempt       = attribute.Key("queuey.job.attempt")        // span
	AttrJobDeferrals     = attribute.Key("queuey.job.deferrals")      // span
	AttrJobPriority      = attribute.Key("queuey.job.priority")       // span
	AttrJobRedelivered   = attribute.Key("queuey.job.redelivered")    // process span
	AttrDelayMs          = attribute.Key("queuey.delay_ms")           // send span, deferred and retry_scheduled events
	AttrDeadLetterReason = attribute.Key("queuey.dead_letter.reason") // dead-letter send span
	AttrOutcome          = attribute.Key("queuey.outcome")            // process span and metric: a queuey.Result
	AttrReason           = attribute.Key("queuey.reason")             // deferred and dead_lettered events
	AttrNextAttempt      = attribute.Key("queuey.next_attempt")       // retry_scheduled event
	AttrError            = attribute.Key("queuey.error")              // settle_failed event
	AttrPausedUntil      = attribute.Key("queuey.paused_until")       // queue_paused event: RFC 3339, on the worker's clock
)

// Options configures New. A nil Options means every default.
type Options struct {
	// TracerProvider makes the tracer. Default otel.GetTracerProvider().
	TracerProvider oteltrace.TracerProvider
	// MeterProvider makes the meter. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator writes the trace context into message headers and reads
	// it back. Default: W3C trace context and baggage. Producers and
	// workers must agree on it.
	Propagator propagation.TextMapPropagator
}

// Instrumentation follows jobs through queuey's hooks into OpenTelemetry
// spans and metrics. It is safe for concurrent use; one value serves every
// producer and worker of a process.
type Instrumentation struct {
	tracer     oteltrace.Tracer
	propagator propagation.TextMapPropagator
	hooks      *queuey.Hooks

	jobs           metric.Int64Counter
	duration       metric.Float64Histogram
	lateness       metric.Float64Histogram
	held           metric.Int64UpDownCounter
	inFlight       metric.Int64UpDownCounter
	settleFailures metric.Int64Counter

	queues sync.Map // queue name → *queueAttrs
}

// queueAttrs are one queue's metric attribute sets, made once: building a
// set sorts and hashes it, which costs more than the measurement itself.
type queueAttrs struct {
	queue    metric.MeasurementOption
	outcomes map[queuey.Result]metric.MeasurementOption
	kinds    sync.Map // kind → metric.MeasurementOption
}

// results are the outcomes whose sets are made up front.
var results = []queuey.Result{queuey.Succeeded, queuey.Retried, queuey.Deferred, queuey.DeadLettered, queuey.Requeued}

// attrsOf returns queue's attribute sets. Queue names and kinds come from
// the application's QueueSet and handlers, so the cache stays small.
func (in *Instrumentation) attrsOf(queue string) *queueAttrs {
	if qa, ok := in.queues.Load(queue); ok {
		return qa.(*queueAttrs)
	}
	q := semconv.MessagingDestinationName(queue)
	qa := &queueAttrs{
		queue:    metric.WithAttributeSet(attribute.NewSet(q)),
		outcomes: make(map[queuey.Result]metric.MeasurementOption, len(results)),
	}
	for _, r := range results {
		qa.outcomes[r] = metric.WithAttributeSet(attribute.NewSet(q, AttrOutcome.String(string(r))))
	}
	actual, _ := in.queues.LoadOrStore(queue, qa)
	return actual.(*queueAttrs)
}

func (qa *queueAttrs) outcome(queue string, r queuey.Result) metric.MeasurementOption {
	if o, ok := qa.outcomes[r]; ok {
		return o
	}
	return metric.WithAttributes(semconv.MessagingDestinationName(queue), AttrOutcome.String(string(r)))
}

func (qa *queueAttrs) kind(queue, kind string) metric.MeasurementOption {
	if o, ok := qa.kinds.Load(kind); ok {
		return o.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(semconv.MessagingDestinationName(queue), AttrJobKind.String(kind)))
	actual, _ := qa.kinds.LoadOrStore(kind, o)
	return actual.(metric.MeasurementOption)
}

// New creates the tracer and the instruments. It fails only when the meter
// provider refuses an instrument.
func New(opts *Options) (*Instrumentation, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.Propagator == nil {
		o.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	in := &Instrumentation{
		tracer:     o.TracerProvider.Tracer(ScopeName, oteltrace.WithSchemaURL(semconv.SchemaURL)),
		propagator: o.Propagator,
	}
	m := o.MeterProvider.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	var err error
	if in.jobs, err = m.Int64Counter("queuey.jobs",
		metric.WithDescription("Deliveries taken up, by what became of them (queuey.outcome)."),
		metric.WithUnit("{job}")); err != nil {
		return nil, err
	}
	if in.duration, err = m.Float64Histogram("queuey.handler.duration",
		metric.WithDescription("How long handlers ran."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 300)); err != nil {
		return nil, err
	}
	if in.lateness, err = m.Float64Histogram("queuey.job.lateness",
		metric.WithDescription("How long after it was due a delivery was taken up: after its publish, or after the end of its wait."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)); err != nil {
		return nil, err
	}
	if in.held, err = m.Int64UpDownCounter("queuey.jobs.held",
		metric.WithDescription("Jobs published into a hold queue and not yet taken up again, as instrumented processes saw them."),
		metric.WithUnit("{job}")); err != nil {
		return nil, err
	}
	if in.inFlight, err = m.Int64UpDownCounter("queuey.jobs.in_flight",
		metric.WithDescription("Deliveries taken up and not yet settled."),
		metric.WithUnit("{job}")); err != nil {
		return nil, err
	}
	if in.settleFailures, err = m.Int64Counter("queuey.settle.failures",
		metric.WithDescription("Deliveries whose outcome the broker could not be told; each comes back."),
		metric.WithUnit("{job}")); err != nil {
		return nil, err
	}
	in.hooks = &queuey.Hooks{Publish: in.publish, Deliver: in.deliver}
	return in, nil
}

// Hooks returns the hooks to put in both queuey.ProducerConfig.Hooks and
// queuey.WorkerConfig.Hooks. Every call returns the same value.
func (in *Instrumentation) Hooks() *queuey.Hooks { return in.hooks }

// holds reports whether a publish goes into a hold queue: every op but a
// plain enqueue and a dead letter waits, even with a zero delay (it waits
// one granularity step).
func holds(p *queuey.PublishInfo) bool {
	switch p.Op {
	case queuey.OpEnqueueAfter, queuey.OpDefer, queuey.OpRetry, queuey.OpDeferral:
		return true
	}
	return p.Delay > 0
}

// publish starts a PRODUCER span "send <destination>" under ctx and puts
// its context into the message's headers.
func (in *Instrumentation) publish(ctx context.Context, p *queuey.PublishInfo) func(error) {
	dest := p.Queue
	if p.Op == queuey.OpDeadLetter {
		dest = broker.DeadQueueName(p.Queue)
	}
	attrs := make([]attribute.KeyValue, 0, 14)
	attrs = append(attrs,
		semconv.MessagingSystemKey.String(p.System),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingDestinationName(dest),
		AttrPublishOp.String(string(p.Op)),
	)
	if p.JobID != "" { // empty for the dead letter of a body that was not an envelope
		attrs = append(attrs,
			semconv.MessagingMessageID(p.JobID),
			AttrJobKind.String(p.Kind),
			AttrJobAttempt.Int(p.Attempt),
			AttrJobDeferrals.Int(p.Deferrals),
			AttrJobPriority.Int(p.Priority),
		)
	}
	if p.CorrelationID != "" {
		attrs = append(attrs, semconv.MessagingMessageConversationID(p.CorrelationID))
	}
	if p.Delay > 0 {
		attrs = append(attrs, AttrDelayMs.Int64(p.Delay.Milliseconds()))
	}
	if p.Op == queuey.OpDeadLetter {
		attrs = append(attrs, AttrDeadLetterReason.String(p.Reason))
	}
	ctx, span := in.tracer.Start(ctx, "send "+dest,
		oteltrace.WithSpanKind(oteltrace.SpanKindProducer),
		oteltrace.WithAttributes(attrs...))

	if p.Headers == nil { // the core always gives a map; be safe anyway
		p.Headers = map[string]string{}
	}
	in.propagator.Inject(ctx, propagation.MapCarrier(p.Headers))
	held := holds(p)
	switch {
	case held:
		p.Headers[HeaderHeld] = "1"
	case p.Op == queuey.OpRedelivery:
		// The copy that replaces a redelivered job keeps that delivery's
		// headers, the held mark included: its delivery counted the hold
		// down, and its Requeued outcome counts it up again, so the copy's
		// delivery must count it down once more.
	default:
		// A dead letter of a malformed delivery reuses that delivery's
		// headers: it is not held, whatever they said.
		delete(p.Headers, HeaderHeld)
	}
	queue := p.Queue
	return func(err error) {
		if err != nil {
			span.SetAttributes(semconv.ErrorType(err))
			span.SetStatus(codes.Error, err.Error())
		} else if held {
			in.held.Add(ctx, 1, in.attrsOf(queue).queue)
		}
		span.End()
	}
}

// deliver starts a CONSUMER span "process <queue>" as a child of the
// span that published the delivery, with a link to it too.
func (in *Instrumentation) deliver(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
	// Only the headers decide the parent: a span the worker's own ctx may
	// carry (one around Worker.Run) must not adopt every job.
	if oteltrace.SpanContextFromContext(ctx).IsValid() {
		ctx = oteltrace.ContextWithSpanContext(ctx, oteltrace.SpanContext{})
	}
	ctx = in.propagator.Extract(ctx, propagation.MapCarrier(d.Headers))
	creation := oteltrace.SpanContextFromContext(ctx)

	jc := d.Job
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs,
		semconv.MessagingSystemKey.String(d.System),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(d.Queue),
	)
	if jc.JobID != "" { // empty when the body is not an envelope
		attrs = append(attrs,
			semconv.MessagingMessageID(jc.JobID),
			AttrJobKind.String(jc.Kind),
			AttrJobAttempt.Int(jc.Attempt),
			AttrJobDeferrals.Int(jc.Deferrals),
			AttrJobPriority.Int(jc.Priority),
			AttrJobRedelivered.Bool(jc.Redelivered),
		)
		if jc.CorrelationID != "" {
			attrs = append(attrs, semconv.MessagingMessageConversationID(jc.CorrelationID))
		}
	}
	opts := []oteltrace.SpanStartOption{
		oteltrace.WithSpanKind(oteltrace.SpanKindConsumer),
		oteltrace.WithAttributes(attrs...),
	}
	if creation.IsValid() {
		opts = append(opts, oteltrace.WithLinks(oteltrace.Link{SpanContext: creation}))
	}
	ctx, span := in.tracer.Start(ctx, "process "+d.Queue, opts...)

	queue := in.attrsOf(d.Queue).queue
	in.inFlight.Add(ctx, 1, queue)
	if !d.DueAt.IsZero() {
		in.lateness.Record(ctx, max(0, d.Started.Sub(d.DueAt)).Seconds(), queue)
	}
	held := d.Headers[HeaderHeld] != ""
	if held {
		in.held.Add(ctx, -1, queue)
	}
	return ctx, func(o queuey.Outcome) { in.finish(ctx, span, d, held, o) }
}

// finish records what became of a delivery and ends its span.
func (in *Instrumentation) finish(ctx context.Context, span oteltrace.Span, d *queuey.DeliveryInfo, held bool, o queuey.Outcome) {
	span.SetAttributes(AttrOutcome.String(string(o.Result)))
	// How the run failed comes first, then what was done about it.
	if o.TimedOut {
		span.AddEvent("timed_out")
	}
	if o.Panicked {
		span.AddEvent("panicked") // the value and the stack stay in the worker's log
	}
	switch o.Result {
	case queuey.Deferred:
		span.AddEvent("deferred", oteltrace.WithAttributes(AttrDelayMs.Int64(o.Delay.Milliseconds()), AttrReason.String(o.Reason)))
	case queuey.Retried:
		span.AddEvent("retry_scheduled", oteltrace.WithAttributes(AttrDelayMs.Int64(o.Delay.Milliseconds()), AttrNextAttempt.Int(o.NextAttempt)))
	case queuey.DeadLettered:
		span.AddEvent("dead_lettered", oteltrace.WithAttributes(AttrReason.String(o.Reason)))
	}
	if !o.PausedUntil.IsZero() {
		span.AddEvent("queue_paused", oteltrace.WithAttributes(AttrPausedUntil.String(o.PausedUntil.UTC().Format(time.RFC3339Nano))))
	}
	if o.SettleErr != nil {
		span.AddEvent("settle_failed", oteltrace.WithAttributes(AttrError.String(o.SettleErr.Error())))
	}
	if errType, desc, failed := failure(o); failed {
		span.SetAttributes(semconv.ErrorTypeKey.String(errType))
		span.SetStatus(codes.Error, desc)
	}

	qa := in.attrsOf(d.Queue)
	in.jobs.Add(ctx, 1, qa.outcome(d.Queue, o.Result))
	if o.HandlerDuration > 0 {
		in.duration.Record(ctx, o.HandlerDuration.Seconds(), qa.kind(d.Queue, d.Job.Kind))
	}
	if o.SettleErr != nil {
		in.settleFailures.Add(ctx, 1, qa.queue)
	}
	if held && o.Result == queuey.Requeued {
		// Given back with its header: the next delivery counts it down again.
		in.held.Add(ctx, 1, qa.queue)
	}
	in.inFlight.Add(ctx, -1, qa.queue)
	span.End()
}

// failure says whether the process span ends in error, with its error.type
// and status description. A retry, a dead letter and a failed settlement
// are errors; a deferral is not, nor is a delivery a stopping worker gave
// back.
func failure(o queuey.Outcome) (errType, desc string, failed bool) {
	var fatal *queuey.FatalError
	switch {
	case o.SettleErr != nil:
		return "settle_failed", "settle failed: " + o.SettleErr.Error(), true
	case o.Result != queuey.Retried && o.Result != queuey.DeadLettered:
		return "", "", false
	case o.TimedOut:
		return "timeout", errText(o.Err, "handler timed out"), true
	case o.Panicked:
		return "panic", "handler panicked", true
	case errors.As(o.Err, &fatal):
		return "fatal", o.Err.Error(), true
	case o.Err != nil:
		return semconv.ErrorType(o.Err).Value.AsString(), o.Err.Error(), true
	default: // dead-lettered without running: no handler, or a body that does not decode
		return semconv.ErrorTypeOther.Value.AsString(), o.Reason, true
	}
}

func errText(err error, otherwise string) string {
	if err == nil {
		return otherwise
	}
	return err.Error()
}
