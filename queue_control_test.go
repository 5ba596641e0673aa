package queuey_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/clocktest"
)

// handleBetaAndGamma registers handlers that succeed for beta's and
// gamma's jobs.
func handleBetaAndGamma(t *testing.T, w *queuey.Worker) {
	t.Helper()
	must(t, queuey.Handle(w, func(ctx context.Context, j betaJob, jc queuey.JobContext) error { return nil }))
	must(t, queuey.Handle(w, func(ctx context.Context, j gammaJob, jc queuey.JobContext) error { return nil }))
}

// A queue paused from outside takes no job until its pause is over, the
// others run on, and Paused says until when.
func TestAQueuePausedFromOutsideRunsNothingUntilThePauseIsOver(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleBetaAndGamma(t, h.Worker)
		h.Start()
		until := h.Clock.Now().Add(time.Minute)
		must(t, h.Worker.Pause(t.Context(), beta.Name, until))
		if got := h.Worker.Paused(); !got[beta.Name].Equal(until) || len(got) != 1 {
			t.Fatalf("Paused() = %v, want only %s until %v", got, beta.Name, until)
		}
		held := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("held")}))
		other := mustID(t)(h.Producer.Enqueue(t.Context(), gammaJob{named("other")}))
		h.Advance(59 * time.Second)
		if len(h.Log.Of(held)) != 0 || len(h.Log.Of(other)) != 1 {
			t.Fatalf("during the pause: the paused queue's job ran %d times (want 0), the other queue's %d (want 1)",
				len(h.Log.Of(held)), len(h.Log.Of(other)))
		}
		h.Advance(2 * time.Second)
		runs := h.Log.Of(held)
		if len(runs) != 1 || runs[0].At.Before(until) {
			t.Fatalf("after the pause: runs of the held job %v, want one at %v or later", runs, until)
		}
		if got := h.Worker.Paused(); len(got) != 0 {
			t.Errorf("Paused() after the pause = %v, want none", got)
		}
	})
}

// Resume ends a pause now, whoever asked for it: a handler's PauseQueue
// of an hour too.
func TestResumeEndsAPauseAtOnce(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error {
			if j.Name == "limited" && jc.Deferrals == 0 {
				return queuey.PauseQueue(time.Hour, "429")
			}
			return nil
		}))
		mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("limited")}))
		h.Advance(time.Second)
		if _, ok := h.Worker.Paused()[beta.Name]; !ok {
			t.Fatalf("Paused() = %v after a PauseQueue of an hour, want %s in it", h.Worker.Paused(), beta.Name)
		}
		waiting := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("waiting")}))
		h.Advance(time.Minute)
		if n := len(h.Log.Of(waiting)); n != 0 {
			t.Fatalf("the backlog ran %d times during the pause", n)
		}
		must(t, h.Worker.Resume(t.Context(), beta.Name))
		h.Advance(time.Second)
		if n := len(h.Log.Of(waiting)); n != 1 {
			t.Errorf("after Resume: the waiting job ran %d times, want 1", n)
		}
		if got := h.Worker.Paused(); len(got) != 0 {
			t.Errorf("Paused() after Resume = %v, want none", got)
		}
		must(t, h.Worker.Resume(t.Context(), beta.Name)) // not paused: nothing to do
	})
}

// A pause from outside lets a running handler finish, and gives back what
// the worker holds of the queue and has not started (a task already handed
// to the handler goroutines goes back once one is free to refuse it).
func TestAPauseFromOutsideLetsTheRunningHandlerFinish(t *testing.T) {
	q := queuey.Queue{Name: "p", Prefetch: 3}
	set := queuey.QueueSet{Prefix: "opause", Queues: []queuey.Queue{q}}
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: 1}}
	clocktest.Run(t, set, opts, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j pJob, jc queuey.JobContext) error { return j.run(ctx, h.Clock, jc) }))
		long := mustID(t)(h.Producer.Enqueue(t.Context(), pJob{plan{Name: "long", Block: 10 * time.Second}}))
		next := mustID(t)(h.Producer.Enqueue(t.Context(), pJob{named("next")}))
		h.Advance(time.Second) // long runs, next waits in the mailbox
		must(t, h.Worker.Pause(t.Context(), q.Name, h.Clock.Now().Add(time.Minute)))
		h.Advance(20 * time.Second)
		if len(h.Log.Of(long)) != 1 || len(h.Log.Of(next)) != 0 {
			t.Fatalf("20 s into the pause: long ran %d times (want 1, to its end), next %d (want 0)", len(h.Log.Of(long)), len(h.Log.Of(next)))
		}
		if got, ready := h.Worker.InFlight(q.Name), h.Backend.Pending("opause.p"); got != 0 || ready != 1 {
			t.Errorf("20 s into the pause: the worker holds %d deliveries (want 0), the queue has %d ready (want 1, given back)", got, ready)
		}
		h.Advance(time.Minute)
		wantOrder(t, h, long, next)
	})
}

// Pause and Resume refuse what they cannot do, with the reason.
func TestPauseAndResumeRefuseBadInput(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleBetaAndGamma(t, h.Worker)
		h.Start()
		if err := h.Worker.Pause(t.Context(), "nope", h.Clock.Now().Add(time.Minute)); !errors.Is(err, queuey.ErrUnknownQueue) {
			t.Errorf("Pause of an unknown queue = %v, want ErrUnknownQueue", err)
		}
		if err := h.Worker.Resume(t.Context(), "nope"); !errors.Is(err, queuey.ErrUnknownQueue) {
			t.Errorf("Resume of an unknown queue = %v, want ErrUnknownQueue", err)
		}
		if err := h.Worker.Pause(t.Context(), beta.Name, h.Clock.Now()); !errors.Is(err, queuey.ErrInvalidDelay) {
			t.Errorf("Pause until now = %v, want ErrInvalidDelay", err)
		}
		must(t, h.Stop())
		if err := h.Worker.Pause(t.Context(), beta.Name, h.Clock.Now().Add(time.Minute)); !errors.Is(err, queuey.ErrWorkerStopped) {
			t.Errorf("Pause after Run returned = %v, want ErrWorkerStopped", err)
		}
	})
}
