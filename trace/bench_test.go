package trace_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/trace"
)

// BenchmarkInstrumentation is what the instrumentation costs a worker: b.N
// jobs are enqueued up front (untimed), then a worker with 8 handler slots
// and a trivial handler drains them on the memory backend and the real
// clock. The instrumented run samples and builds every span (no exporter)
// and records every metric into a manual reader.
//
//	go test -run '^$' -bench Instrumentation -benchtime 20000x -count 3 ./trace/
func BenchmarkInstrumentation(b *testing.B) {
	b.Run("plain", func(b *testing.B) { drain(b, nil) })
	b.Run("instrumented", func(b *testing.B) { drain(b, instrumented(b, sdktrace.AlwaysSample())) })
	// Where the cost goes: the metrics, and spans the sampler dropped.
	b.Run("instrumented-unsampled", func(b *testing.B) { drain(b, instrumented(b, sdktrace.NeverSample())) })
}

// instrumented returns hooks on an SDK tracer provider without an exporter
// and a meter provider read by hand.
func instrumented(b *testing.B, sampler sdktrace.Sampler) *queuey.Hooks {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	inst, err := trace.New(&trace.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	return inst.Hooks()
}

func drain(b *testing.B, hooks *queuey.Hooks) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	set := setOf(queuey.Queue{Name: "work", Prefetch: 64})
	backend := memory.New(nil)
	defer backend.Close()
	producer, err := queuey.NewProducer(ctx, backend, set, &queuey.ProducerConfig{Hooks: hooks, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		if _, err := producer.Enqueue(ctx, job{Name: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	worker, err := queuey.NewWorker(backend, set, &queuey.WorkerConfig{Concurrency: 8, Hooks: hooks, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	var ran atomic.Int64
	done := make(chan struct{})
	err = queuey.Handle(worker, func(context.Context, job, queuey.JobContext) error {
		if ran.Add(1) == int64(b.N) {
			close(done)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go func() { stopped <- worker.Run(runCtx) }()
	<-done
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
}
