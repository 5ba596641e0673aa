package queuey_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
)

// SendEmail is a job: a JSON-serialisable value that names its kind and
// its queue.
type SendEmail struct {
	To string `json:"to"`
}

var emails = queuey.Queue{Name: "emails", Prefetch: 1}

func (SendEmail) Kind() string        { return "send_email" }
func (SendEmail) Queue() queuey.Queue { return emails }

// A handler that meets a rate limit defers the job: it comes back after the
// delay, ahead of the backlog, with the same attempt.
func Example() {
	ctx := context.Background()
	backend := memory.New(nil) // or a RabbitMQ backend: the same code
	app := queuey.QueueSet{Prefix: "example", Queues: []queuey.Queue{emails}, DeferGranularity: time.Millisecond}

	producer, err := queuey.NewProducer(ctx, backend, app, nil)
	if err != nil {
		panic(err)
	}
	worker, err := queuey.NewWorker(backend, app, &queuey.WorkerConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	sent := make(chan struct{})
	err = queuey.Handle(worker, func(ctx context.Context, job SendEmail, jc queuey.JobContext) error {
		fmt.Printf("to %s: attempt %d, deferrals %d, priority %d\n", job.To, jc.Attempt, jc.Deferrals, jc.Priority)
		if jc.Deferrals == 0 {
			return queuey.Defer(20*time.Millisecond, "429: retry after 20ms")
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
	if _, err := producer.Enqueue(ctx, SendEmail{To: "ada@example.com"}); err != nil {
		panic(err)
	}
	<-sent
	stop()
	fmt.Println("worker stopped:", <-stopped)
	// Output:
	// to ada@example.com: attempt 1, deferrals 0, priority 0
	// to ada@example.com: attempt 1, deferrals 1, priority 10
	// worker stopped: <nil>
}

func ExampleRetryPolicy_Decide() {
	policy := queuey.RetryPolicy{MaxAttempts: 4, Backoff: queuey.Backoff{Base: time.Second, Factor: 2, Max: 3 * time.Second}}
	for attempt := 1; attempt <= 4; attempt++ {
		delay, retry := policy.Decide(attempt)
		fmt.Printf("failed attempt %d: retry %t after %v\n", attempt, retry, delay)
	}
	// Output:
	// failed attempt 1: retry true after 1s
	// failed attempt 2: retry true after 2s
	// failed attempt 3: retry true after 3s
	// failed attempt 4: retry false after 0s
}

func ExampleDefer() {
	err := queuey.Defer(30*time.Second, "rate limited")
	fmt.Println(err)
	// Output: job deferred for 30s: rate limited
}

// A schedule enqueues its job at each tick, from whichever worker leads it;
// add it to every worker of a fleet and each tick still runs once.
func ExampleWorker_AddSchedule() {
	ctx := context.Background()
	backend := memory.New(nil)
	app := queuey.QueueSet{Queues: []queuey.Queue{emails}}
	worker, err := queuey.NewWorker(backend, app, &queuey.WorkerConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	ran := make(chan string, 1)
	err = queuey.Handle(worker, func(ctx context.Context, job SendEmail, jc queuey.JobContext) error {
		select {
		case ran <- fmt.Sprintf("to %s, for a tick on a whole second: %v", job.To, jc.EnqueuedAt.Equal(jc.EnqueuedAt.Truncate(time.Second))):
		default: // a later tick, while the example stops
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	err = worker.AddSchedule(queuey.Schedule{Name: "digest", Job: SendEmail{To: "team@example.com"}, Every: time.Second})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- worker.Run(runCtx) }()
	fmt.Println(<-ran)
	stop()
	fmt.Println("worker stopped:", <-stopped)
	// Output:
	// to team@example.com, for a tick on a whole second: true
	// worker stopped: <nil>
}
