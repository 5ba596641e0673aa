package queuey_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/clocktest"
)

// shape is what a run's JobContext says about where the job stands.
type shape struct{ Attempt, Deferrals, Priority int }

func shapes(runs []clocktest.Entry) []shape {
	var out []shape
	for _, r := range runs {
		out = append(out, shape{r.Attempt, r.Deferrals, r.Priority})
	}
	return out
}

func wantShapes(t *testing.T, runs []clocktest.Entry, want ...shape) {
	t.Helper()
	if diff := cmp.Diff(want, shapes(runs)); diff != "" {
		t.Errorf("runs (attempt, deferrals, priority) differ (-want +got):\n%s", diff)
	}
}

func wantOrder(t *testing.T, h *clocktest.Harness, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, h.Log.Order()); diff != "" {
		t.Errorf("run order differs (-want +got):\n%s", diff)
	}
}

const (
	qAlpha = "test.alpha"
	qBeta  = "test.beta"
	qGamma = "test.gamma"
)

// Scenario 1: a handler's deferral waits exactly its delay and then runs
// ahead of a backlog, with the same attempt and one more deferral, at the
// queue's top priority, without consulting the retry policy.
func TestHandlerDeferralRunsAheadOfTheBacklogAfterExactlyTheDelay(t *testing.T) {
	logs := &logRecorder{}
	clocktest.Run(t, app, &clocktest.Options{Logger: slog.New(logs)}, func(t *testing.T, h *clocktest.Harness) {
		ctx := t.Context()
		handleAll(t, h.Worker, h.Clock)
		id := mustID(t)
		limited := id(h.Producer.Enqueue(ctx, betaJob{deferring(1, 30*time.Second)}))
		h.Start()
		start := h.Clock.Now()
		if got := h.Backend.Held(qBeta); got != 1 {
			t.Fatalf("held after the first run: got %d, want 1", got)
		}
		// A blocker holds the only prefetch slot past the release, so the
		// backlog is still waiting on the queue when the deferral lands.
		blocker := id(h.Producer.Enqueue(ctx, betaJob{plan{Block: 40 * time.Second}}))
		b1 := id(h.Producer.Enqueue(ctx, betaJob{named("b1")}))
		b2 := id(h.Producer.Enqueue(ctx, betaJob{named("b2")}))
		b3 := id(h.Producer.Enqueue(ctx, betaJob{named("b3")}))

		h.Advance(30*time.Second - time.Millisecond)
		if held, pending := h.Backend.Held(qBeta), h.Backend.Pending(qBeta); held != 1 || pending != 3 {
			t.Fatalf("one tick before the delay: got held %d pending %d, want 1 and 3", held, pending)
		}
		h.Advance(time.Millisecond)
		if held, pending := h.Backend.Held(qBeta), h.Backend.Pending(qBeta); held != 0 || pending != 4 {
			t.Fatalf("at the delay: got held %d pending %d, want 0 and 4", held, pending)
		}
		h.Advance(10 * time.Second)
		wantOrder(t, h, limited, blocker, limited, b1, b2, b3)
		wantShapes(t, h.Log.Of(limited), shape{1, 0, 0}, shape{1, 1, 10})
		if runs := h.Log.Of(limited); len(runs) != 2 {
			t.Fatalf("runs of the deferred job: got %d, want 2", len(runs))
		} else if got := runs[1].At.Sub(start); got != 40*time.Second {
			t.Errorf("second run started %v after the first, want 40s (when the blocker let go)", got)
		}
		if lvl, ok := logs.levelOf("job deferred"); !ok || lvl != slog.LevelInfo {
			t.Errorf("\"job deferred\" logged at %v (found %t), want INFO: a deferral is not a failure", lvl, ok)
		}
	})
}

func TestHandlerDeferralOnAnIdleWorkerRunsAtExactlyTheDelay(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{deferring(1, 1500*time.Millisecond)}))
		h.Advance(2*time.Second - time.Millisecond) // 1.5 s rounds up to the 2 s hold queue
		if n := h.Log.Len(); n != 1 {
			t.Fatalf("runs before the rounded delay: got %d, want 1", n)
		}
		h.Advance(time.Millisecond)
		runs := h.Log.Of(id)
		wantShapes(t, runs, shape{1, 0, 0}, shape{1, 1, 10})
		if got := runs[1].At.Sub(runs[0].At); got != 2*time.Second {
			t.Errorf("second run came %v after the first, want exactly 2s", got)
		}
	})
}

func TestDeferralNeverConsultsTheRetryPolicy(t *testing.T) {
	logs := &logRecorder{}
	clocktest.Run(t, app, &clocktest.Options{Logger: slog.New(logs)}, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		// beta allows one attempt: a single failure would dead-letter.
		id := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{deferring(3, time.Minute)}))
		h.Advance(3 * time.Minute)
		wantShapes(t, h.Log.Of(id), shape{1, 0, 0}, shape{1, 1, 10}, shape{1, 2, 10}, shape{1, 3, 10})
		if dl := h.Backend.DeadLetters(qBeta); len(dl) != 0 {
			t.Errorf("dead letters: got %v, want none", dl)
		}
		if !h.Log.Of(id)[0].IsLastAttempt() {
			t.Errorf("IsLastAttempt on a one-attempt queue: got false, want true")
		}
		acked := h.Backend.Acked(qBeta)
		if len(acked) != 4 || acked[3].Deferrals != 3 || acked[3].Attempt != 1 {
			t.Errorf("acked: got %+v, want 4 runs, the last at attempt 1 with 3 deferrals", acked)
		}
		if w := logs.worst(); w > slog.LevelInfo {
			t.Errorf("worst log level: got %v, want INFO at most", w)
		}
		if h.Worker.SettleFailures() != 0 {
			t.Errorf("settle failures: got %d, want 0", h.Worker.SettleFailures())
		}
	})
}

// Scenario 2.
func TestARetryAfterADeferralGoesOutAtPriorityZero(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		p := deferring(1, 5*time.Second)
		p.Fail = 1
		id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{p}))
		h.WaitFor("three runs", func() bool { return h.Log.Len() == 3 })
		wantShapes(t, h.Log.Of(id), shape{1, 0, 0}, shape{1, 1, 10}, shape{2, 1, 0})
	})
}

// Scenario 3.
func TestProducerDeferHoldsThenRunsAheadOfTheBacklog(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx, id := t.Context(), mustID(t)
		handleAll(t, h.Worker, h.Clock)
		deferred := id(h.Producer.Defer(ctx, alphaJob{named("later")}, 30*time.Second))
		if held, pending := h.Backend.Held(qAlpha), h.Backend.Pending(qAlpha); held != 1 || pending != 0 {
			t.Fatalf("after Defer: got held %d pending %d, want 1 and 0", held, pending)
		}
		var backlog []string
		for i := range 3 {
			backlog = append(backlog, id(h.Producer.Enqueue(ctx, alphaJob{named(fmt.Sprint(i))})))
		}
		h.Clock.Add(30 * time.Second) // the worker is not running yet
		if held, pending := h.Backend.Held(qAlpha), h.Backend.Pending(qAlpha); held != 0 || pending != 4 {
			t.Fatalf("after 30s: got held %d pending %d, want 0 and 4", held, pending)
		}
		h.Start()
		wantOrder(t, h, append([]string{deferred}, backlog...)...)
		wantShapes(t, h.Log.Of(deferred), shape{1, 0, 10})
	})
}

// Scenario 4.
func TestEnqueueAfterWaitsThenJoinsTheBackOfTheQueue(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx, id := t.Context(), mustID(t)
		handleAll(t, h.Worker, h.Clock)
		delayed := id(h.Producer.EnqueueAfter(ctx, alphaJob{named("later")}, 30*time.Second))
		var backlog []string
		for i := range 3 {
			backlog = append(backlog, id(h.Producer.Enqueue(ctx, alphaJob{named(fmt.Sprint(i))})))
		}
		h.Clock.Add(30*time.Second - time.Millisecond)
		if held, pending := h.Backend.Held(qAlpha), h.Backend.Pending(qAlpha); held != 1 || pending != 3 {
			t.Fatalf("before 30s: got held %d pending %d, want 1 and 3", held, pending)
		}
		h.Clock.Add(time.Millisecond)
		h.Start()
		wantOrder(t, h, append(backlog, delayed)...)
		wantShapes(t, h.Log.Of(delayed), shape{1, 0, 0})
	})
}

// Scenario 5.
func TestWithoutPrioritiesADeferredJobComesBackFIFO(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx, id := t.Context(), mustID(t)
		handleAll(t, h.Worker, h.Clock)
		limited := id(h.Producer.Enqueue(ctx, gammaJob{deferring(1, 10*time.Second)}))
		h.Start()
		blocker := id(h.Producer.Enqueue(ctx, gammaJob{plan{Block: 20 * time.Second}}))
		b1 := id(h.Producer.Enqueue(ctx, gammaJob{named("b1")}))
		deferredProducer := id(h.Producer.Defer(ctx, gammaJob{named("d")}, 5*time.Second))
		b2 := id(h.Producer.Enqueue(ctx, gammaJob{named("b2")}))
		h.Advance(30 * time.Second)
		wantOrder(t, h, limited, blocker, b1, b2, deferredProducer, limited)
		wantShapes(t, h.Log.Of(limited), shape{1, 0, 0}, shape{1, 1, 0})
		wantShapes(t, h.Log.Of(deferredProducer), shape{1, 0, 0})
	})
}

// Scenario 6: "first" means first among what is still on the queue.
func TestPrefetchDecidesWhetherTheDeferredJobIsNext(t *testing.T) {
	for _, tc := range []struct {
		prefetch      int
		deferredAfter int // backlog jobs that run before the deferred one
	}{
		{prefetch: 10, deferredAfter: 9}, // the blocker and 9 backlog jobs were already held
		{prefetch: 1, deferredAfter: 0},
	} {
		t.Run(fmt.Sprintf("prefetch %d", tc.prefetch), func(t *testing.T) {
			q := queuey.Queue{Name: "p", Prefetch: tc.prefetch}
			set := queuey.QueueSet{Prefix: "test", Queues: []queuey.Queue{q}}
			clocktest.Run(t, set, nil, func(t *testing.T, h *clocktest.Harness) {
				ctx, id := t.Context(), mustID(t)
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, j pJob, jc queuey.JobContext) error {
					return j.run(ctx, h.Clock, jc)
				}))
				deferred := id(h.Producer.Defer(ctx, pJob{named("d")}, 30*time.Second))
				blocker := id(h.Producer.Enqueue(ctx, pJob{plan{Block: 31 * time.Second}}))
				var backlog []string
				for i := range 10 {
					backlog = append(backlog, id(h.Producer.Enqueue(ctx, pJob{named(fmt.Sprint(i))})))
				}
				h.Advance(time.Minute)
				want := append([]string{blocker}, backlog[:tc.deferredAfter]...)
				want = append(want, deferred)
				want = append(want, backlog[tc.deferredAfter:]...)
				wantOrder(t, h, want...)
			})
		})
	}
}

// pJob lives on queue "p", whose settings each test's QueueSet chooses: a
// worker takes a queue's configuration from its set, by name.
type pJob struct{ plan }

func (pJob) Kind() string        { return "p_job" }
func (pJob) Queue() queuey.Queue { return queuey.Queue{Name: "p"} }

// Worker.InFlight is the fill of a queue actor's mailbox: the deliveries
// it holds unsettled, running or waiting for a handler, up to the queue's
// prefetch; the backpressure a prefetch and a concurrency are tuned by.
func TestInFlightIsTheMailboxFill(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: 1}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		for range 6 {
			mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Block: 10 * time.Second}}))
		}
		h.Advance(time.Second)
		if got := h.Worker.InFlight(alpha.Name); got != alpha.Prefetch {
			t.Errorf("in flight with one handler busy: %d, want the prefetch (%d)", got, alpha.Prefetch)
		}
		if got := h.Backend.InFlight(qAlpha); got != h.Worker.InFlight(alpha.Name) {
			t.Errorf("the broker counts %d unsettled, the worker %d", got, h.Worker.InFlight(alpha.Name))
		}
		h.Advance(time.Minute)
		if got := h.Worker.InFlight(alpha.Name); got != 0 || h.Log.Len() != 6 {
			t.Errorf("after every job ran (%d runs): in flight %d, want 0", h.Log.Len(), got)
		}
		if got := h.Worker.InFlight("no such queue"); got != 0 {
			t.Errorf("in flight of a queue not consumed: %d, want 0", got)
		}
	})
}
