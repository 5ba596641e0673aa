package trace_test

import (
	"context"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/trace"
)

// email is the example's job.
type email struct {
	To string `json:"to"`
}

var emails = queuey.Queue{Name: "emails", Prefetch: 1}

func (email) Kind() string        { return "send_email" }
func (email) Queue() queuey.Queue { return emails }

// In a service, the OpenTelemetry SDK is set up once (an exporter behind a
// batching processor, set with otel.SetTracerProvider and
// otel.SetMeterProvider), and producers and workers share one
// Instrumentation. With no providers in Options, New takes the global ones.
// The runnable examples, with their spans printed, are in trace/sdktest.
func ExampleNew() {
	ctx := context.Background()
	inst, err := trace.New(nil) // the global TracerProvider and MeterProvider
	if err != nil {
		panic(err)
	}
	backend := memory.New(nil)
	defer backend.Close()
	app := queuey.QueueSet{Prefix: "myapp", Queues: []queuey.Queue{emails}}
	producer, err := queuey.NewProducer(ctx, backend, app, &queuey.ProducerConfig{Hooks: inst.Hooks()})
	if err != nil {
		panic(err)
	}
	worker, err := queuey.NewWorker(backend, app, &queuey.WorkerConfig{Hooks: inst.Hooks()})
	if err != nil {
		panic(err)
	}
	err = queuey.Handle(worker, func(ctx context.Context, job email, jc queuey.JobContext) error {
		return nil // send it; its span is the child of the job's process span
	})
	if err != nil {
		panic(err)
	}
	if _, err := producer.Enqueue(ctx, email{To: "ada@example.com"}); err != nil {
		panic(err)
	}
	// worker.Run(ctx) until the service stops
}
