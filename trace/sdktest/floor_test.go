package sdktest_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/trace"
)

// BenchmarkSDKFloor sets the hooks' per-job cost against the SDK's own
// floor: the OpenTelemetry calls the package makes for one job, made bare.
// A job here is one enqueue (the publish hook and its done func) and one
// delivery of it (the deliver hook and its outcome func), the delivery
// reading the headers the publish wrote, so that its process span is the
// child of that send span and follows its sampling decision, as in the
// pipeline. Both sides run in the same sub-benchmark on the same providers,
// those of BenchmarkInstrumentation (an SDK tracer provider with a batch
// span processor whose exporter discards, an SDK meter provider with a
// manual reader), in sixteen rounds of b.N/16 jobs each, in the order
// floor, hooks, hooks, floor repeated four times, each round after a
// garbage collection, so that both see the same machine and its changes
// over the run. It reports:
//
//	floor-ns/job, hooks-ns/job          wall time per job, on one goroutine
//	hooks/floor                         their ratio: the package is answerable for what is above 1.0
//	floor-cpu-ns/job, hooks-cpu-ns/job  the process's CPU time per job (the batch span processor's
//	                                    goroutine and the garbage collector too; Unix only)
//	hooks/floor-by-cpu                  their ratio
//	floor-allocs/job, hooks-allocs/job  heap allocations per job
//	floor-B/job, hooks-B/job            heap bytes per job
//
// (ns/op mixes both sides and the untimed collections between rounds: read
// the figures above.)
//
// The floor makes, in trace.go's order and with its arguments:
//
//   - at publish: Tracer.Start of the send span with the package's
//     precomputed name and start options (PRODUCER and the four sampling
//     attributes); when it records, one SetAttributes of the six attributes
//     setSendAttributes gives an enqueue (queuey.publish.op, the message id,
//     the job's kind, attempt, deferrals and priority); the propagator's
//     Inject (W3C trace context and baggage, the package's default) into a
//     fresh map carrier; End, when the span records.
//   - at delivery: the propagator's Extract from that carrier;
//     Tracer.Start of the process span under the extracted context, with
//     the precomputed name and options; AddLink to the creation context
//     when it is valid; the queuey.job.lateness Record with the
//     precomputed attribute set option.
//   - at the outcome: when the span records, one SetAttributes of the seven
//     attributes annotate gives a succeeded job (the five of the job,
//     queuey.job.redelivered, queuey.outcome); the queuey.handler.duration
//     Record with the precomputed per-kind attribute set option; End.
//
// The floor's attribute lists are what any caller passes: an argument list
// of exactly its attributes, which the SDK's SetAttributes (an interface
// method) makes escape, so the floor allocates them too (384 and 448 B).
//
// Both sides make a fresh headers map per job (a carrier is needed either
// way) and fill one PublishInfo and one DeliveryInfo, which the floor reads
// its inputs from as the hooks do; the core allocates these two, so they
// are reused here, out of both figures.
//
// The floor leaves out what is the package's own, which the ratio puts
// above 1.0: the per-queue cache lookups (queue, kind), the funcs the hooks
// return, the attribute slices built with room for 12, the hold header
// logic, the atomic counts (queuey.jobs, in_flight, held, settle failures:
// the package keeps them in atomics, observed at collection, so they make
// no SDK call per job, and neither does the floor), failure's checks, and
// deliver's clearing of a span context and baggage the worker's ctx may
// carry. Collection (the observable counters' callback, the reader) is off
// the hot path on both sides and not run.
//
// Sub-benchmarks: sampled-100pct (AlwaysSample), sampled-10pct
// (ParentBased(TraceIDRatioBased(0.1))), sampled-0pct (NeverSample). Run
// with
//
//	(cd trace/sdktest && go test -run '^$' -bench 'Floor' -benchtime 1s -count 3 .)
func BenchmarkSDKFloor(b *testing.B) {
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{
		{"sampled-100pct", sdktrace.AlwaysSample()},
		{"sampled-10pct", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))},
		{"sampled-0pct", sdktrace.NeverSample()},
	} {
		b.Run(c.name, func(b *testing.B) { floorVsHooks(b, c.sampler) })
	}
}

// floorVsHooks runs the floor and the hooks in interleaved rounds on one
// pair of providers and reports both.
func floorVsHooks(b *testing.B, sampler sdktrace.Sampler) {
	b.StopTimer()
	tp, mp := benchProviders(b, sampler)
	hooks := hooksOn(b, tp, mp)
	f := newFloor(b, tp, mp, "memory", qWork, "job")

	ctx := context.Background()
	now := time.Now()
	var p queuey.PublishInfo
	d := queuey.DeliveryInfo{
		System: "memory", Queue: "work", BrokerQueue: qWork, DueAt: now, Started: now,
		Job: queuey.JobContext{JobID: benchJobID, Kind: "job", Queue: "work", BrokerQueue: qWork, Attempt: 1},
	}
	out := queuey.Outcome{Result: queuey.Succeeded, Ran: true, HandlerDuration: time.Microsecond}
	// newJob fills p as the core does for an enqueue, with fresh headers.
	newJob := func() {
		p = queuey.PublishInfo{
			Op: queuey.OpEnqueue, System: "memory", Queue: "work", BrokerQueue: qWork, JobID: benchJobID, Kind: "job",
			Attempt: 1, Headers: map[string]string{},
		}
	}
	floorJob := func() {
		newJob()
		f.publishAndDeliver(ctx, &p, &d, out)
	}
	hooksJob := func() {
		newJob()
		if done := hooks.Publish(ctx, &p); done != nil {
			done(nil)
		}
		d.Headers = p.Headers
		_, finish := hooks.Deliver(ctx, &d)
		finish(out)
	}
	// The first job of each side out of the count: it fills the
	// package's per-queue caches, as the floor's were filled by newFloor.
	floorJob()
	hooksJob()

	var floor, hooked pipelineRun
	const rounds = 16 // floor, hooks, hooks, floor, four times over
	for round := range rounds {
		n := b.N / rounds
		if round < b.N%rounds {
			n++
		}
		if n == 0 {
			continue
		}
		if round%4 == 1 || round%4 == 2 {
			hooked.add(timeJobs(b, n, hooksJob))
		} else {
			floor.add(timeJobs(b, n, floorJob))
		}
	}
	if floor.jobs == 0 || hooked.jobs == 0 {
		return // b.N below 2: nothing to compare
	}
	nsPerJob := func(r pipelineRun) float64 { return float64(r.elapsed.Nanoseconds()) / float64(r.jobs) }
	b.ReportMetric(nsPerJob(floor), "floor-ns/job")
	b.ReportMetric(nsPerJob(hooked), "hooks-ns/job")
	b.ReportMetric(nsPerJob(hooked)/nsPerJob(floor), "hooks/floor")
	if floor.cpu > 0 && hooked.cpu > 0 {
		b.ReportMetric(floor.cpuPerJob()*1e3, "floor-cpu-ns/job")
		b.ReportMetric(hooked.cpuPerJob()*1e3, "hooks-cpu-ns/job")
		b.ReportMetric(hooked.cpuPerJob()/floor.cpuPerJob(), "hooks/floor-by-cpu")
	}
	b.ReportMetric(perJob(floor.allocs, floor.jobs), "floor-allocs/job")
	b.ReportMetric(perJob(hooked.allocs, hooked.jobs), "hooks-allocs/job")
	b.ReportMetric(perJob(floor.bytes, floor.jobs), "floor-B/job")
	b.ReportMetric(perJob(hooked.bytes, hooked.jobs), "hooks-B/job")
}

// benchJobID is a job id as the core makes them (a UUIDv7).
const benchJobID = "0196f5b4-7d2c-7c3e-9d5a-3b1f2e4c5d6e"

// timeJobs runs job n times after a garbage collection; only that is timed.
func timeJobs(b *testing.B, n int, job func()) pipelineRun {
	run := pipelineRun{jobs: n}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.StartTimer()
	start, startCPU := time.Now(), processCPU(b)
	for range n {
		job()
	}
	run.elapsed, run.cpu = time.Since(start), processCPU(b)-startCPU
	b.StopTimer()
	runtime.ReadMemStats(&after)
	run.allocs, run.bytes = after.Mallocs-before.Mallocs, after.TotalAlloc-before.TotalAlloc
	return run
}

// floor makes the SDK calls the package makes for a job, and no more:
// what it would take any code to trace and measure a job as the package
// does. Its names, span start options and metric options are made once,
// as the package makes them once per queue (newQueueInfo, queueInfo.kind).
type floor struct {
	tracer             oteltrace.Tracer
	propagator         propagation.TextMapPropagator
	duration, lateness metric.Float64Histogram

	sendName, processName string
	sendOpt, processOpt   []oteltrace.SpanStartOption
	record, kind          []metric.RecordOption
}

// newFloor makes the floor's tracer, instruments and options as New and
// newQueueInfo make the package's, for one queue and one job kind. The
// tracer and the two histograms are the package's own: the SDK gives the
// same scope and the same instrument definitions the same ones.
func newFloor(b *testing.B, tp oteltrace.TracerProvider, mp metric.MeterProvider, system, queue, kind string) *floor {
	f := &floor{
		tracer:     tp.Tracer(trace.ScopeName, oteltrace.WithSchemaURL(semconv.SchemaURL)),
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
	m := mp.Meter(trace.ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
	var err error
	if f.duration, err = m.Float64Histogram("queuey.handler.duration",
		metric.WithDescription("How long handlers ran."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 300)); err != nil {
		b.Fatal(err)
	}
	if f.lateness, err = m.Float64Histogram("queuey.job.lateness",
		metric.WithDescription("How long after it was due a delivery was taken up: after its publish, or after the end of its wait."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)); err != nil {
		b.Fatal(err)
	}
	sys := semconv.MessagingSystemKey.String(system)
	q := semconv.MessagingDestinationName(queue)
	f.sendName = "send " + queue
	f.sendOpt = []oteltrace.SpanStartOption{oteltrace.WithSpanKind(oteltrace.SpanKindProducer), oteltrace.WithAttributes(
		sys, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send"), q)}
	f.processName = "process " + queue
	f.processOpt = []oteltrace.SpanStartOption{oteltrace.WithSpanKind(oteltrace.SpanKindConsumer), oteltrace.WithAttributes(
		sys, semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"), q)}
	f.record = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(q))}
	f.kind = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(q, trace.AttrJobKind.String(kind)))}
	return f
}

// publishAndDeliver is one job: the publish of p, then the delivery d of
// what it published, which ends with out. It mirrors publish, deliver,
// finish and annotate in trace.go for an enqueue that succeeds.
func (f *floor) publishAndDeliver(ctx context.Context, p *queuey.PublishInfo, d *queuey.DeliveryInfo, out queuey.Outcome) {
	if send := f.publish(ctx, p); send.IsRecording() {
		send.End() // the publish's done func, the broker having confirmed
	}
	d.Headers = p.Headers
	dctx, span := f.deliver(ctx, d)
	f.outcome(dctx, span, d, out)
}

// hooks is the floor as queuey.Hooks, for a pipeline: the same calls, in
// the funcs the Hooks API has a hook return (whose closures are the API's
// cost, not the package's).
func (f *floor) hooks() *queuey.Hooks {
	return &queuey.Hooks{
		Publish: func(ctx context.Context, p *queuey.PublishInfo) func(error) {
			send := f.publish(ctx, p)
			if !send.IsRecording() {
				return nil
			}
			return func(error) { send.End() }
		},
		Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
			ctx, span := f.deliver(ctx, d)
			return ctx, func(out queuey.Outcome) { f.outcome(ctx, span, d, out) }
		},
	}
}

// publish starts p's send span, gives it the attributes when it records,
// and puts its context into p's headers; the span is ended once the
// publish is confirmed, when it records.
func (f *floor) publish(ctx context.Context, p *queuey.PublishInfo) oteltrace.Span {
	sctx, send := f.tracer.Start(ctx, f.sendName, f.sendOpt...)
	if send.IsRecording() {
		send.SetAttributes(
			trace.AttrPublishOp.String(string(p.Op)),
			semconv.MessagingMessageID(p.JobID),
			trace.AttrJobKind.String(p.Kind),
			trace.AttrJobAttempt.Int(p.Attempt),
			trace.AttrJobDeferrals.Int(p.Deferrals),
			trace.AttrJobPriority.Int(p.Priority),
		)
	}
	f.propagator.Inject(sctx, propagation.MapCarrier(p.Headers))
	return send
}

// deliver starts d's process span under the context d's headers carry,
// linked to it, and records the lateness.
func (f *floor) deliver(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, oteltrace.Span) {
	ctx = f.propagator.Extract(ctx, propagation.MapCarrier(d.Headers))
	creation := oteltrace.SpanContextFromContext(ctx)
	ctx, span := f.tracer.Start(ctx, f.processName, f.processOpt...)
	if creation.IsValid() {
		span.AddLink(oteltrace.Link{SpanContext: creation})
	}
	if !d.DueAt.IsZero() {
		f.lateness.Record(ctx, max(0, d.Started.Sub(d.DueAt)).Seconds(), f.record...)
	}
	return ctx, span
}

// outcome gives the process span the job's and the outcome's attributes
// when it records, records the handler's duration and ends the span.
func (f *floor) outcome(ctx context.Context, span oteltrace.Span, d *queuey.DeliveryInfo, out queuey.Outcome) {
	if span.IsRecording() {
		jc := &d.Job
		span.SetAttributes(
			semconv.MessagingMessageID(jc.JobID),
			trace.AttrJobKind.String(jc.Kind),
			trace.AttrJobAttempt.Int(jc.Attempt),
			trace.AttrJobDeferrals.Int(jc.Deferrals),
			trace.AttrJobPriority.Int(jc.Priority),
			trace.AttrJobRedelivered.Bool(jc.Redelivered),
			trace.AttrOutcome.String(string(out.Result)),
		)
	}
	if out.HandlerDuration > 0 {
		f.duration.Record(ctx, out.HandlerDuration.Seconds(), f.kind...)
	}
	span.End()
}
