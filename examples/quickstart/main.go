// Command quickstart tours queuey on the in-memory backend, with no broker to
// run: a job that succeeds, one that succeeds on its second attempt, one that
// fails fatally into the dead letters, and a call to a rate-limited API that
// answers 429 and is deferred, then overtakes the backlog queued behind it.
//
//	go run ./examples/quickstart
//
// It uses the real clock and short delays, so the tour takes about two
// seconds. The tour goes to stdout; the library's warnings and errors (a
// retry, a fatal failure) go to stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
)

// The application's queues. Jobs retries a failed job twice, 200 ms apart.
// API takes one delivery at a time (Prefetch 1), so the order in which its
// jobs run is the order in which the broker hands them out; its top priority
// is the default, 10, where deferred jobs come back.
var (
	Jobs = queuey.Queue{Name: "jobs", Retry: &queuey.RetryPolicy{MaxAttempts: 3, Backoff: queuey.FixedBackoff(200 * time.Millisecond)}}
	API  = queuey.Queue{Name: "api", Prefetch: 1}

	// Delays are rounded up to a granularity, one hold queue per step; the
	// default of 1 s would make a 200 ms backoff wait a whole second.
	app = queuey.QueueSet{
		Prefix:           "quickstart",
		Queues:           []queuey.Queue{Jobs, API},
		RetryGranularity: 100 * time.Millisecond,
		DeferGranularity: 100 * time.Millisecond,
	}
)

// Greet just succeeds.
type Greet struct{ Name string }

func (Greet) Kind() string        { return "greet" }
func (Greet) Queue() queuey.Queue { return Jobs }

// Sync fails on its first attempt, as a flaky network would make it.
type Sync struct{}

func (Sync) Kind() string        { return "sync" }
func (Sync) Queue() queuey.Queue { return Jobs }

// SendEmail fails fatally for an address no retry can mend.
type SendEmail struct{ To string }

func (SendEmail) Kind() string        { return "send_email" }
func (SendEmail) Queue() queuey.Queue { return Jobs }

// CallAPI calls the rate-limited API.
type CallAPI struct{}

func (CallAPI) Kind() string        { return "call_api" }
func (CallAPI) Queue() queuey.Queue { return API }

// Report is the backlog: slow jobs queued on API behind the call.
type Report struct{ N int }

func (Report) Kind() string        { return "report" }
func (Report) Queue() queuey.Queue { return API }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run tours queuey, printing to out, and returns once the worker has
// stopped: after the last expected run, or early when ctx ends.
func run(ctx context.Context, out io.Writer) error {
	t := &tour{out: out, start: time.Now(), names: map[string]string{}, api: &fakeAPI{}}
	t.backend = &recordHolds{Backend: memory.New(nil), used: map[string]int{}}
	defer t.backend.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	producer, err := queuey.NewProducer(ctx, t.backend, app, &queuey.ProducerConfig{Logger: logger})
	if err != nil {
		return err
	}
	worker, err := queuey.NewWorker(t.backend, app, &queuey.WorkerConfig{
		// Two handlers at once: the slow API backlog takes one slot and
		// does not hold up the jobs queue.
		Concurrency: 2,
		Logger:      logger,
		Middleware:  []queuey.Middleware{t.trace},
	})
	if err != nil {
		return err
	}
	if err := errors.Join(
		queuey.Handle(worker, t.greet),
		queuey.Handle(worker, t.sync),
		queuey.Handle(worker, t.sendEmail),
		queuey.Handle(worker, t.callAPI),
		queuey.Handle(worker, t.report),
	); err != nil {
		return err
	}

	// Everything is queued before the worker starts, so the API call is
	// first in line and the reports wait behind it.
	type planned struct {
		name string
		job  queuey.Job
		runs int // how often its handler will run
	}
	jobs := []planned{
		{"greet", Greet{Name: "Ada"}, 1},
		{"sync", Sync{}, 2},
		{"send_email", SendEmail{To: "ada@"}, 1},
		{"call_api", CallAPI{}, 2},
	}
	for n := 1; n <= 5; n++ {
		jobs = append(jobs, planned{fmt.Sprintf("report %d", n), Report{N: n}, 1})
	}
	runs := 0
	for _, j := range jobs {
		id, err := producer.Enqueue(ctx, j.job)
		if err != nil {
			return err
		}
		t.names[id] = j.name // the id stays the same across retries and deferrals
		runs += j.runs
	}
	t.remaining, t.done = runs, make(chan struct{})
	fmt.Fprintf(out, "enqueued %d jobs on %s and %s; starting the worker\n", len(jobs), "quickstart.jobs", "quickstart.api")

	// Run until every expected run has finished, then stop the worker
	// gracefully: Run returns once the running handlers have settled.
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	stopped := make(chan error, 1)
	go func() { stopped <- worker.Run(workerCtx) }()
	select {
	case <-t.done:
	case <-ctx.Done():
	}
	stopWorker()
	if err := <-stopped; err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted before the tour finished: %w", context.Cause(ctx))
	}

	t.summary()
	fmt.Fprintf(out, "done in %.1fs\n", time.Since(t.start).Seconds())
	return nil
}

// tour holds the handlers' shared state and prints what happens.
type tour struct {
	out     io.Writer
	start   time.Time
	backend *recordHolds
	api     *fakeAPI
	names   map[string]string // job id -> name; written before the worker starts

	mu        sync.Mutex // guards out and remaining: handlers run concurrently
	remaining int
	done      chan struct{} // closed when remaining reaches 0
}

func (t *tour) greet(ctx context.Context, job Greet, jc queuey.JobContext) error {
	return nil
}

func (t *tour) sync(ctx context.Context, job Sync, jc queuey.JobContext) error {
	if jc.Attempt == 1 {
		return errors.New("connection reset by peer") // a plain error is retryable
	}
	return nil
}

func (t *tour) sendEmail(ctx context.Context, job SendEmail, jc queuey.JobContext) error {
	return queuey.Fatalf("invalid address %q", job.To)
}

func (t *tour) callAPI(ctx context.Context, job CallAPI, jc queuey.JobContext) error {
	if status, retryAfter := t.api.Call(); status == http.StatusTooManyRequests {
		// Not a failure: it is just not time yet. A deferral spends no
		// attempt and comes back at the queue's top priority.
		return queuey.Defer(retryAfter, "rate limited (429)")
	}
	return nil
}

func (t *tour) report(ctx context.Context, job Report, jc queuey.JobContext) error {
	if err := sleep(ctx, 300*time.Millisecond); err != nil { // slow work
		return err
	}
	if job.N == 1 {
		// Keep the line busy until the deferred call is back on the queue,
		// so that it overtakes reports 2-5 on any machine, however slow,
		// rather than racing them. (Held releases what is due as it counts.)
		for t.backend.Held(jc.Queue) > 0 {
			if err := sleep(ctx, 10*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// trace is a middleware: it prints each run, and the outcome the handler's
// result asks for.
func (t *tour) trace(ctx context.Context, jc queuey.JobContext, next func(context.Context) error) error {
	name := t.names[jc.JobID]
	t.printf("run  %-11s attempt %d, deferrals %d, priority %d", name, jc.Attempt, jc.Deferrals, jc.Priority)
	err := next(ctx)
	t.printf("  -> %-11s %s", name, outcome(err, jc))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.remaining--; t.remaining == 0 {
		close(t.done)
	}
	return err
}

// outcome says what the worker does with a handler's result (SPEC §2).
func outcome(err error, jc queuey.JobContext) string {
	var deferred *queuey.DeferError
	var fatal *queuey.FatalError
	switch {
	case err == nil:
		return "ok: acked"
	case errors.As(err, &deferred):
		return fmt.Sprintf("deferred for %v (%s): held, then back ahead of the backlog; no attempt spent",
			deferred.Delay, deferred.Reason)
	case errors.As(err, &fatal):
		return fmt.Sprintf("fatal (%v): dead-lettered at once", fatal.Err)
	case jc.IsLastAttempt():
		return fmt.Sprintf("failed (%v): attempts used up, dead-lettered", err)
	default:
		return fmt.Sprintf("failed (%v): retried after the backoff, attempt %d of %d", err, jc.Attempt+1, jc.MaxAttempts)
	}
}

func (t *tour) summary() {
	t.printf("summary")
	for _, q := range []string{"quickstart.jobs", "quickstart.api"} {
		// A retry, deferral or dead letter acks the original delivery once
		// its next step is confirmed, so acks count runs, not jobs.
		fmt.Fprintf(t.out, "  %s: %d deliveries acked, %d pending\n", q, len(t.backend.Acked(q)), t.backend.Pending(q))
		for _, dl := range t.backend.DeadLetters(q) {
			fmt.Fprintf(t.out, "  dead letter on %s: %s (attempt %d): %s\n", q, t.names[dl.ID], dl.Attempt, dl.Reason)
		}
	}
	fmt.Fprintf(t.out, "  hold queues used: %s\n", strings.Join(t.backend.holdQueues(), ", "))
}

func (t *tour) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%5.2fs  "+format+"\n", append([]any{time.Since(t.start).Seconds()}, args...)...)
}

// sleep waits d, or less if ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fakeAPI stands in for a rate-limited HTTP API: the first call is answered
// "429 Too Many Requests" with "Retry-After: 1", later calls succeed.
type fakeAPI struct {
	mu    sync.Mutex
	calls int
}

func (a *fakeAPI) Call() (status int, retryAfter time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.calls++; a.calls == 1 {
		return http.StatusTooManyRequests, time.Second
	}
	return http.StatusOK, 0
}

// recordHolds is the memory backend, noting every hold queue used: its own
// HoldQueues shows only what is held right now, and at the end of the tour
// nothing is.
type recordHolds struct {
	*memory.Backend
	mu   sync.Mutex
	used map[string]int // hold queue -> messages held there
}

func (b *recordHolds) Hold(ctx context.Context, msg broker.Message, ttl time.Duration) error {
	err := b.Backend.Hold(ctx, msg, ttl)
	if err == nil {
		b.mu.Lock()
		b.used[broker.HoldQueueName(msg.Queue, ttl)]++
		b.mu.Unlock()
	}
	return err
}

func (b *recordHolds) holdQueues() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for q, n := range b.used {
		out = append(out, fmt.Sprintf("%s (%d)", q, n))
	}
	slices.Sort(out)
	return out
}
