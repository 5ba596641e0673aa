package queuey_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

// refusingHolds refuses the first n holds, as a broker refusing a hold
// queue's declaration would.
type refusingHolds struct {
	*memory.Backend
	refuse atomic.Int32
}

func (r *refusingHolds) Hold(ctx context.Context, msg broker.Message, ttl time.Duration) error {
	if r.refuse.Add(-1) >= 0 {
		return errors.New("hold queue refused")
	}
	return r.Backend.Hold(ctx, msg, ttl)
}

// refusingDeadLetters refuses the first n dead letters, as a broker
// refusing <q>.dead would.
type refusingDeadLetters struct {
	*memory.Backend
	refuse atomic.Int32
}

func (r *refusingDeadLetters) DeadLetter(ctx context.Context, dl broker.DeadLetter) error {
	if r.refuse.Add(-1) >= 0 {
		return errors.New("dead-letter queue refused")
	}
	return r.Backend.DeadLetter(ctx, dl)
}

// A deferral whose hold cannot be published is not acked, and its handler
// does not run again: the hold is tried again after RepublishDelay (1 s,
// jittered down to no less than half), and the job runs once more only
// after the delay it asked for.
func TestAFailedDeferralIsHeldAgainWithoutRunningTheHandler(t *testing.T) {
	hl := &hookLog{}
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: hl.hooks()}, WrapBackend: func(b *memory.Backend) broker.Backend {
		r := &refusingHolds{Backend: b}
		r.refuse.Store(1)
		return r
	}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		id := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{deferring(1, 10*time.Second)}))
		h.Advance(499 * time.Millisecond)
		if n, held, inFlight := h.Log.Len(), h.Backend.Held(qBeta), h.Backend.InFlight(qBeta); n != 1 || held != 0 || inFlight != 1 {
			t.Fatalf("before the backoff: %d runs, %d held, %d in flight; want 1, 0, 1 (not acked)", n, held, inFlight)
		}
		h.Advance(501 * time.Millisecond)
		if n, held, inFlight := h.Log.Len(), h.Backend.Held(qBeta), h.Backend.InFlight(qBeta); n != 1 || held != 1 || inFlight != 0 {
			t.Fatalf("after the backoff: %d runs, %d held, %d in flight; want 1, 1, 0 (held, then acked)", n, held, inFlight)
		}
		if got := h.Worker.SettleFailures(); got != 1 {
			t.Errorf("settle failures: got %d, want 1", got)
		}
		h.Advance(10 * time.Second)
		runs := h.Log.Of(id)
		wantShapes(t, runs, shape{1, 0, 0}, shape{1, 1, 10})
		if len(runs) == 2 && runs[1].At.Sub(runs[0].At) < 10*time.Second {
			t.Errorf("ran again %v after deferring for 10s: early", runs[1].At.Sub(runs[0].At))
		}
		hl.wantResults(t, queuey.Deferred, queuey.Succeeded) // once each: the settle tried again tells its outcome
	})
}

// A hold the broker keeps refusing (a hold queue declared by someone else
// with other arguments) ends, after five tries at a growing backoff, in the
// dead letters with a reason that says so, and in one ERROR line; the
// handler ran once, whether the hold was a deferral's or a retry's. With
// PoisonAfter 1, nothing of it counts as a crash.
func TestAHoldTheBrokerKeepsRefusingEndsInTheDeadLetters(t *testing.T) {
	for _, c := range []struct {
		name string
		job  queuey.Job
	}{
		{"deferral", betaJob{deferring(1, 30*time.Second)}},
		{"retry", alphaJob{plan{Fail: 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs, hl := &logRecorder{}, &hookLog{}
			opts := &clocktest.Options{
				Worker: queuey.WorkerConfig{PoisonAfter: 1, Hooks: hl.hooks()},
				Logger: slog.New(logs),
				WrapBackend: func(b *memory.Backend) broker.Backend {
					r := &refusingHolds{Backend: b}
					r.refuse.Store(1 << 30)
					return r
				},
			}
			clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
				handleAll(t, h.Worker, h.Clock)
				id := mustID(t)(h.Producer.Enqueue(t.Context(), c.job))
				q := "test." + c.job.Queue().Name
				h.Advance(2 * time.Minute)
				if runs := h.Log.Of(id); len(runs) != 1 {
					t.Errorf("the handler ran %d times, want once", len(runs))
				}
				dead := h.Backend.DeadLetters(q)
				if len(dead) != 1 || !strings.Contains(dead[0].Reason, "could not be held") || !strings.Contains(dead[0].Reason, "hold queue refused") {
					t.Fatalf("dead letters of %s: %+v, want the job, with why its hold failed", q, dead)
				}
				if got := h.Worker.SettleFailures(); got != 5 {
					t.Errorf("settle failures: got %d, want 5 (the tries)", got)
				}
				if n := logs.count("the broker refused the job's hold; dead-lettering it", slog.LevelError); n != 1 || logs.worst() != slog.LevelError {
					t.Errorf("ERROR lines saying the hold was refused: %d, want 1", n)
				}
				if n := logs.countAt(slog.LevelError); n != 1 {
					t.Errorf("ERROR lines: %d, want the one", n)
				}
				if n, held := h.Backend.InFlight(q), h.Backend.Held(q); n != 0 || held != 0 {
					t.Errorf("%d in flight and %d held, want none", n, held)
				}
				hl.wantResults(t, queuey.DeadLettered)
			})
		})
	}
}

// A dead letter that cannot be published stays unacked and is tried again,
// at a backoff, until it goes through; the handler does not run again.
func TestADeadLetterIsTriedAgainUntilItGoesThrough(t *testing.T) {
	hl := &hookLog{}
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: hl.hooks()}, WrapBackend: func(b *memory.Backend) broker.Backend {
		r := &refusingDeadLetters{Backend: b}
		r.refuse.Store(10) // the tenth is 90.5 s after the first at the earliest, 181 s at the latest
		return r
	}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		id := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{plan{Fatal: true}}))
		h.Advance(time.Minute)
		if n := h.Backend.InFlight(qBeta); n != 1 || len(h.Backend.DeadLetters(qBeta)) != 0 {
			t.Fatalf("after a minute of refusals: %d in flight, %d dead letters; want 1 (unacked), 0", n, len(h.Backend.DeadLetters(qBeta)))
		}
		h.Advance(3 * time.Minute)
		if dead := h.Backend.DeadLetters(qBeta); len(dead) != 1 || dead[0].ID != id {
			t.Fatalf("dead letters: %+v, want the job", dead)
		}
		if runs := h.Log.Of(id); len(runs) != 1 {
			t.Errorf("the handler ran %d times, want once", len(runs))
		}
		if got := h.Worker.SettleFailures(); got != 10 {
			t.Errorf("settle failures: got %d, want 10", got)
		}
		hl.wantResults(t, queuey.DeadLettered)
	})
}

// A pause (or a run of suspects) ends the consumer it stopped once what it
// held has run; a dead letter that cannot be published, tried again for as
// long as the worker runs, keeps only its own consumer open, not the
// queue stopped. With or without a pause, later jobs run.
func TestAPauseDoesNotWaitForADeadLetterThatCannotBePublished(t *testing.T) {
	for _, pause := range []bool{false, true} {
		t.Run(map[bool]string{false: "no pause", true: "pause"}[pause], func(t *testing.T) {
			opts := &clocktest.Options{
				Worker: queuey.WorkerConfig{Concurrency: 4},
				WrapBackend: func(b *memory.Backend) broker.Backend {
					r := &refusingDeadLetters{Backend: b}
					r.refuse.Store(1 << 30) // <q>.dead refuses publishes (e.g. a max-length reject-publish policy)
					return r
				},
			}
			clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, j alphaJob, jc queuey.JobContext) error {
					if j.Name == "pauser" && jc.Deferrals == 0 {
						return queuey.PauseQueue(time.Second, "429")
					}
					return j.run(ctx, h.Clock, jc)
				}))
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error { return nil }))
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, j gammaJob, jc queuey.JobContext) error { return nil }))
				mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "fatal", Fatal: true}}))
				h.Advance(time.Second)
				if pause {
					mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("pauser")}))
					h.Advance(time.Second)
				}
				later := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("later")}))
				h.Advance(10 * time.Minute)
				if n := len(h.Log.Of(later)); n != 1 {
					t.Errorf("a job enqueued after a 1s pause ran %d times in 10 minutes, want 1 (alpha pending %d, in flight %d, worker InFlight %d)",
						n, h.Backend.Pending(qAlpha), h.Backend.InFlight(qAlpha), h.Worker.InFlight("alpha"))
				}
			})
		})
	}
}
