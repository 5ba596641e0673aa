// Package readme holds the examples README.md shows, and a few it names
// (on RabbitMQ, on a cluster, tracing, dead letters), so that they compile
// and run: TestTheREADMEShowsTheseExamplesAsTheyAre checks that every Go
// block of the README is quoted from here as it is.
package readme

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/trace"
)

// Slow retries a failed job, up to five runs in all. Without Retry a queue
// runs a job once: a failure dead-letters it.
var Slow = queuey.Queue{Name: "slow", Prefetch: 2, // max priority 10 unless set
	Retry: &queuey.RetryPolicy{MaxAttempts: 5, Backoff: queuey.ExponentialBackoff()}}

// App is the application's queues: what it publishes to and consumes.
var App = queuey.QueueSet{Prefix: "myapp", Queues: []queuey.Queue{Slow}}

// CallAPI is a job: a JSON value that names its kind and its queue.
type CallAPI struct {
	URL string `json:"url"`
}

func (CallAPI) Kind() string        { return "call_api" }
func (CallAPI) Queue() queuey.Queue { return Slow }

// CallAPIWith is the handler of CallAPI jobs, calling the API with client.
func CallAPIWith(client *http.Client) queuey.HandlerFunc[CallAPI] {
	return func(ctx context.Context, job CallAPI, jc queuey.JobContext) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, job.URL, nil)
		if err != nil {
			return queuey.Fatal(err) // no retry can mend it: dead-lettered at once
		}
		resp, err := client.Do(req)
		if err != nil {
			return err // retryable: Slow's backoff, then the dead letters
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			if jc.Deferrals >= 5 { // a cap is the handler's own
				return queuey.Fatalf("still rate limited after five deferrals")
			}
			return queuey.Defer(30*time.Second, "rate limited") // same attempt, front of the queue
		}
		return nil
	}
}

// Run enqueues one job and works until ctx ends.
func Run(ctx context.Context) error {
	backend := memory.New(nil) // or rabbitmq.Dial(ctx, "amqp://guest:guest@127.0.0.1:5672/", nil)
	producer, err := queuey.NewProducer(ctx, backend, App, nil)
	if err != nil {
		return err
	}
	worker, err := queuey.NewWorker(backend, App, nil)
	if err != nil {
		return err
	}
	if err := queuey.Handle(worker, CallAPIWith(http.DefaultClient)); err != nil {
		return err
	}
	if _, err := producer.Enqueue(ctx, CallAPI{URL: "http://127.0.0.1:8080/"}); err != nil {
		return err
	}
	return worker.Run(ctx) // returns after a graceful stop when ctx ends
}

// Traced is a producer and a worker of App whose jobs are traced.
func Traced(ctx context.Context, backend broker.Backend) (*queuey.Producer, *queuey.Worker, error) {
	ins, err := trace.New(nil) // the global OpenTelemetry providers; or pass your own
	if err != nil {
		return nil, nil, err
	}
	producer, err := queuey.NewProducer(ctx, backend, App, &queuey.ProducerConfig{Hooks: ins.Hooks()})
	if err != nil {
		return nil, nil, err
	}
	worker, err := queuey.NewWorker(backend, App, &queuey.WorkerConfig{Hooks: ins.Hooks()})
	return producer, worker, err
}

// OnRabbitMQ is a backend on the local RabbitMQ, for Run's code in place
// of the memory backend.
func OnRabbitMQ(ctx context.Context) (*rabbitmq.Backend, error) {
	backend, err := rabbitmq.Dial(ctx, "amqp://guest:guest@127.0.0.1:5672/", &rabbitmq.Options{ConnectionName: "billing-worker"})
	if err != nil {
		return nil, err // a wrong password, a missing vhost or no broker is said here, once, without the password
	}
	return backend, nil // then the same NewProducer / NewWorker / Handle / Run; Close it at the end
}

// OnACluster connects to every node of a cluster and declares the set's
// queues as quorum queues (README.md, "Past one broker";
// ARCHITECTURE.md, "Topologies").
func OnACluster(ctx context.Context) (*queuey.Producer, error) {
	backend, err := rabbitmq.DialCluster(ctx, []string{
		"amqp://guest:guest@127.0.0.1:5701/",
		"amqp://guest:guest@127.0.0.1:5702/",
		"amqp://guest:guest@127.0.0.1:5703/",
	}, nil)
	if err != nil {
		return nil, err // no node took the connection: each node's reason, without passwords
	}
	set := queuey.QueueSet{Prefix: "billing", Type: queuey.Quorum, Queues: []queuey.Queue{Slow}}
	return queuey.NewProducer(ctx, backend, set, nil) // a worker on it the same way
}

// DeadLettersOfSlow lists Slow's dead letters, shows one and replays those
// of kind call_api.
func DeadLettersOfSlow(ctx context.Context, backend broker.Backend, id string) error {
	dl, err := queuey.NewDeadLetters(ctx, backend, App, nil) // declares App's queues, as NewProducer does
	if err != nil {
		return err
	}
	list, err := dl.List(ctx, "slow") // in dead-letter order; every one goes back
	if err != nil {
		return err
	}
	for _, d := range list {
		fmt.Println(d.ID, d.Kind, d.Reason, d.Attempts, d.Age)
	}
	d, err := dl.Show(ctx, "slow", id) // queuey.ErrNotFound when it is not there
	if err != nil {
		return err
	}
	fmt.Println(d.Reason)
	n, err := dl.Replay(ctx, "slow", queuey.ReplayOptions{
		Select: queuey.ByKind("call_api"), // or ByID(ids...), All()
		After:  30 * time.Second,          // optional: held, then ahead of the backlog
	})
	fmt.Println("replayed", n)
	return err
}

// Nightly has worker run a report every day at 03:00 in Amsterdam: every
// worker that adds the schedule is a candidate, one of them fires each
// tick.
func Nightly(worker *queuey.Worker) error {
	ams, err := time.LoadLocation("Europe/Amsterdam")
	if err != nil {
		return err
	}
	return worker.AddSchedule(queuey.Schedule{
		Name:     "nightly-report",
		Job:      CallAPI{URL: "http://127.0.0.1:8080/report"},
		Cron:     "0 3 * * *",
		Location: ams,
		Missed:   queuey.FireLatest, // the default: a night missed while no worker ran is run once
	})
}
