package queuey_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/clocktest"
)

// fakeAPI allows a number of calls per second of the mock clock and
// answers the rest as an API would answer 429, with the wait until the
// next second as Retry-After.
type fakeAPI struct {
	clock     clock.Clock
	perSecond int

	mu      sync.Mutex
	window  int64
	used    int
	ok      int
	limited int // calls answered 429: wasted
}

func (a *fakeAPI) call() (retryAfter time.Duration, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock.Now()
	if w := now.Unix(); w != a.window {
		a.window, a.used = w, 0
	}
	if a.used < a.perSecond {
		a.used++
		a.ok++
		return 0, true
	}
	a.limited++
	return now.Truncate(time.Second).Add(time.Second).Sub(now), false
}

func (a *fakeAPI) counts() (ok, limited int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ok, a.limited
}

// The queue-level pause (PauseQueue): 50 jobs against an API that allows 5
// calls a second. Pausing the queue on a 429 keeps the wasted calls to at
// most the prefetch per limited second, where deferring each job alone
// lets the whole backlog hit the limit again and again. No job spends an
// attempt either way.
func TestPausingARateLimitedQueueSavesItsQueueMatesCalls(t *testing.T) {
	wastedWithPause, limitedSeconds := runRateLimited(t, true)
	wastedWithout, _ := runRateLimited(t, false)
	t.Logf("calls wasted on 429s: %d with the queue pause, %d without", wastedWithPause, wastedWithout)
	if wastedWithPause > rateLimitedPrefetch*limitedSeconds {
		t.Errorf("with the pause: %d wasted calls over %d limited seconds, want at most the prefetch (%d) each",
			wastedWithPause, limitedSeconds, rateLimitedPrefetch)
	}
	if wastedWithout < 4*wastedWithPause {
		t.Errorf("without the pause: %d wasted calls, want several times the %d with it", wastedWithout, wastedWithPause)
	}
}

// The rate-limited queue of TestPausingARateLimitedQueueSavesItsQueueMatesCalls.
const rateLimitedJobs, rateLimitedPrefetch = 50, 5

// runRateLimited runs the rate-limited jobs, each answered 429 with a
// PauseQueue (pause) or a Defer, and checks that each ran once with
// success and none spent an attempt. It returns the calls wasted on 429s
// and the number of seconds in which some were.
func runRateLimited(t *testing.T, pause bool) (wasted, pauses int) {
	q := queuey.Queue{Name: "p", Prefetch: rateLimitedPrefetch}
	set := queuey.QueueSet{Prefix: "rl", Queues: []queuey.Queue{q}}
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: rateLimitedPrefetch}}
	clocktest.Run(t, set, opts, func(t *testing.T, h *clocktest.Harness) {
		api := &fakeAPI{clock: h.Clock, perSecond: 5}
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j pJob, jc queuey.JobContext) error {
			if wait, ok := api.call(); !ok {
				if pause {
					return queuey.PauseQueue(wait, "429")
				}
				return queuey.Defer(wait, "429")
			}
			return nil
		}))
		for range rateLimitedJobs {
			mustID(t)(h.Producer.Enqueue(t.Context(), pJob{}))
		}
		h.Advance(time.Minute)
		ok, limited := api.counts()
		if ok != rateLimitedJobs {
			t.Fatalf("successful calls: got %d, want %d", ok, rateLimitedJobs)
		}
		for _, r := range h.Log.Runs() {
			if r.Attempt != 1 {
				t.Fatalf("a run at attempt %d: a rate limit must not spend attempts", r.Attempt)
			}
		}
		if dl := h.Backend.DeadLetters("rl.p"); len(dl) != 0 {
			t.Errorf("dead letters: %d", len(dl))
		}
		wasted = limited
		seconds := map[int64]bool{}
		for _, r := range h.Log.Runs() {
			if r.Deferrals > 0 {
				seconds[r.At.Unix()] = true
			}
		}
		pauses = len(seconds)
	})
	return wasted, pauses
}

// While one queue is paused, the others keep running.
func TestAPausedQueueDoesNotStopTheOthers(t *testing.T) {
	clocktest.Run(t, app, &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: 4}}, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error {
			if jc.Deferrals == 0 && j.Name == "limited" {
				return queuey.PauseQueue(time.Minute, "429")
			}
			return nil
		}))
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j gammaJob, jc queuey.JobContext) error { return nil }))
		limited := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("limited")}))
		h.Advance(time.Second)
		waiting := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("waiting")}))
		other := mustID(t)(h.Producer.Enqueue(t.Context(), gammaJob{named("other")}))
		h.Advance(30 * time.Second)
		if len(h.Log.Of(other)) != 1 || len(h.Log.Of(waiting)) != 0 {
			t.Errorf("while beta is paused: gamma ran %d times (want 1), beta's next job %d (want 0)",
				len(h.Log.Of(other)), len(h.Log.Of(waiting)))
		}
		h.Advance(31 * time.Second)
		wantOrder(t, h, limited, other, limited, waiting)
	})
}

// A pause lets the queue's running handlers finish, however long they
// take: ShutdownTimeout is for a stopping worker, not for a pause.
func TestAPauseLetsTheRunningHandlersFinish(t *testing.T) {
	q := queuey.Queue{Name: "p", Prefetch: 2}
	set := queuey.QueueSet{Prefix: "pause", Queues: []queuey.Queue{q}}
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: 2, ShutdownTimeout: 5 * time.Second}}
	clocktest.Run(t, set, opts, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j pJob, jc queuey.JobContext) error {
			if j.Name == "limited" && jc.Deferrals == 0 {
				return queuey.PauseQueue(time.Minute, "429")
			}
			return j.run(ctx, h.Clock, jc)
		}))
		long := mustID(t)(h.Producer.Enqueue(t.Context(), pJob{plan{Name: "long", Block: 20 * time.Second}}))
		h.Advance(time.Second) // long is running
		limited := mustID(t)(h.Producer.Enqueue(t.Context(), pJob{named("limited")}))
		h.Advance(2 * time.Minute)
		if runs := h.Log.Of(long); len(runs) != 1 {
			t.Errorf("long job: %d runs, want 1 (not cut short by the pause)", len(runs))
		}
		if runs := h.Log.Of(limited); len(runs) != 2 {
			t.Errorf("limited job: %d runs, want 2 (paused, then after the pause)", len(runs))
		}
		if got := h.Backend.AckedCount("pause.p"); got != 3 {
			t.Errorf("acked: got %d, want 3 (long; limited's deferral and its run)", got)
		}
	})
}

// On a quorum queue a pause lasts until its job is back: the delay levels
// wait whole seconds, so a pause of 1.5 s holds the job 2 s, and the
// queue resumes only after that (and a moment more, for the last level to
// hand the job to the lane), with the job first.
func TestAPauseOnAQuorumQueueLastsUntilItsJobIsBack(t *testing.T) {
	q := queuey.Queue{Name: "p", Prefetch: 2}
	set := queuey.QueueSet{Prefix: "qpause", Type: queuey.Quorum, Queues: []queuey.Queue{q}}
	clocktest.Run(t, set, &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: 1}}, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j pJob, jc queuey.JobContext) error {
			if j.Name == "limited" && jc.Deferrals == 0 {
				return queuey.PauseQueue(1500*time.Millisecond, "429")
			}
			return nil
		}))
		limited := mustID(t)(h.Producer.Enqueue(t.Context(), pJob{named("limited")}))
		h.Advance(100 * time.Millisecond)
		waiting := mustID(t)(h.Producer.Enqueue(t.Context(), pJob{named("waiting")}))
		h.Advance(1900 * time.Millisecond) // 2 s in: the job is back, the queue still paused
		if runs := h.Log.Of(waiting); len(runs) != 0 {
			t.Fatalf("the backlog ran at %v, before the paused job was back", runs[0].At)
		}
		h.Advance(time.Second)
		wantOrder(t, h, limited, limited, waiting)
	})
}

// A paused job runs again its wait (rounded up to DeferGranularity) and
// 0.1 s later, first, ahead of the backlog that came while it waited.
func TestAPausedJobRunsAgainItsWaitAndATenthOfASecondLater(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error {
			if j.Name == "limited" && jc.Deferrals == 0 {
				return queuey.PauseQueue(1500*time.Millisecond, "429")
			}
			return nil
		}))
		limited := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("limited")}))
		h.Advance(100 * time.Millisecond)
		waiting := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("waiting")}))
		h.Advance(5 * time.Second)
		wantOrder(t, h, limited, limited, waiting)
		runs := h.Log.Of(limited)
		if len(runs) != 2 {
			t.Fatalf("runs of the paused job: got %d, want 2", len(runs))
		}
		if got := runs[1].At.Sub(runs[0].At); got != 2100*time.Millisecond {
			t.Errorf("the paused job ran again %v after its first run, want 2.1s (1.5s rounded up to 2s, and 0.1s)", got)
		}
	})
}
