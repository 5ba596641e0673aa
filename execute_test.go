package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

// atOnce counts the calls of run in progress and the most there were.
type atOnce struct{ running, peak atomic.Int32 }

func (a *atOnce) run(f func() error) error {
	n := a.running.Add(1)
	defer a.running.Add(-1)
	for {
		p := a.peak.Load()
		if n <= p || a.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return f()
}

// The cap on running handlers holds, and is reached, whether the queues'
// handler pools (min(prefetch, concurrency) each: 2+1+1, 4+1+1, 4+1+1)
// could exceed it (Concurrency 2 and 5) or not (6, the default outside
// clocktest).
func TestConcurrencyIsCapped(t *testing.T) {
	for _, c := range []struct {
		concurrency int
		want        int32
	}{{2, 2}, {5, 5}, {6, 6}} {
		t.Run(fmt.Sprintf("concurrency=%d", c.concurrency), func(t *testing.T) {
			var at atOnce
			count := at.run
			opts := &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: c.concurrency}}
			clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, j alphaJob, jc queuey.JobContext) error {
					return count(func() error { return j.run(ctx, h.Clock, jc) })
				}))
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error {
					return count(func() error { return j.run(ctx, h.Clock, jc) })
				}))
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, j gammaJob, jc queuey.JobContext) error {
					return count(func() error { return j.run(ctx, h.Clock, jc) })
				}))
				block := plan{Block: time.Second}
				for range 8 {
					mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{block}))
					mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{block}))
					mustID(t)(h.Producer.Enqueue(t.Context(), gammaJob{block}))
				}
				h.Advance(30 * time.Second)
				if h.Log.Len() != 24 || at.peak.Load() != c.want {
					t.Errorf("got %d runs with at most %d at once, want 24 with at most %d", h.Log.Len(), at.peak.Load(), c.want)
				}
			})
		})
	}
}

func TestDefaultConcurrencyIsTheSumOfPrefetch(t *testing.T) {
	w, err := queuey.NewWorker(memory.New(nil), app, nil)
	must(t, err)
	if got := w.Concurrency(); got != 4+1+1 {
		t.Errorf("got %d, want 6 (alpha 4 + beta 1 + gamma 1)", got)
	}
	w, err = queuey.NewWorker(memory.New(nil), app, &queuey.WorkerConfig{Queues: []string{"alpha", "alpha"}})
	must(t, err)
	if got := w.Concurrency(); got != 4 {
		t.Errorf("one queue named twice: got %d, want 4", got)
	}
}

// unknownKind records what a worker's hooks see of a job of a kind it
// has no handler for: each delivery's outcome, each republish.
type unknownKind struct {
	mu        sync.Mutex
	results   []queuey.Result
	outcomes  []queuey.Outcome
	publishes []queuey.PublishInfo
	dead      []queuey.DeadLetterEvent
}

func (u *unknownKind) config(wait time.Duration) queuey.WorkerConfig {
	return queuey.WorkerConfig{
		UnknownKindWait: wait,
		Hooks: &queuey.Hooks{
			Deliver: func(ctx context.Context, _ *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
				return ctx, func(o queuey.Outcome) {
					u.mu.Lock()
					defer u.mu.Unlock()
					u.results, u.outcomes = append(u.results, o.Result), append(u.outcomes, o)
				}
			},
			Publish: func(_ context.Context, p *queuey.PublishInfo) func(error) {
				u.mu.Lock()
				defer u.mu.Unlock()
				u.publishes = append(u.publishes, *p)
				return nil
			},
		},
		OnDeadLetter: func(_ context.Context, dl queuey.DeadLetterEvent) {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.dead = append(u.dead, dl)
		},
	}
}

func (u *unknownKind) seen() ([]queuey.Result, []queuey.PublishInfo, []queuey.DeadLetterEvent) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.results), slices.Clone(u.publishes), slices.Clone(u.dead)
}

// heldBackLine is the WARN line of a job held back for want of a handler.
const heldBackLine = "no handler registered for the job's kind; holding it back to offer it again"

// During a rolling deploy a job may reach a worker that has no handler for
// its kind yet. By default it is held back and offered again a minute
// later, behind the backlog, with its attempt and deferrals as they were;
// once a worker with its handler takes it, it runs as a first attempt.
func TestAJobOfAnUnknownKindWaitsForAWorkerWithItsHandler(t *testing.T) {
	logs, u := &logRecorder{}, &unknownKind{}
	opts := &clocktest.Options{Logger: slog.New(logs), Worker: u.config(0)}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		id := mustID(t)(h.Producer.Enqueue(t.Context(), orphanJob{named("new kind")}))
		h.Advance(time.Minute - time.Millisecond)
		checkHeldBackOnce(t, h, u, logs)

		h.Advance(time.Millisecond) // the interval is up: offered again, held back again
		if results, _, _ := u.seen(); len(results) != 2 || results[1] != queuey.Unhandled {
			t.Errorf("outcomes after the interval: %v, want two hold-backs", results)
		}
		must(t, h.Stop())

		runWithTheNewHandler(t, h)
		wantShapes(t, h.Log.Of(id), shape{1, 0, 0})
		if acked := h.Backend.Acked(qAlpha); len(acked) != 3 || len(h.Backend.DeadLetters(qAlpha)) != 0 {
			t.Errorf("acked %d deliveries and %d dead letters, want 3 (two hold-backs and the run) and none", len(acked), len(h.Backend.DeadLetters(qAlpha)))
		}
	})
}

// checkHeldBackOnce checks that the job of an unknown kind was held back
// once, for a minute, at priority 0, with its attempt and deferrals as
// they were, in one WARN line that names its kind.
func checkHeldBackOnce(t *testing.T, h *clocktest.Harness, u *unknownKind, logs *logRecorder) {
	t.Helper()
	results, publishes, dead := u.seen()
	if len(dead) != 0 || len(h.Backend.DeadLetters(qAlpha)) != 0 {
		t.Fatalf("dead-lettered at once: %+v", dead)
	}
	if diff := cmp.Diff([]queuey.Result{queuey.Unhandled}, results); diff != "" {
		t.Errorf("outcomes before the interval (-want +got):\n%s", diff)
	}
	if held := h.Backend.Held(qAlpha); held != 1 {
		t.Errorf("held: got %d, want the job", held)
	}
	type republish struct {
		Op                           queuey.PublishOp
		Attempt, Deferrals, Priority int
		Delay                        time.Duration
	}
	var got []republish
	for _, p := range publishes { // the worker's: the producer's enqueue is not among them
		got = append(got, republish{p.Op, p.Attempt, p.Deferrals, p.Priority, p.Delay})
	}
	if diff := cmp.Diff([]republish{{queuey.OpUnhandled, 1, 0, 0, time.Minute}}, got); diff != "" {
		t.Errorf("the hold-back's publish (-want +got):\n%s", diff)
	}
	if n := logs.count(heldBackLine, slog.LevelWarn); n != 1 {
		t.Errorf("%q at WARN: %d lines, want 1", heldBackLine, n)
	}
	if kind, _ := logs.attrOf(heldBackLine, "kind"); kind != "orphan_job" {
		t.Errorf("the hold-back's line names kind %q, want orphan_job", kind)
	}
}

// runWithTheNewHandler runs, for a minute, a worker of the new version,
// with orphanJob's handler, on h's broker.
func runWithTheNewHandler(t *testing.T, h *clocktest.Harness) {
	t.Helper()
	w2, err := queuey.NewWorker(h.Backend, app, &queuey.WorkerConfig{Clock: h.Clock, Logger: slog.New(slog.DiscardHandler),
		Middleware: []queuey.Middleware{h.Log.Middleware(h.Clock)}})
	must(t, err)
	handleAll(t, w2, h.Clock)
	must(t, queuey.Handle(w2, func(ctx context.Context, j orphanJob, jc queuey.JobContext) error { return j.run(ctx, h.Clock, jc) }))
	runCtx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w2.Run(runCtx) }()
	h.Clock.Add(time.Minute)
	synctest.Wait()
	stop()
	must(t, <-done)
}

// A job whose kind has no handler anywhere is offered again every minute
// until it has waited UnknownKindWait (an hour by default), then
// dead-lettered with a reason that says how long it waited, at ERROR.
func TestAJobOfAnUnknownKindIsDeadLetteredOnceItHasWaitedLongEnough(t *testing.T) {
	for _, c := range []struct {
		name string
		wait time.Duration // as configured
		took time.Duration // what it comes to
	}{{"default", 0, queuey.DefaultUnknownKindWait}, {"150s", 150 * time.Second, 150 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			logs, u := &logRecorder{}, &unknownKind{}
			opts := &clocktest.Options{Logger: slog.New(logs), Worker: u.config(c.wait)}
			clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
				handleAll(t, h.Worker, h.Clock)
				mustID(t)(h.Producer.Enqueue(t.Context(), orphanJob{named("nobody's")}))
				h.Advance(c.took - time.Millisecond)
				if _, _, dead := u.seen(); len(dead) != 0 {
					t.Fatalf("dead-lettered before the wait was over: %+v", dead)
				}
				h.Advance(time.Millisecond)
				results, _, dead := u.seen()
				stored := h.Backend.DeadLetters(qAlpha)
				if len(dead) != 1 || dead[0].Cause != queuey.CauseNoHandler || len(stored) != 1 {
					t.Fatalf("dead letters: told %+v, stored %d; want one, cause no_handler", dead, len(stored))
				}
				want := fmt.Sprintf("no handler for job type %q after waiting %v for one", "orphan_job", c.took)
				if stored[0].Reason != want || stored[0].Attempt != 1 || stored[0].Deferrals != 0 {
					t.Errorf("dead letter: reason %q, attempt %d, deferrals %d; want %q, 1, 0", stored[0].Reason, stored[0].Attempt, stored[0].Deferrals, want)
				}
				holdBacks := int((c.took + time.Minute - 1) / time.Minute)
				if n := logs.count(heldBackLine, slog.LevelWarn); n != holdBacks || len(results) != holdBacks+1 || results[holdBacks] != queuey.DeadLettered {
					t.Errorf("%d WARN hold-backs, outcomes %v; want %d hold-backs, then the dead letter", n, results, holdBacks)
				}
				if lvl, ok := logs.levelOf("no handler registered for the job's kind; dead-lettering"); !ok || lvl != slog.LevelError {
					t.Errorf("the dead letter logged at %v (found %t), want ERROR", lvl, ok)
				}
			})
		})
	}
}

// A negative UnknownKindWait dead-letters a job of an unknown kind at
// once, as a worker that wants no waiting asks.
func TestANegativeUnknownKindWaitDeadLettersAtOnce(t *testing.T) {
	logs, u := &logRecorder{}, &unknownKind{}
	opts := &clocktest.Options{Logger: slog.New(logs), Worker: u.config(-1)}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		mustID(t)(h.Producer.Enqueue(t.Context(), orphanJob{}))
		h.Advance(time.Millisecond)
		results, _, dead := u.seen()
		stored := h.Backend.DeadLetters(qAlpha)
		if len(dead) != 1 || dead[0].Cause != queuey.CauseNoHandler || len(stored) != 1 || stored[0].Reason != `no handler for job type "orphan_job"` {
			t.Fatalf("dead letters: told %+v, stored %+v; want one at once, cause no_handler", dead, stored)
		}
		if diff := cmp.Diff([]queuey.Result{queuey.DeadLettered}, results); diff != "" || h.Backend.Held(qAlpha) != 0 {
			t.Errorf("held %d; outcomes (-want +got):\n%s", h.Backend.Held(qAlpha), diff)
		}
		if lvl, ok := logs.levelOf("no handler registered for the job's kind; dead-lettering"); !ok || lvl != slog.LevelError {
			t.Errorf("the dead letter logged at %v (found %t), want ERROR", lvl, ok)
		}
	})
}

// The wait for a handler starts when a worker first finds none, not at
// the enqueue: a job scheduled for later, or long in a backlog, still
// waits its UnknownKindWait for a handler.
func TestTheWaitForAHandlerStartsWhenAWorkerFirstFindsNone(t *testing.T) {
	u := &unknownKind{}
	clocktest.Run(t, app, &clocktest.Options{Worker: u.config(0)}, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		mustID(t)(h.Producer.EnqueueAfter(t.Context(), orphanJob{}, 2*time.Hour))
		h.Advance(2 * time.Hour)
		if results, _, dead := u.seen(); len(dead) != 0 || len(results) != 1 || results[0] != queuey.Unhandled {
			t.Fatalf("when due, two hours after its enqueue: outcomes %v, dead letters %+v; want it held back", results, dead)
		}
		h.Advance(queuey.DefaultUnknownKindWait)
		stored := h.Backend.DeadLetters(qAlpha)
		if want := `no handler for job type "orphan_job" after waiting 1h0m0s for one`; len(stored) != 1 || stored[0].Reason != want {
			t.Errorf("dead letters: %+v, want one: %q", stored, want)
		}
	})
}

// A handler on a mock clock (benbjohnson/clock's, passed as
// WorkerConfig.Clock as it is) may read its ctx's error while the move
// that ends its job timeout is cancelling that ctx: the mock's own timeout
// contexts read their error without the lock they write it under, a data
// race under -race; the worker's are read under it.
func TestAHandlerReadsItsTimeoutOnAMockClockWithoutARace(t *testing.T) {
	mock := clock.NewMock()
	backend := memory.New(&memory.Options{Clock: mock})
	defer backend.Close()
	set := queuey.QueueSet{Prefix: "test", Queues: []queuey.Queue{{Name: "p", JobTimeout: time.Second, Retry: &queuey.RetryPolicy{MaxAttempts: 1}}}}
	cfg := &queuey.WorkerConfig{Clock: mock, Logger: slog.New(slog.DiscardHandler)}
	producer, err := queuey.NewProducer(t.Context(), backend, set, &queuey.ProducerConfig{Clock: mock})
	must(t, err)
	worker, err := queuey.NewWorker(backend, set, cfg)
	must(t, err)
	started, ended := make(chan struct{}), make(chan error, 1)
	must(t, queuey.Handle(worker, func(ctx context.Context, _ pJob, _ queuey.JobContext) error {
		close(started)
		for ctx.Err() == nil { // read while the move below ends it
			runtime.Gosched()
		}
		ended <- ctx.Err()
		return ctx.Err()
	}))
	ctx, stop := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(ctx) }()
	mustID(t)(producer.Enqueue(t.Context(), pJob{}))
	<-started
	mock.Add(time.Second)
	if err := <-ended; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the handler's ctx ended with %v, want context.DeadlineExceeded", err)
	}
	stop()
	must(t, <-ran)
}
