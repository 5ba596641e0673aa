package trace

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
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
	AttrDelayMs          = attribute.Key("queuey.delay_ms")           // send span, deferred, retry_scheduled and unhandled events
	AttrDeadLetterReason = attribute.Key("queuey.dead_letter.reason") // dead-letter send span
	AttrOutcome          = attribute.Key("queuey.outcome")            // process span and metric: a queuey.Result
	AttrReason           = attribute.Key("queuey.reason")             // deferred, dead_lettered and unhandled events
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

	duration       metric.Float64Histogram
	lateness       metric.Float64Histogram
	jobs           metric.Int64ObservableCounter
	held           metric.Int64ObservableUpDownCounter
	inFlight       metric.Int64ObservableUpDownCounter
	settleFailures metric.Int64ObservableCounter

	queues cowMap[queueKey, *queueInfo]
}

// queueKey names a queue on a backend.
type queueKey struct{ system, queue string }

// queueInfo is what every span and measurement of one queue shares, made
// once: span names, span start options and metric attribute sets. Making
// them costs more than using them (building an attribute set sorts and
// hashes it), and passing a slice made once to a variadic method does not
// allocate where a fresh argument list would.
type queueInfo struct {
	queue string

	process    string                      // "process <queue>"
	processOpt []oteltrace.SpanStartOption // CONSUMER and its start attributes
	send       sendInfo                    // into the queue (or one of its hold queues)
	dead       sendInfo                    // into <queue>.dead

	record   []metric.RecordOption  // messaging.destination.name
	observe  []metric.ObserveOption // the same set
	kinds    cowMap[string, []metric.RecordOption]
	outcomes [len(results)][]metric.ObserveOption

	// The counters, observed at each collection (see observeCounts). Every
	// handler goroutine writes them, on any core: the padding keeps
	// them off the cache lines of the fields above, which every hook reads.
	_              cacheLinePad
	taken          atomic.Int64 // deliveries taken up; those not yet in jobs are in flight
	held           atomic.Int64 // see queuey.jobs.held in the package doc
	settleFailures atomic.Int64
	jobs           [len(results)]atomic.Int64 // by resultIndex
	_              cacheLinePad
	otherJobs      sync.Map // Result -> *atomic.Int64, for a Result not in results
}

// cacheLinePad is a cache line's worth of nothing.
type cacheLinePad [64]byte

// sendInfo is a destination's send span name and start options.
type sendInfo struct {
	name string
	opt  []oteltrace.SpanStartOption
}

// results are the outcomes whose attribute sets are made up front, in the
// order of resultIndex.
var results = [...]queuey.Result{queuey.Succeeded, queuey.Retried, queuey.Deferred, queuey.DeadLettered, queuey.Requeued, queuey.Unhandled, queuey.Cancelled}

func resultIndex(r queuey.Result) int {
	switch r {
	case queuey.Succeeded:
		return 0
	case queuey.Retried:
		return 1
	case queuey.Deferred:
		return 2
	case queuey.DeadLettered:
		return 3
	case queuey.Requeued:
		return 4
	case queuey.Unhandled:
		return 5
	case queuey.Cancelled:
		return 6
	}
	return -1
}

// maxKinds bounds the job kinds whose attribute sets a queue keeps. The
// handler duration, the only per-kind metric, is recorded for kinds that
// have a handler, so the bound is not reached in practice; past it, sets
// are made per measurement.
const maxKinds = 256

// The span start options every span of a kind shares.
var (
	producerKind = oteltrace.WithSpanKind(oteltrace.SpanKindProducer)
	consumerKind = oteltrace.WithSpanKind(oteltrace.SpanKindConsumer)
)

// queue returns what queue's spans and measurements share. Queue names
// come from the application's QueueSet, so the cache stays small.
func (in *Instrumentation) queue(system, queue string) *queueInfo {
	key := queueKey{system, queue}
	if qi, ok := in.queues.load(key); ok {
		return qi
	}
	return in.queues.store(key, newQueueInfo(system, queue), 0)
}

func newQueueInfo(system, queue string) *queueInfo {
	sys := semconv.MessagingSystemKey.String(system)
	q := semconv.MessagingDestinationName(queue)
	set := metric.WithAttributeSet(attribute.NewSet(q))
	qi := &queueInfo{
		queue:   queue,
		process: "process " + queue,
		// The attributes the conventions ask for at a span's start, for
		// samplers; the others are set once the span is known to record.
		processOpt: []oteltrace.SpanStartOption{consumerKind, oteltrace.WithAttributes(
			sys, semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"), q)},
		send:    newSendInfo(sys, queue),
		dead:    newSendInfo(sys, broker.DeadQueueName(queue)),
		record:  []metric.RecordOption{set},
		observe: []metric.ObserveOption{set},
	}
	for i, r := range results {
		qi.outcomes[i] = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(q, AttrOutcome.String(string(r))))}
	}
	return qi
}

func newSendInfo(sys attribute.KeyValue, dest string) sendInfo {
	return sendInfo{
		name: "send " + dest,
		opt: []oteltrace.SpanStartOption{producerKind, oteltrace.WithAttributes(
			sys, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send"), semconv.MessagingDestinationName(dest))},
	}
}

// countJob counts a delivery that ended with result r.
func (qi *queueInfo) countJob(r queuey.Result) {
	if i := resultIndex(r); i >= 0 {
		qi.jobs[i].Add(1)
		return
	}
	n, _ := qi.otherJobs.LoadOrStore(r, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// inFlightNow is how many deliveries are taken up and not yet settled:
// those taken less those counted in jobs, which finish counts each
// delivery in once. Counted that way, a job makes one write to the
// counters fewer than with an in-flight counter of its own; the settled
// are read first, so that a delivery settled between the two reads is
// not counted below zero.
func (qi *queueInfo) inFlightNow() int64 {
	var settled int64
	for i := range qi.jobs {
		settled += qi.jobs[i].Load()
	}
	qi.otherJobs.Range(func(_, n any) bool {
		settled += n.(*atomic.Int64).Load()
		return true
	})
	return qi.taken.Load() - settled
}

// kind returns the options that record a handler duration of kind.
func (qi *queueInfo) kind(kind string) []metric.RecordOption {
	if o, ok := qi.kinds.load(kind); ok {
		return o
	}
	o := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(semconv.MessagingDestinationName(qi.queue), AttrJobKind.String(kind)))}
	return qi.kinds.store(kind, o, maxKinds)
}

// observeCounts reports every queue's counters. Two queueInfos of one
// queue (one per backend) are added up by the SDK.
func (in *Instrumentation) observeCounts(_ context.Context, o metric.Observer) error {
	m := in.queues.m.Load()
	if m == nil {
		return nil
	}
	for _, qi := range *m {
		o.ObserveInt64(in.inFlight, qi.inFlightNow(), qi.observe...)
		o.ObserveInt64(in.held, qi.held.Load(), qi.observe...)
		o.ObserveInt64(in.settleFailures, qi.settleFailures.Load(), qi.observe...)
		for i := range results {
			// An outcome is reported once it has happened, as a
			// synchronous counter would.
			if n := qi.jobs[i].Load(); n > 0 {
				o.ObserveInt64(in.jobs, n, qi.outcomes[i]...)
			}
		}
		qi.otherJobs.Range(func(r, n any) bool {
			o.ObserveInt64(in.jobs, n.(*atomic.Int64).Load(),
				metric.WithAttributes(semconv.MessagingDestinationName(qi.queue), AttrOutcome.String(string(r.(queuey.Result)))))
			return true
		})
	}
	return nil
}

// cowMap is a map read without locks or allocations, for keys that are
// added rarely: a store copies it.
type cowMap[K comparable, V any] struct {
	mu sync.Mutex // serialises stores
	m  atomic.Pointer[map[K]V]
}

func (c *cowMap[K, V]) load(k K) (V, bool) {
	if m := c.m.Load(); m != nil {
		v, ok := (*m)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// store adds k unless it is there already, and returns its value. With a
// positive limit, a map that has limit keys is left as it is.
func (c *cowMap[K, V]) store(k K, v V, limit int) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]V
	if p := c.m.Load(); p != nil {
		old = *p
	}
	if have, ok := old[k]; ok {
		return have
	}
	if limit > 0 && len(old) >= limit {
		return v
	}
	m := make(map[K]V, len(old)+1)
	maps.Copy(m, old)
	m[k] = v
	c.m.Store(&m)
	return v
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
	if in.jobs, err = m.Int64ObservableCounter("queuey.jobs",
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
	if in.held, err = m.Int64ObservableUpDownCounter("queuey.jobs.held",
		metric.WithDescription("Jobs published into a hold queue and not yet taken up again, as instrumented processes saw them."),
		metric.WithUnit("{job}")); err != nil {
		return nil, err
	}
	if in.inFlight, err = m.Int64ObservableUpDownCounter("queuey.jobs.in_flight",
		metric.WithDescription("Deliveries taken up and not yet settled."),
		metric.WithUnit("{job}")); err != nil {
		return nil, err
	}
	if in.settleFailures, err = m.Int64ObservableCounter("queuey.settle.failures",
		metric.WithDescription("Deliveries whose outcome the broker could not be told; each comes back."),
		metric.WithUnit("{job}")); err != nil {
		return nil, err
	}
	// The counters are atomic counters per queue, observed at collection:
	// an SDK measurement costs a few hundred nanoseconds, an atomic add a
	// few, and a job would make three of them.
	if _, err = m.RegisterCallback(in.observeCounts, in.jobs, in.held, in.inFlight, in.settleFailures); err != nil {
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
	case queuey.OpEnqueueAfter, queuey.OpDefer, queuey.OpRetry, queuey.OpDeferral, queuey.OpUnhandled:
		return true
	}
	return p.Delay > 0
}

// publish starts a PRODUCER span "send <destination>" under ctx and puts
// its context into the message's headers.
func (in *Instrumentation) publish(ctx context.Context, p *queuey.PublishInfo) func(error) {
	qi := in.queue(p.System, p.BrokerQueue)
	dest := &qi.send
	if p.Op == queuey.OpDeadLetter {
		dest = &qi.dead
	}
	ctx, span := in.tracer.Start(ctx, dest.name, dest.opt...)
	recording := span.IsRecording()
	if recording {
		setSendAttributes(span, p)
	}

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
	if !recording && !held {
		// Nothing to record, nothing to count: a span that does not
		// record has nothing to end either.
		return nil
	}
	return func(err error) {
		if err != nil {
			span.SetAttributes(semconv.ErrorType(err))
			span.SetStatus(codes.Error, err.Error())
		} else if held {
			qi.held.Add(1)
		}
		span.End()
	}
}

// appendJob appends the attributes that name a job and its place in its
// life, which send and process spans share.
func appendJob(attrs []attribute.KeyValue, id, kind string, attempt, deferrals, priority int) []attribute.KeyValue {
	return append(attrs,
		semconv.MessagingMessageID(id),
		AttrJobKind.String(kind),
		AttrJobAttempt.Int(attempt),
		AttrJobDeferrals.Int(deferrals),
		AttrJobPriority.Int(priority),
	)
}

// setSendAttributes gives a send span the attributes its start options do
// not, in one call.
func setSendAttributes(span oteltrace.Span, p *queuey.PublishInfo) {
	n := 1 // sized exactly: a slice of 12 took twice the bytes (BenchmarkSDKFloor)
	if p.JobID != "" {
		n += 5
	}
	if p.CorrelationID != "" {
		n++
	}
	if p.Delay > 0 {
		n++
	}
	if p.Op == queuey.OpDeadLetter {
		n++
	}
	attrs := make([]attribute.KeyValue, 0, n)
	attrs = append(attrs, AttrPublishOp.String(string(p.Op)))
	if p.JobID != "" { // empty for the dead letter of a body that was not an envelope
		attrs = appendJob(attrs, p.JobID, p.Kind, p.Attempt, p.Deferrals, p.Priority)
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
	span.SetAttributes(attrs...)
}

// deliver starts a CONSUMER span "process <queue>" as a child of the
// span that published the delivery, with a link to it too.
func (in *Instrumentation) deliver(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
	// Only the headers decide the parent: a span the worker's own ctx may
	// carry (one around Worker.Run) must not adopt every job.
	// The worker's own trace and baggage are not the job's: a delivery
	// carries what its publisher had, or nothing.
	if oteltrace.SpanContextFromContext(ctx).IsValid() {
		ctx = oteltrace.ContextWithSpanContext(ctx, oteltrace.SpanContext{})
	}
	if baggage.FromContext(ctx).Len() > 0 {
		ctx = baggage.ContextWithoutBaggage(ctx)
	}
	ctx = in.propagator.Extract(ctx, propagation.MapCarrier(d.Headers))
	creation := oteltrace.SpanContextFromContext(ctx)

	qi := in.queue(d.System, d.BrokerQueue)
	ctx, span := in.tracer.Start(ctx, qi.process, qi.processOpt...)
	if creation.IsValid() {
		// Added after the start rather than given to it, so that a span
		// that does not record costs nothing for it: the link is the
		// parent, which a sampler sees anyway.
		span.AddLink(oteltrace.Link{SpanContext: creation})
	}

	qi.taken.Add(1)
	if !d.DueAt.IsZero() {
		in.lateness.Record(ctx, max(0, d.Started.Sub(d.DueAt)).Seconds(), qi.record...)
	}
	held := d.Headers[HeaderHeld] != ""
	if held {
		qi.held.Add(-1)
	}
	return ctx, func(o queuey.Outcome) { in.finish(ctx, span, qi, d, held, o) }
}

// finish records what became of a delivery and ends its span.
func (in *Instrumentation) finish(ctx context.Context, span oteltrace.Span, qi *queueInfo, d *queuey.DeliveryInfo, held bool, o queuey.Outcome) {
	if span.IsRecording() {
		annotate(span, &d.Job, &o)
	}
	qi.countJob(o.Result)
	if o.HandlerDuration > 0 {
		in.duration.Record(ctx, o.HandlerDuration.Seconds(), qi.kind(d.Job.Kind)...)
	}
	if o.SettleErr != nil {
		qi.settleFailures.Add(1)
	}
	if held && o.Result == queuey.Requeued {
		// Given back with its header: the next delivery counts it down again.
		qi.held.Add(1)
	}
	span.End()
}

// annotate gives a process span the job's attributes, which its start
// options do not carry, and the outcome's, in one call, then its events
// and status.
func annotate(span oteltrace.Span, jc *queuey.JobContext, o *queuey.Outcome) {
	errType, desc, failed := failure(o)
	n := 1 // the outcome; sized exactly, as in setSendAttributes
	if jc.JobID != "" {
		n += 6
		if jc.CorrelationID != "" {
			n++
		}
	}
	if failed {
		n++
	}
	attrs := make([]attribute.KeyValue, 0, n)
	if jc.JobID != "" { // empty when the body is not an envelope
		attrs = appendJob(attrs, jc.JobID, jc.Kind, jc.Attempt, jc.Deferrals, jc.Priority)
		attrs = append(attrs, AttrJobRedelivered.Bool(jc.Redelivered))
		if jc.CorrelationID != "" {
			attrs = append(attrs, semconv.MessagingMessageConversationID(jc.CorrelationID))
		}
	}
	attrs = append(attrs, AttrOutcome.String(string(o.Result)))
	if failed {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
	}
	span.SetAttributes(attrs...)

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
	case queuey.Unhandled:
		span.AddEvent("unhandled", oteltrace.WithAttributes(AttrDelayMs.Int64(o.Delay.Milliseconds()), AttrReason.String(o.Reason)))
	case queuey.Cancelled:
		span.AddEvent("cancelled")
	}
	if !o.PausedUntil.IsZero() {
		span.AddEvent("queue_paused", oteltrace.WithAttributes(AttrPausedUntil.String(o.PausedUntil.UTC().Format(time.RFC3339Nano))))
	}
	if o.SettleErr != nil {
		span.AddEvent("settle_failed", oteltrace.WithAttributes(AttrError.String(o.SettleErr.Error())))
	}
	if failed {
		span.SetStatus(codes.Error, desc)
	}
}

// failure says whether the process span ends in error, with its error.type
// and status description. A retry, a dead letter and a failed settlement
// are errors; a deferral is not, nor is a delivery a stopping worker gave
// back.
func failure(o *queuey.Outcome) (errType, desc string, failed bool) {
	switch {
	case o.SettleErr != nil:
		return "settle_failed", "settle failed: " + o.SettleErr.Error(), true
	case o.Result != queuey.Retried && o.Result != queuey.DeadLettered:
		return "", "", false
	case o.Panicked: // first: a panic after the timeout has its value in the timeout's text
		return "panic", "handler panicked", true
	case o.TimedOut:
		return "timeout", errText(o.Err, "handler timed out"), true
	case isFatal(o.Err):
		return "fatal", o.Err.Error(), true
	case o.Err != nil:
		return semconv.ErrorType(o.Err).Value.AsString(), o.Err.Error(), true
	default: // dead-lettered without running: no handler, or a body that does not decode
		return semconv.ErrorTypeOther.Value.AsString(), o.Reason, true
	}
}

func isFatal(err error) bool {
	var fatal *queuey.FatalError
	return errors.As(err, &fatal)
}

func errText(err error, otherwise string) string {
	if err == nil {
		return otherwise
	}
	return err.Error()
}
