package queuey_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	opts := &clocktest.Options{WrapBackend: func(b *memory.Backend) broker.Backend {
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
			logs := &logRecorder{}
			opts := &clocktest.Options{
				Worker: queuey.WorkerConfig{PoisonAfter: 1},
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
			})
		})
	}
}

// A dead letter that cannot be published stays unacked and is tried again,
// at a backoff, until it goes through; the handler does not run again.
func TestADeadLetterIsTriedAgainUntilItGoesThrough(t *testing.T) {
	opts := &clocktest.Options{WrapBackend: func(b *memory.Backend) broker.Backend {
		r := &refusingDeadLetters{Backend: b}
		r.refuse.Store(7)
		return r
	}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		id := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{plan{Fatal: true}}))
		h.Advance(time.Minute)
		if n := h.Backend.InFlight(qBeta); n != 1 || len(h.Backend.DeadLetters(qBeta)) != 0 {
			t.Fatalf("after a minute of refusals: %d in flight, %d dead letters; want 1 (unacked), 0", n, len(h.Backend.DeadLetters(qBeta)))
		}
		h.Advance(2 * time.Minute)
		if dead := h.Backend.DeadLetters(qBeta); len(dead) != 1 || dead[0].ID != id {
			t.Fatalf("dead letters: %+v, want the job", dead)
		}
		if runs := h.Log.Of(id); len(runs) != 1 {
			t.Errorf("the handler ran %d times, want once", len(runs))
		}
		if got := h.Worker.SettleFailures(); got != 7 {
			t.Errorf("settle failures: got %d, want 7", got)
		}
	})
}

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

// Jobs in flight beside a job that crashes its worker come back
// redelivered with it and are counted too; each counted job then runs
// alone, so only the one that crashes every time reaches PoisonAfter,
// after exactly that many crashes, and its neighbours run to the end.
func TestTheNeighboursOfAPoisonJobAreNotDeadLettered(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{PoisonAfter: 3, Concurrency: 4}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		poison := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "poison", Block: 10 * time.Second}}))
		var neighbours []string
		for i := range 3 {
			neighbours = append(neighbours, mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: fmt.Sprint("neighbour-", i), Block: time.Second}})))
		}
		inFlight := func() bool {
			for _, id := range append(neighbours, poison) {
				if len(h.Log.Of(id)) == 0 {
					return false
				}
			}
			return true
		}
		h.WaitFor("all four in flight", inFlight)
		h.Backend.Disconnect(qAlpha) // the first crash: all four come back redelivered, suspects
		for crash := 2; crash <= 4; crash++ {
			h.WaitFor(fmt.Sprintf("run %d of the poison job", crash), func() bool { return len(h.Log.Of(poison)) == crash })
			if n, alone := h.Backend.InFlight(qAlpha), h.Backend.InFlight(qAlpha+".suspects"); n != 0 || alone != 1 {
				t.Errorf("crash %d: %d deliveries in flight and %d suspects, want the poison job's alone", crash, n, alone)
			}
			h.Backend.Disconnect(qAlpha + ".suspects")
			// Unlike a real crash this leaves the handler running (a job
			// run alone is not watched for a lost consumer): let it end.
			h.Advance(10 * time.Second)
		}
		h.WaitFor("the poison dead letter", func() bool { return len(h.Backend.DeadLetters(qAlpha)) > 0 })
		h.Advance(time.Minute)
		if dl := h.Backend.DeadLetters(qAlpha); len(dl) != 1 || dl[0].ID != poison {
			t.Errorf("dead letters: %d, want only the poison job's", len(dl))
		}
		if n := len(h.Log.Of(poison)); n != 4 {
			t.Errorf("runs of the poison job: got %d, want 4 (among its neighbours, then three times alone)", n)
		}
		acked := map[string]bool{}
		for _, m := range h.Backend.Acked(qAlpha + ".suspects") {
			acked[m.ID] = true
		}
		for i, id := range neighbours {
			if !acked[id] {
				t.Errorf("neighbour %d never ran to the end (%d runs)", i, len(h.Log.Of(id)))
			}
		}
	})
}

// PoisonAfter counts only a job that was running alone when its worker
// died: a crash among queue-mates counts no one (here PoisonAfter 1, which
// would make poison of the first count), and a suspect waiting its turn in
// the suspects queue when the worker dies is not counted either.
func TestOnlyAJobRunningAloneWhenItsWorkerDiesIsCounted(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{PoisonAfter: 1, Concurrency: 2}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		first := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "first", Block: 10 * time.Second}}))
		second := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "second", Block: 10 * time.Second}}))
		h.WaitFor("both running", func() bool { return len(h.Log.Of(first)) == 1 && len(h.Log.Of(second)) == 1 })
		h.Backend.Disconnect(qAlpha) // a crash with both running: neither is counted
		h.WaitFor("the first running alone", func() bool { return len(h.Log.Of(first)) == 2 })
		if dl := h.Backend.DeadLetters(qAlpha); len(dl) != 0 {
			t.Fatalf("dead letters after a crash among queue-mates: %v, want none", dl)
		}
		if held, alone := h.Backend.InFlight(qAlpha), h.Backend.InFlight(qAlpha+".suspects"); held != 0 || alone != 1 {
			t.Fatalf("the worker holds %d deliveries and %d suspects, want the first alone (the second waits on a queue)", held, alone)
		}
		h.Backend.Disconnect(qAlpha + ".suspects") // the worker dies with the first running alone
		h.Backend.Disconnect(qAlpha)
		h.Advance(time.Minute)
		if dl := h.Backend.DeadLetters(qAlpha); len(dl) != 1 || dl[0].ID != first || !strings.HasPrefix(dl[0].Reason, "poison:") {
			t.Errorf("dead letters: %+v, want the first only, as poison", dl)
		}
		if runs := h.Log.Of(second); len(runs) != 2 || h.Backend.AckedCount(qAlpha+".suspects") != 2 {
			t.Errorf("the second: %d runs, %d suspects acked; want 2 runs (among queue-mates, then alone), 2 acked (it and the poison)", len(runs), h.Backend.AckedCount(qAlpha+".suspects"))
		}
	})
}

// A worker stopping while a counted job runs alone waits for it up to
// ShutdownTimeout, as for any running job, then cancels it.
func TestAStopWaitsForAJobRunningAloneUpToTheShutdownTimeout(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{PoisonAfter: 3, Concurrency: 4, ShutdownTimeout: 5 * time.Second}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		slow := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "slow", Block: time.Hour}}))
		h.WaitFor("its first run", func() bool { return len(h.Log.Of(slow)) == 1 })
		h.Backend.Disconnect(qAlpha) // a suspect: it runs alone next
		h.WaitFor("its run alone", func() bool { return len(h.Log.Of(slow)) == 2 })
		h.BeginStop()
		from := h.Clock.Now()
		if err := h.Stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if took := h.Clock.Now().Sub(from); took < 5*time.Second || took > 6*time.Second {
			t.Errorf("the stop took %v of virtual time, want the shutdown timeout (5s)", took)
		}
		if n := h.Backend.Pending(qAlpha) + h.Backend.InFlight(qAlpha); n != 1 {
			t.Errorf("the cut-off job is not back on its queue: %d pending or in flight", n)
		}
	})
}

// Deliveries a pause gives back are not counted as redeliveries: with
// PoisonAfter on, a queue paused again and again, its backlog prefetched
// each time, dead-letters nothing as poison.
func TestPausesDoNotMakePoison(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{PoisonAfter: 1, Concurrency: 1}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j alphaJob, jc queuey.JobContext) error {
			if j.Name == "limited" && jc.Deferrals < 3 {
				return queuey.PauseQueue(time.Second, "429")
			}
			return nil
		}))
		limited := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("limited")}))
		var others []string
		for i := range 3 {
			others = append(others, mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named(fmt.Sprint("other-", i))})))
		}
		h.Advance(time.Minute)
		if dl := h.Backend.DeadLetters(qAlpha); len(dl) != 0 {
			t.Errorf("dead letters after 3 pauses: %d (%s), want none", len(dl), dl[0].Reason)
		}
		if n := len(h.Log.Of(limited)); n != 4 {
			t.Errorf("runs of the pausing job: %d, want 4", n)
		}
		for i, id := range others {
			if n := len(h.Log.Of(id)); n != 1 {
				t.Errorf("job %d of the backlog ran %d times, want once", i, n)
			}
		}
	})
}

// A job whose run keeps ending with its consumer lost (a worker crash, as
// the broker sees it) is dead-lettered as poison after PoisonAfter
// redeliveries; other jobs keep flowing.
func TestAJobThatKeepsCrashingItsWorkerIsDeadLetteredAsPoison(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{PoisonAfter: 3, Concurrency: 4}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		poison := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{plan{Name: "poison", Block: 5 * time.Second}}))
		for crash := range 4 {
			h.WaitFor(fmt.Sprintf("run %d", crash+1), func() bool { return len(h.Log.Of(poison)) == crash+1 })
			if crash == 0 {
				h.Backend.Disconnect(qBeta) // among its queue-mates: a suspect, not counted
			} else {
				h.Backend.Disconnect(qBeta + ".suspects") // alone: counted
			}
		}
		h.WaitFor("the poison dead letter", func() bool { return len(h.Backend.DeadLetters(qBeta)) == 1 })
		if dl := h.Backend.DeadLetters(qBeta)[0]; !strings.HasPrefix(dl.Reason, "poison: its worker died 3 times while it ran alone") || dl.ID != poison {
			t.Errorf("dead letter: %s %q", dl.ID, dl.Reason)
		}
		if n := len(h.Log.Of(poison)); n != 4 {
			t.Errorf("runs of the poison job: got %d, want 4", n)
		}
		fine := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("fine")}))
		h.WaitFor("the next job", func() bool { return len(h.Log.Of(fine)) == 1 })
	})
}

// soloJob runs on a queue whose prefetch (10) is over the worker's
// concurrency in TestASuspectRunningAloneKeepsToTheConcurrency.
type soloJob struct{ plan }

var solo = queuey.Queue{Name: "solo", Prefetch: 10}

func (soloJob) Kind() string        { return "solo_job" }
func (soloJob) Queue() queuey.Queue { return solo }

// While a suspect of a crash waits to run alone, the deliveries pulled
// beside it run first, no more of them at once than the concurrency.
func TestASuspectRunningAloneKeepsToTheConcurrency(t *testing.T) {
	set := queuey.QueueSet{Prefix: "test", Queues: []queuey.Queue{solo}}
	var at atOnce
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: 2, PoisonAfter: 3}}
	clocktest.Run(t, set, opts, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j soloJob, jc queuey.JobContext) error {
			return at.run(func() error { return j.run(ctx, h.Clock, jc) })
		}))
		publish := func(queue string) {
			env := broker.NewEnvelope("solo_job", "test.solo", json.RawMessage(`{"name":"x","block":1000000000}`), h.Clock.Now())
			msg, err := env.Message()
			must(t, err)
			msg.Queue = queue
			must(t, h.Backend.Publish(t.Context(), msg))
		}
		must(t, h.Backend.Declare(t.Context(), broker.QueueSpec{Name: "test.solo.suspects", Durable: true, Plain: true}))
		publish("test.solo.suspects") // a worker that died left it
		for range 9 {
			publish("test.solo")
		}
		h.Advance(30 * time.Second) // the isolation: what was pulled before it, then the suspect alone
		h.Advance(30 * time.Second) // the queue consumed again
		if h.Log.Len() != 10 || at.peak.Load() != 2 {
			t.Errorf("got %d runs with at most %d at once, want 10 with at most 2", h.Log.Len(), at.peak.Load())
		}
	})
}

// A suspect waits for its queue-mates already running to finish, however
// long they take, before it runs alone: the shutdown timeout is for a
// stopping worker, and a suspect run on a cancelled ctx would come back
// counted once more, closer to poison, without a crash.
func TestASuspectWaitsForLongRunningQueueMates(t *testing.T) {
	set := queuey.QueueSet{Prefix: "test", Queues: []queuey.Queue{solo}}
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: 2, PoisonAfter: 2, ShutdownTimeout: 5 * time.Second}}
	clocktest.Run(t, set, opts, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j soloJob, jc queuey.JobContext) error {
			return j.run(ctx, h.Clock, jc)
		}))
		publish := func(payload, queue string) string {
			env := broker.NewEnvelope("solo_job", "test.solo", json.RawMessage(payload), h.Clock.Now())
			msg, err := env.Message()
			must(t, err)
			msg.Queue = queue
			must(t, h.Backend.Publish(t.Context(), msg))
			return env.JobID
		}
		long := publish(`{"name":"long","block":80000000000}`, "test.solo")
		h.Advance(time.Second) // long is running
		// Left by a worker stopped before it ran it: found within a minute.
		suspect := publish(`{"name":"suspect","block":1000000000}`, "test.solo.suspects")
		h.Advance(2 * time.Minute)
		if runs := len(h.Log.Of(long)); runs != 1 {
			t.Errorf("long job: %d runs, want 1 (not cut short for the suspect)", runs)
		}
		if runs := len(h.Log.Of(suspect)); runs != 1 {
			t.Errorf("suspect: %d runs, want 1", runs)
		}
		if dl := h.Backend.DeadLetters("test.solo"); len(dl) != 0 {
			t.Errorf("dead letters: got %v, want none", dl)
		}
		if got, alone := h.Backend.AckedCount("test.solo"), h.Backend.AckedCount("test.solo.suspects"); got != 1 || alone != 1 {
			t.Errorf("acked: got %d and %d suspects, want 1 and 1", got, alone)
		}
	})
}

// A queue whose suspect finished running alone after the worker began to
// stop does not consume again: nothing more is taken from it, run, or
// published again, while the stop waits for other queues' handlers.
func TestAQueueDoesNotConsumeAgainAfterAnIsolationOnceStopping(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: 2, PoisonAfter: 3, ShutdownTimeout: 10 * time.Second}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{plan{Name: "long", Block: time.Hour}}))
		env := broker.NewEnvelope(alphaJob{}.Kind(), qAlpha, json.RawMessage(`{"name":"suspect","block":2000000000}`), h.Clock.Now())
		msg, err := env.Message()
		must(t, err)
		msg.Queue = qAlpha + ".suspects" // left by a worker that died
		must(t, h.Backend.Declare(t.Context(), broker.QueueSpec{Name: msg.Queue, Durable: true, Plain: true}))
		must(t, h.Backend.Publish(t.Context(), msg))
		h.Advance(time.Second) // both run: the suspect alone on alpha
		h.BeginStop()
		late := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("late")}))
		h.Advance(3 * time.Second) // the suspect is done; beta's job still runs
		if runs := len(h.Log.Of(late)); runs != 0 {
			t.Errorf("a job enqueued after the stop began ran %d times", runs)
		}
		if got := h.Backend.Pending(qAlpha); got != 1 {
			t.Errorf("alpha pending during the stop: got %d, want 1 (the late job, untouched)", got)
		}
		if got := h.Backend.AckedCount(qAlpha + ".suspects"); got != 1 {
			t.Errorf("alpha's suspects acked during the stop: got %d, want 1", got)
		}
		must(t, h.Stop())
	})
}
