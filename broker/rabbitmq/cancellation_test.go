package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
	"github.com/queuey-go/queuey/clocktest"
)

// awaitOutcomes waits up to within for job id's outcomes to be want.
func awaitOutcomes(t *testing.T, seen *clocktest.Outcomes, id string, within time.Duration, want ...queuey.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	if got, err := seen.Await(ctx, id, len(want)); err != nil || !slices.Equal(got, want) {
		t.Fatalf("job %s: outcomes %v (%v), want %v", id, got, err, want)
	}
}

// A job cancelled while it waits in a hold, with a worker running, stays
// cancelled across that worker's stop and a new worker's start: the new
// worker reads the ledger, and when the job comes due it ends as
// Cancelled, unrun, while its queue-mate runs.
func TestCancelOnRabbitMQHoldsAcrossAWorkerRestart(t *testing.T) {
	t.Parallel()
	seen := new(clocktest.Outcomes)
	r := newRigWith(t, queuey.Queue{Name: "work", Prefetch: 4}, nil, func(c *queuey.WorkerConfig) { c.Hooks = seen.Hooks() })
	r.start(1)
	r.enqueue(job{Name: "first"})
	r.wait(20 * time.Second) // the worker follows the ledger: it has run a job
	cancelled, err := r.producer.EnqueueAfter(t.Context(), job{Name: "cancelled"}, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := r.producer.EnqueueAfter(t.Context(), job{Name: "kept"}, 4500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.producer.Cancel(t.Context(), cancelled); err != nil {
		t.Fatal(err)
	}
	r.shutdown()

	second := newRigOn(t, r.prefix, seen)
	second.start(1)
	runs := second.wait(20 * time.Second)
	if runs[0].JobID != kept {
		t.Fatalf("the new worker ran %s (%s), want the kept job %s", runs[0].JobID, runs[0].Name, kept)
	}
	awaitOutcomes(t, seen, cancelled, 20*time.Second, queuey.Cancelled)
	for _, rg := range []*rig{r, second} {
		rg.mu.Lock()
		for _, run := range rg.runs {
			if run.JobID == cancelled {
				t.Errorf("the cancelled job ran: %+v", run)
			}
		}
		rg.mu.Unlock()
	}
}

// A running job on RabbitMQ is told through its ctx; its handler returns
// the ctx's error and the job ends as Cancelled, not retried.
func TestCancelOnRabbitMQTellsARunningJob(t *testing.T) {
	t.Parallel()
	seen := new(clocktest.Outcomes)
	retry := queuey.FixedRetries(3, 100*time.Millisecond)
	r := newRigWith(t, queuey.Queue{Name: "work", Prefetch: 1, Retry: &retry}, nil, func(c *queuey.WorkerConfig) { c.Hooks = seen.Hooks() })
	r.start(1)
	id := r.enqueue(job{Name: "long", Work: time.Minute})
	r.wait(20 * time.Second)
	if err := r.producer.Cancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	awaitOutcomes(t, seen, id, 20*time.Second, queuey.Cancelled)
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.runs); n != 1 {
		t.Fatalf("the job ran %d times, want once", n)
	}
}

// Cancel with no worker following returns at once; one whose ctx ends
// while a follower does not answer is a *CancelError.
func TestCancelOnRabbitMQWithoutWorkers(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := r.producer.Cancel(ctx, "no-such-job"); err != nil {
		t.Fatalf("Cancel with no worker: %v", err)
	}
	silent, err := r.backend.FollowCancels(t.Context(), r.prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	short, cancelShort := context.WithTimeout(t.Context(), time.Second)
	defer cancelShort()
	err = r.producer.Cancel(short, "another")
	if ce, ok := errors.AsType[*queuey.CancelError](err); !ok || ce.Workers != 1 || ce.Answered != 0 {
		t.Fatalf("got %v, want a *CancelError with 0 of 1 answered", err)
	}
}

// newRigOn is a second worker (and its backend) on the queue set of
// prefix, as newRig makes one, its deliveries told to seen.
func newRigOn(t *testing.T, prefix string, seen *clocktest.Outcomes) *rig {
	t.Helper()
	r := &rig{t: t, prefix: prefix, changed: make(chan struct{})}
	r.backend = rabbittest.Dial(t, nil)
	t.Cleanup(func() { _ = r.backend.Close() })
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.Queue{{Name: "work", Prefetch: 4}}, RetryGranularity: 100 * time.Millisecond, DeferGranularity: 100 * time.Millisecond}
	var err error
	r.worker, err = queuey.NewWorker(r.backend, set, &queuey.WorkerConfig{Concurrency: 1, Logger: slog.New(slog.DiscardHandler), Hooks: seen.Hooks()})
	if err != nil {
		t.Fatal(err)
	}
	err = queuey.Handle(r.worker, func(_ context.Context, j job, jc queuey.JobContext) error {
		r.record(j.Name, jc)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
