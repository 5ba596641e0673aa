package sdktest_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/trace"
)

// email is the examples' job.
type email struct {
	To string `json:"to"`
}

var emails = queuey.Queue{Name: "emails", Prefetch: 1}

func (email) Kind() string        { return "send_email" }
func (email) Queue() queuey.Queue { return emails }

// A deferred job is one trace: the enqueue, the run that deferred, the
// deferral's publish, and the run after the wait, each the child of the one
// before.
func Example() {
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(ctx) }()
	inst, err := trace.New(&trace.Options{TracerProvider: tp})
	if err != nil {
		panic(err)
	}

	backend := memory.New(nil)
	defer backend.Close()
	app := queuey.QueueSet{Prefix: "example", Queues: []queuey.Queue{emails}, DeferGranularity: time.Millisecond}
	producer, err := queuey.NewProducer(ctx, backend, app, &queuey.ProducerConfig{Hooks: inst.Hooks()})
	if err != nil {
		panic(err)
	}
	worker, err := queuey.NewWorker(backend, app, &queuey.WorkerConfig{Hooks: inst.Hooks(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	sent := make(chan struct{})
	err = queuey.Handle(worker, func(ctx context.Context, job email, jc queuey.JobContext) error {
		if jc.Deferrals == 0 {
			return queuey.Defer(5*time.Millisecond, "429: retry after 5ms")
		}
		close(sent)
		return nil
	})
	if err != nil {
		panic(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- worker.Run(runCtx) }()
	if _, err := producer.Enqueue(ctx, email{To: "ada@example.com"}); err != nil {
		panic(err)
	}
	<-sent
	stop()
	if err := <-stopped; err != nil { // once Run returns, every span has ended
		panic(err)
	}
	printTree(spans.Ended())
	// Output:
	// send example.emails (enqueue)
	//   process example.emails: deferred [deferred]
	//     send example.emails (deferral)
	//       process example.emails: succeeded
}

// printTree prints spans from the root down, each under its parent.
func printTree(spans []sdktrace.ReadOnlySpan) {
	children := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		parent := ""
		if s.Parent().IsValid() {
			parent = s.Parent().SpanID().String()
		}
		children[parent] = append(children[parent], s)
	}
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		for _, s := range children[parent] {
			attrs := map[string]string{}
			for _, kv := range s.Attributes() {
				attrs[string(kv.Key)] = kv.Value.String()
			}
			line := strings.Repeat("  ", depth) + s.Name()
			if op := attrs[string(trace.AttrPublishOp)]; op != "" {
				line += " (" + op + ")"
			}
			if outcome := attrs[string(trace.AttrOutcome)]; outcome != "" {
				line += ": " + outcome
			}
			for _, e := range s.Events() {
				line += " [" + e.Name + "]"
			}
			fmt.Println(line)
			walk(s.SpanContext().SpanID().String(), depth+1)
		}
	}
	walk("", 0)
}
