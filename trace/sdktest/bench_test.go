package sdktest_test

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/trace"
)

// BenchmarkInstrumentation is what the instrumentation costs a pipeline on
// the memory backend and the real clock: a producer enqueues jobs from one
// goroutine while a worker with 8 handler slots takes them up, at most
// backlog jobs apart, until n jobs have run. Every sub-benchmark runs the
// same pipeline three ways: plain (no hooks), instrumented (the package's
// hooks) and floor (hooks that make exactly the OpenTelemetry calls the
// package makes per job, bare: BenchmarkSDKFloor's, in the funcs the Hooks
// API has a hook return), in six rounds of b.N/6 jobs each, in the order
// plain, instrumented, floor, floor, instrumented, plain, so that all see
// the same machine and none always runs first. The floor is what any
// instrumentation that traces and measures a job as the package does
// costs the pipeline; the package is answerable for inst/floor. It
// reports:
//
//	plain-jobs/s, inst-jobs/s,  jobs through the pipeline, enqueue to settlement
//	floor-jobs/s
//	inst/plain, floor/plain     their ratios: 0.9 means the instrumentation (the
//	                            floor's calls alone) costs 10% of throughput
//	inst/floor                  the package's hooks against the bare calls
//	plain-cpu-us/job,           the process's CPU time (user and system, every goroutine:
//	inst-cpu-us/job,            the SDK's batch processor and the garbage collector too) per job
//	floor-cpu-us/job
//	inst/plain-by-cpu,          the throughput ratios the CPU times imply when the cores are
//	floor/plain-by-cpu          busy (plain CPU per job over the other's): 0.9 means 10% of
//	                            throughput lost; other processes' CPU is not counted in them,
//	                            as it is in the wall-clock ratios (Unix only)
//	+allocs/job, +B/job         what instrumentation allocates per job
//	floor+B/job                 what the floor's calls allocate per job
//
// The instrumented pipeline runs on what a production process would have:
// an SDK tracer provider with a batch span processor (its exporter discards
// the batches, so export costs nothing) and an SDK meter provider whose
// reader is read by hand (a periodic reader costs the same per measurement;
// collection is off the hot path). Sub-benchmarks:
//
//	noop/sampled-100pct      a handler that does nothing, every trace sampled
//	noop/sampled-10pct       the same, ParentBased(TraceIDRatioBased(0.1))
//	noop/sampled-0pct        the same, nothing sampled: metrics and propagation only
//	work50us/sampled-100pct  a handler that computes for about 50µs, every trace sampled
//	work50us/sampled-10pct   the same handler, ParentBased(TraceIDRatioBased(0.1))
//
// BenchmarkHooks gives the hooks' own cost, without the pipeline. Run both
// with
//
//	(cd trace/sdktest && go test -run '^$' -bench . -benchtime 3s -count 3 .)
//
// and the goal's case, with the floor on one goroutine beside it, with
//
//	(cd trace/sdktest && go test -run '^$' -bench 'Instrumentation/work50us|SDKFloor' -benchtime 60000x -count 3 .)
func BenchmarkInstrumentation(b *testing.B) {
	work := spinFor(50 * time.Microsecond)
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
		spin    int
	}{
		{"noop/sampled-100pct", sdktrace.AlwaysSample(), 0},
		{"noop/sampled-10pct", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1)), 0},
		{"noop/sampled-0pct", sdktrace.NeverSample(), 0},
		{"work50us/sampled-100pct", sdktrace.AlwaysSample(), work},
		{"work50us/sampled-10pct", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1)), work},
	} {
		b.Run(c.name, func(b *testing.B) { compare(b, c.sampler, c.spin) })
	}
}

// compare runs the pipeline plain, instrumented, and with the SDK floor's
// hooks, and reports the three.
func compare(b *testing.B, sampler sdktrace.Sampler, spin int) {
	b.StopTimer()
	tp, mp := benchProviders(b, sampler)
	hooks := hooksOn(b, tp, mp)
	bare := newFloor(b, tp, mp, "memory", qWork, "job").hooks()
	var plain, inst, floor pipelineRun
	rounds := [...]struct {
		into  *pipelineRun
		hooks *queuey.Hooks
	}{{&plain, nil}, {&inst, hooks}, {&floor, bare}, {&floor, bare}, {&inst, hooks}, {&plain, nil}}
	for round, r := range rounds {
		n := b.N / len(rounds)
		if round < b.N%len(rounds) {
			n++
		}
		if n > 0 {
			r.into.add(pipeline(b, r.hooks, n, spin))
		}
	}
	if plain.jobs == 0 || inst.jobs == 0 || floor.jobs == 0 {
		return // b.N below 3: nothing to compare
	}
	report(b, plain, inst, floor)
}

// report reports a comparison's figures (see BenchmarkInstrumentation).
func report(b *testing.B, plain, inst, floor pipelineRun) {
	b.ReportMetric(plain.rate(), "plain-jobs/s")
	b.ReportMetric(inst.rate(), "inst-jobs/s")
	b.ReportMetric(floor.rate(), "floor-jobs/s")
	b.ReportMetric(inst.rate()/plain.rate(), "inst/plain")
	b.ReportMetric(floor.rate()/plain.rate(), "floor/plain")
	b.ReportMetric(inst.rate()/floor.rate(), "inst/floor")
	if plain.cpu > 0 && inst.cpu > 0 && floor.cpu > 0 {
		b.ReportMetric(plain.cpuPerJob(), "plain-cpu-us/job")
		b.ReportMetric(inst.cpuPerJob(), "inst-cpu-us/job")
		b.ReportMetric(floor.cpuPerJob(), "floor-cpu-us/job")
		b.ReportMetric(plain.cpuPerJob()/inst.cpuPerJob(), "inst/plain-by-cpu")
		b.ReportMetric(plain.cpuPerJob()/floor.cpuPerJob(), "floor/plain-by-cpu")
	}
	b.ReportMetric(perJob(inst.allocs, inst.jobs)-perJob(plain.allocs, plain.jobs), "+allocs/job")
	b.ReportMetric(perJob(inst.bytes, inst.jobs)-perJob(plain.bytes, plain.jobs), "+B/job")
	b.ReportMetric(perJob(floor.bytes, floor.jobs)-perJob(plain.bytes, plain.jobs), "floor+B/job")
}

func perJob(total uint64, jobs int) float64 { return float64(total) / float64(jobs) }

// instrumented returns hooks on benchProviders.
func instrumented(b *testing.B, sampler sdktrace.Sampler) *queuey.Hooks {
	tp, mp := benchProviders(b, sampler)
	return hooksOn(b, tp, mp)
}

// benchProviders are what a production process would have: an SDK tracer
// provider that batches spans to an exporter that drops them, and an SDK
// meter provider read by hand. They are shut down when b ends.
func benchProviders(b *testing.B, sampler sdktrace.Sampler) (*sdktrace.TracerProvider, *sdkmetric.MeterProvider) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return tp, mp
}

// hooksOn is the package's hooks on tp and mp.
func hooksOn(b *testing.B, tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) *queuey.Hooks {
	inst, err := trace.New(&trace.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	return inst.Hooks()
}

// pipelineRun adds up the runs of one side of a comparison.
type pipelineRun struct {
	jobs          int
	elapsed, cpu  time.Duration
	allocs, bytes uint64
}

func (r *pipelineRun) add(o pipelineRun) {
	r.jobs += o.jobs
	r.elapsed += o.elapsed
	r.cpu += o.cpu
	r.allocs += o.allocs
	r.bytes += o.bytes
}

func (r *pipelineRun) rate() float64 { return float64(r.jobs) / r.elapsed.Seconds() }

func (r *pipelineRun) cpuPerJob() float64 {
	return float64(r.cpu.Nanoseconds()) / 1e3 / float64(r.jobs)
}

// backlog is how far the producer may run ahead of the handlers: a queue
// that stays short, as in a steady state, rather than b.N jobs held in
// memory for the garbage collector to go through again and again.
const backlog = 1024

// pipeline runs n jobs through a producer and a worker, each handler run
// spinning spin rounds; only that is timed.
func pipeline(b *testing.B, hooks *queuey.Hooks, n, spin int) pipelineRun {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	set := setOf(queuey.Queue{Name: "work", Prefetch: 64})
	backend := memory.New(nil)
	defer backend.Close()
	producer, err := queuey.NewProducer(ctx, backend, set, &queuey.ProducerConfig{Hooks: hooks, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	worker, err := queuey.NewWorker(backend, set, &queuey.WorkerConfig{Concurrency: 8, Hooks: hooks, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	var ran atomic.Int64
	done := make(chan struct{})
	slots := make(chan struct{}, backlog)
	err = queuey.Handle(worker, func(context.Context, job, queuey.JobContext) error {
		spinRounds(spin)
		<-slots
		if ran.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- worker.Run(runCtx) }()

	run := pipelineRun{jobs: n}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.StartTimer()
	start, startCPU := time.Now(), processCPU(b)
	for range n {
		slots <- struct{}{}
		if _, err := producer.Enqueue(ctx, job{Name: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	run.elapsed, run.cpu = time.Since(start), processCPU(b)-startCPU
	b.StopTimer()
	runtime.ReadMemStats(&after)
	stop()
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	run.allocs, run.bytes = after.Mallocs-before.Mallocs, after.TotalAlloc-before.TotalAlloc
	return run
}

// spinSink keeps the spinning from being optimised away.
var spinSink atomic.Uint64

// spinRounds computes for a time that depends only on rounds and the CPU.
func spinRounds(rounds int) {
	x := uint64(rounds)
	for range rounds {
		x = x*6364136223846793005 + 1442695040888963407
	}
	spinSink.Add(x)
}

var spinCalibration = sync.OnceValue(func() time.Duration {
	const rounds = 1 << 20
	best := time.Duration(1<<63 - 1)
	for range 5 {
		start := time.Now()
		spinRounds(rounds)
		best = min(best, time.Since(start))
	}
	return best
})

// spinFor returns how many rounds of spinRounds take about d, on the
// fastest of a few measurements (the machine is shared).
func spinFor(d time.Duration) int {
	const rounds = 1 << 20
	return max(1, int(float64(rounds)*float64(d)/float64(spinCalibration())))
}

// BenchmarkHooks is the instrumentation alone: one enqueue's publish hook,
// and one delivery's deliver hook with its finish, on the providers
// BenchmarkInstrumentation uses, without a backend or a worker around them.
func BenchmarkHooks(b *testing.B) {
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{
		{"sampled", sdktrace.AlwaysSample()},
		{"unsampled", sdktrace.NeverSample()},
	} {
		b.Run("publish/"+c.name, func(b *testing.B) {
			hooks := instrumented(b, c.sampler)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				p := &queuey.PublishInfo{
					Op: queuey.OpEnqueue, System: "memory", Queue: "work", BrokerQueue: qWork, JobID: "0196f5b4-7d2c-7c3e-9d5a-3b1f2e4c5d6e", Kind: "job",
					Attempt: 1, Headers: map[string]string{},
				}
				if done := hooks.Publish(ctx, p); done != nil {
					done(nil)
				}
			}
		})
		b.Run("deliver/"+c.name, func(b *testing.B) {
			hooks := instrumented(b, c.sampler)
			p := &queuey.PublishInfo{Op: queuey.OpEnqueue, System: "memory", Queue: "work", BrokerQueue: qWork, JobID: "j", Kind: "job", Headers: map[string]string{}}
			if done := hooks.Publish(context.Background(), p); done != nil {
				done(nil)
			}
			now := time.Now()
			d := &queuey.DeliveryInfo{
				System: "memory", Queue: "work", BrokerQueue: qWork, Headers: p.Headers, DueAt: now, Started: now,
				Job: queuey.JobContext{JobID: "0196f5b4-7d2c-7c3e-9d5a-3b1f2e4c5d6e", Kind: "job", Queue: "work", BrokerQueue: qWork, Attempt: 1},
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, finish := hooks.Deliver(ctx, d)
				finish(queuey.Outcome{Result: queuey.Succeeded, Ran: true, HandlerDuration: time.Microsecond})
			}
		})
	}
}
