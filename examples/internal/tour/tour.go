// Package tour is the quick-start tour of queuey, shared by the examples so
// that it reads the same on every backend: a job that succeeds, one that
// succeeds on its second attempt, one that fails fatally into the dead
// letters, and a call to a rate-limited API that answers 429 and is
// deferred, then overtakes the backlog queued behind it.
//
// It uses the real clock and short delays, so it takes about two seconds.
// The tour goes to out; the library's warnings and errors (a retry, a fatal
// failure) go to stderr.
package tour

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
)

// The tour's queues. Jobs retries a failed job twice, 200 ms apart. API
// takes one delivery at a time (Prefetch 1), so the order in which its jobs
// run is the order in which the broker hands them out; its top priority is
// the default, 10, where deferred jobs come back.
var (
	Jobs = queuey.Queue{Name: "jobs", Retry: &queuey.RetryPolicy{MaxAttempts: 3, Backoff: queuey.FixedBackoff(200 * time.Millisecond)}}
	API  = queuey.Queue{Name: "api", Prefetch: 1}
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

// reports is the size of the backlog behind the call.
const reports = 5

// Config is what differs between the runs of the tour.
type Config struct {
	// Prefix goes before every queue name, with a dot: "<Prefix>.jobs".
	Prefix string
	// Pending counts the messages ready on a broker queue: not held, not
	// handed to a consumer. The tour needs it to know when the deferred
	// call is back on its queue, and reports it in the summary. Default:
	// the backend's own Pending method, which memory.Backend has;
	// broker.Backend has no such call, so other backends must set it.
	Pending func(queue string) (int, error)
}

// pendingCounter and ackCounter are inspection methods beyond
// broker.Backend; memory.Backend has both.
type pendingCounter interface {
	Pending(queue string) int
}

type ackCounter interface {
	AckedCount(queue string) int
}

// Run tours queuey on backend, printing to out, and returns once the worker
// has stopped: after the last expected run, or early when ctx ends. It
// returns the broker queues the tour made (work queues, their dead-letter
// queues, the hold queues used), sorted, also when it fails part-way, so
// that the caller can delete them. The caller owns backend.
func Run(ctx context.Context, backend broker.Backend, cfg Config, out io.Writer) (made []string, err error) {
	rec := &recorder{Backend: backend, made: map[string]bool{}, held: map[string]int{}, dead: map[string][]broker.DeadLetter{}}
	defer func() { made = rec.queues() }()

	pending := cfg.Pending
	if pending == nil {
		p, ok := backend.(pendingCounter)
		if !ok {
			return nil, fmt.Errorf("tour: the %s backend cannot count a queue's messages: set Config.Pending", backend.Name())
		}
		pending = func(q string) (int, error) { return p.Pending(q), nil }
	}
	// Acks are only visible on the memory backend; elsewhere the summary
	// leaves them out.
	acked, _ := backend.(ackCounter)

	app := queuey.QueueSet{
		Prefix: cfg.Prefix,
		Queues: []queuey.Queue{Jobs, API},
		// Delays are rounded up to a granularity, one hold queue per step;
		// the default of 1 s would make a 200 ms backoff wait a whole second.
		RetryGranularity: 100 * time.Millisecond,
		DeferGranularity: 100 * time.Millisecond,
	}
	// A handler that cannot go on (report 1, when counting fails) stops the
	// tour through this ctx, with the cause.
	ctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	t := &tour{
		out: out, start: time.Now(), rec: rec, pending: pending, abort: abort, api: &fakeAPI{},
		names: map[string]string{},
		queue: func(q queuey.Queue) string { return broker.QueueName(app.Prefix, q.Name) },
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	producer, err := queuey.NewProducer(ctx, rec, app, &queuey.ProducerConfig{Logger: logger})
	if err != nil {
		return nil, err
	}
	worker, err := queuey.NewWorker(rec, app, &queuey.WorkerConfig{
		// Two handlers at once: the slow API backlog takes one slot and
		// does not hold up the jobs queue.
		Concurrency: 2,
		Logger:      logger,
		Middleware:  []queuey.Middleware{t.trace},
	})
	if err != nil {
		return nil, err
	}
	if err := errors.Join(
		queuey.Handle(worker, t.greet),
		queuey.Handle(worker, t.sync),
		queuey.Handle(worker, t.sendEmail),
		queuey.Handle(worker, t.callAPI),
		queuey.Handle(worker, t.report),
	); err != nil {
		return nil, err
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
	for n := 1; n <= reports; n++ {
		jobs = append(jobs, planned{fmt.Sprintf("report %d", n), Report{N: n}, 1})
	}
	runs := 0
	for _, j := range jobs {
		id, err := producer.Enqueue(ctx, j.job)
		if err != nil {
			return nil, err
		}
		t.names[id] = j.name // the id stays the same across retries and deferrals
		runs += j.runs
	}
	t.remaining, t.done = runs, make(chan struct{})
	fmt.Fprintf(out, "enqueued %d jobs on %s and %s (%s backend); starting the worker\n",
		len(jobs), t.queue(Jobs), t.queue(API), backend.Name())

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
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted before the tour finished: %w", context.Cause(ctx))
	}

	if err := t.summary(acked); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "done in %.1fs\n", time.Since(t.start).Seconds())
	return nil, nil
}

// tour holds the handlers' shared state and prints what happens.
type tour struct {
	out     io.Writer
	start   time.Time
	rec     *recorder
	pending func(queue string) (int, error)
	abort   context.CancelCauseFunc
	api     *fakeAPI
	names   map[string]string // job id -> name; written before the worker starts
	queue   func(queuey.Queue) string

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
	if job.N != 1 {
		return nil
	}
	// Keep the line busy until the deferred call is back on the queue, so
	// that it overtakes reports 2-5 on any machine, however slow, rather
	// than racing them. Count the queue itself, not the hold queue: on
	// RabbitMQ a message the hold queue let go is not yet on the queue.
	for {
		n, err := t.pending(jc.BrokerQueue)
		if err != nil {
			t.abort(fmt.Errorf("count %s: %w", jc.BrokerQueue, err))
			return err
		}
		if n >= reports { // reports 2-5 behind this one, and the call
			return nil
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
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

// outcome says what the worker does with a handler's result (ARCHITECTURE.md §1).
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

// summary reports, per queue, what is left on it and in its dead-letter
// queue, with the dead letters the tour made, then the hold queues used.
// acked, when the backend has it, adds how many deliveries were acked.
func (t *tour) summary(acked ackCounter) error {
	t.printf("summary")
	for _, q := range []string{t.queue(Jobs), t.queue(API)} {
		n, err := t.pending(q)
		if err != nil {
			return fmt.Errorf("count %s: %w", q, err)
		}
		dead, err := t.pending(broker.DeadQueueName(q))
		if err != nil {
			return fmt.Errorf("count %s: %w", broker.DeadQueueName(q), err)
		}
		if acked != nil {
			// A retry, deferral or dead letter acks the original delivery
			// once its next step is confirmed, so acks count runs, not jobs.
			fmt.Fprintf(t.out, "  %s: %d deliveries acked, %d pending\n", q, acked.AckedCount(q), n)
		} else {
			fmt.Fprintf(t.out, "  %s: %d pending\n", q, n)
		}
		fmt.Fprintf(t.out, "  %s: %d left\n", broker.DeadQueueName(q), dead)
		for _, dl := range t.rec.deadLetters(q) {
			fmt.Fprintf(t.out, "  dead letter on %s: %s (attempt %d): %s\n", q, t.names[dl.ID], dl.Attempt, dl.Reason)
		}
	}
	fmt.Fprintf(t.out, "  hold queues used: %s\n", strings.Join(t.rec.holdQueues(), ", "))
	return nil
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

// recorder is a backend that notes what the tour did to the broker: the
// queues declared, the hold queues used (a backend only shows what is held
// right now, and at the end of the tour nothing is) and the dead letters.
type recorder struct {
	broker.Backend
	mu   sync.Mutex
	made map[string]bool                // every queue the tour may have made
	held map[string]int                 // hold queue -> messages held there
	dead map[string][]broker.DeadLetter // work queue -> its dead letters
}

func (r *recorder) Declare(ctx context.Context, queues ...broker.QueueSpec) error {
	// Noted before the call: a declare that fails part-way may still have
	// made some of them, and the caller should delete those too.
	r.mu.Lock()
	for _, q := range queues {
		r.made[q.Name], r.made[broker.DeadQueueName(q.Name)] = true, true
	}
	r.mu.Unlock()
	return r.Backend.Declare(ctx, queues...)
}

func (r *recorder) DeclareHold(ctx context.Context, queue string, ttl time.Duration) error {
	r.mu.Lock()
	r.made[broker.HoldQueueName(queue, ttl)] = true // as above
	r.mu.Unlock()
	return r.Backend.DeclareHold(ctx, queue, ttl)
}

func (r *recorder) Hold(ctx context.Context, msg broker.Message, ttl time.Duration) error {
	err := r.Backend.Hold(ctx, msg, ttl)
	if err == nil {
		r.mu.Lock()
		r.held[broker.HoldQueueName(msg.Queue, ttl)]++
		r.mu.Unlock()
	}
	return err
}

func (r *recorder) DeadLetter(ctx context.Context, dl broker.DeadLetter) error {
	err := r.Backend.DeadLetter(ctx, dl)
	if err == nil {
		r.mu.Lock()
		r.dead[dl.Queue] = append(r.dead[dl.Queue], dl)
		r.mu.Unlock()
	}
	return err
}

func (r *recorder) queues() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.made))
}

func (r *recorder) holdQueues() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for q, n := range r.held {
		out = append(out, fmt.Sprintf("%s (%d)", q, n))
	}
	slices.Sort(out)
	return out
}

func (r *recorder) deadLetters(queue string) []broker.DeadLetter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.dead[queue])
}
