package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
)

// CallAPI is a job of the examples below.
type CallAPI struct {
	N int `json:"n"`
}

var api = queuey.Queue{Name: "api", Prefetch: 4}

func (CallAPI) Kind() string        { return "call_api" }
func (CallAPI) Queue() queuey.Queue { return api }

// startWorker runs worker until the returned func is called; that func
// waits for it to stop.
func startWorker(worker *queuey.Worker) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- worker.Run(ctx) }()
	return func() error {
		cancel()
		return <-stopped
	}
}

// exampleApp returns a producer and a one-job-at-a-time worker of the api
// queue on a fresh memory backend.
func exampleApp(cfg queuey.WorkerConfig) (*memory.Backend, queuey.QueueSet, *queuey.Producer, *queuey.Worker) {
	backend := memory.New(nil)
	set := queuey.QueueSet{Prefix: "example", Queues: []queuey.Queue{api}, RetryGranularity: time.Millisecond, DeferGranularity: time.Millisecond}
	producer, err := queuey.NewProducer(context.Background(), backend, set, nil)
	if err != nil {
		panic(err)
	}
	cfg.Concurrency, cfg.Logger = 1, slog.New(slog.DiscardHandler)
	worker, err := queuey.NewWorker(backend, set, &cfg)
	if err != nil {
		panic(err)
	}
	return backend, set, producer, worker
}

// When an API says the whole client is rate limited, PauseQueue defers the
// job and stops its queue until the wait is over: its queue-mates do not
// call the API meanwhile, and the deferred job runs first afterwards.
func ExamplePauseQueue() {
	_, _, producer, worker := exampleApp(queuey.WorkerConfig{})
	done := make(chan struct{})
	err := queuey.Handle(worker, func(ctx context.Context, job CallAPI, jc queuey.JobContext) error {
		fmt.Printf("job %d: attempt %d, deferrals %d\n", job.N, jc.Attempt, jc.Deferrals)
		if job.N == 1 && jc.Deferrals == 0 {
			return queuey.PauseQueue(20*time.Millisecond, "429: Retry-After 0.02")
		}
		if job.N == 3 {
			close(done)
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	for n := 1; n <= 3; n++ {
		if _, err := producer.Enqueue(context.Background(), CallAPI{N: n}); err != nil {
			panic(err)
		}
	}
	stop := startWorker(worker)
	<-done
	fmt.Println("stopped:", stop())
	// Output:
	// job 1: attempt 1, deferrals 0
	// job 1: attempt 1, deferrals 1
	// job 2: attempt 1, deferrals 0
	// job 3: attempt 1, deferrals 0
	// stopped: <nil>
}

// Retry policies can change while the worker runs: here every call_api job
// gets three attempts, 5 ms apart, whatever its queue says.
func ExampleWorker_SetKindRetryPolicy() {
	_, _, producer, worker := exampleApp(queuey.WorkerConfig{})
	done := make(chan struct{})
	err := queuey.Handle(worker, func(ctx context.Context, job CallAPI, jc queuey.JobContext) error {
		if jc.Attempt < 3 {
			fmt.Printf("attempt %d of %d failed\n", jc.Attempt, jc.MaxAttempts)
			return errors.New("upstream timeout")
		}
		fmt.Printf("attempt %d of %d succeeded\n", jc.Attempt, jc.MaxAttempts)
		close(done)
		return nil
	})
	if err != nil {
		panic(err)
	}
	stop := startWorker(worker)
	policy := queuey.FixedRetries(3, 5*time.Millisecond)
	if err := worker.SetKindRetryPolicy("call_api", &policy); err != nil {
		panic(err)
	}
	if _, err := producer.Enqueue(context.Background(), CallAPI{N: 1}); err != nil {
		panic(err)
	}
	<-done
	fmt.Println("stopped:", stop())
	// Output:
	// attempt 1 of 3 failed
	// attempt 2 of 3 failed
	// attempt 3 of 3 succeeded
	// stopped: <nil>
}

// A correlation id given at enqueue stays with the job through its
// deferrals and retries.
func ExampleWithCorrelationID() {
	_, _, producer, worker := exampleApp(queuey.WorkerConfig{})
	done := make(chan struct{})
	err := queuey.Handle(worker, func(ctx context.Context, job CallAPI, jc queuey.JobContext) error {
		fmt.Printf("deferrals %d: correlation id %s\n", jc.Deferrals, jc.CorrelationID)
		if jc.Deferrals == 0 {
			return queuey.Defer(5*time.Millisecond, "429")
		}
		close(done)
		return nil
	})
	if err != nil {
		panic(err)
	}
	if _, err := producer.Enqueue(context.Background(), CallAPI{N: 1}, queuey.WithCorrelationID("order-7")); err != nil {
		panic(err)
	}
	stop := startWorker(worker)
	<-done
	fmt.Println("stopped:", stop())
	// Output:
	// deferrals 0: correlation id order-7
	// deferrals 1: correlation id order-7
	// stopped: <nil>
}

// Dead letters can be listed and replayed, here once the bug that made
// the job fail is fixed. A replayed job starts again at attempt 1.
func ExampleDeadLetters() {
	ctx := context.Background()
	dead := make(chan struct{})
	backend, set, producer, worker := exampleApp(queuey.WorkerConfig{
		OnDeadLetter: func(ctx context.Context, dl queuey.DeadLetterEvent) { close(dead) },
	})
	err := queuey.Handle(worker, func(ctx context.Context, job CallAPI, jc queuey.JobContext) error {
		return queuey.Fatalf("job %d: no such account", job.N) // a bug
	})
	if err != nil {
		panic(err)
	}
	if _, err := producer.Enqueue(ctx, CallAPI{N: 7}); err != nil {
		panic(err)
	}
	stop := startWorker(worker)
	<-dead
	if err := stop(); err != nil { // a stop lets the dead letter be published
		panic(err)
	}

	dls, err := queuey.NewDeadLetters(ctx, backend, set, nil)
	if err != nil {
		panic(err)
	}
	list, err := dls.List(ctx, "api")
	if err != nil {
		panic(err)
	}
	for _, d := range list {
		fmt.Printf("dead letter: %s, %d attempt, %q\n", d.Kind, d.Attempts, d.Reason)
	}
	// With the bug fixed, a new worker runs the replayed job.
	n, err := dls.Replay(ctx, "api", queuey.ReplayOptions{Select: queuey.ByKind("call_api")})
	fmt.Println("replayed:", n, err)
	runFixed(backend, set)
	// Output:
	// dead letter: call_api, 1 attempt, "fatal error: job 7: no such account"
	// replayed: 1 <nil>
	// replayed job 7: attempt 1
	// stopped: <nil>
}

// runFixed runs ExampleDeadLetters' replayed job on a new worker, its
// handler fixed, and stops that worker.
func runFixed(backend *memory.Backend, set queuey.QueueSet) {
	worker, err := queuey.NewWorker(backend, set, &queuey.WorkerConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	ran := make(chan struct{})
	err = queuey.Handle(worker, func(ctx context.Context, job CallAPI, jc queuey.JobContext) error {
		fmt.Printf("replayed job %d: attempt %d\n", job.N, jc.Attempt)
		close(ran)
		return nil
	})
	if err != nil {
		panic(err)
	}
	stop := startWorker(worker)
	<-ran
	fmt.Println("stopped:", stop())
}
