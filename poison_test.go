package queuey_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

// Jobs in flight beside a job that crashes its worker come back
// redelivered with it, uncounted, and each then runs alone from the
// suspects queue; only the one that crashes every time is counted, and
// after PoisonAfter crashes alone (PoisonAfter + 1 in all) it is
// dead-lettered; its neighbours run to the end.
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

// A worker stopping while a suspect runs alone waits for it up to
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
// the broker sees it) is dead-lettered as poison once it crashed
// PoisonAfter times running alone; other jobs keep flowing.
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

func (soloJob) Kind() string { return "solo_job" }

func (soloJob) Queue() queuey.Queue { return solo }

// Before the suspects run alone, the deliveries the queue already holds
// run first, no more of them at once than the concurrency.
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

// A suspect waits in the suspects queue for its queue-mates already
// running to finish, however long they take, before it runs alone: the
// shutdown timeout is for a stopping worker, and cutting a queue-mate short
// would run it twice.
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

// A count on the work queue is not read: every republish there makes its
// headers afresh, so a job that carries one was forged (or an older
// worker's). Redelivered after a crash, it is a suspect like any other,
// not poison at once.
func TestACountOnTheWorkQueueIsNotRead(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{PoisonAfter: 3, Concurrency: 1}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		env := broker.NewEnvelope(alphaJob{}.Kind(), qAlpha, json.RawMessage(`{"name":"forged","block":1000000000}`), h.Clock.Now())
		msg, err := env.Message()
		must(t, err)
		msg.Headers = map[string]string{"x-queuey-redeliveries": "99"}
		must(t, h.Backend.Publish(t.Context(), msg))
		h.WaitFor("its first run", func() bool { return len(h.Log.Of(env.JobID)) == 1 })
		h.Backend.Disconnect(qAlpha)
		h.Advance(time.Minute)
		if dl := h.Backend.DeadLetters(qAlpha); len(dl) != 0 {
			t.Errorf("dead letters: %v, want none", dl)
		}
		if runs := len(h.Log.Of(env.JobID)); runs != 2 || h.Backend.AckedCount(qAlpha+".suspects") != 1 {
			t.Errorf("%d runs, %d acked as a suspect; want 2 (the second alone) and 1", runs, h.Backend.AckedCount(qAlpha+".suspects"))
		}
	})
}

// The once-a-minute look for suspects happens when the queue actor is busy
// with a flood of jobs as the minute ends (real scheduling, the mock clock
// outside synctest), not only when it is idle.
func TestSuspectsAreLookedForOnceAMinuteUnderLoad(t *testing.T) {
	for _, flood := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "busy"}[flood], func(t *testing.T) {
			mock := clock.NewMock()
			mock.Set(clocktest.Epoch)
			b := &lookCounter{Backend: memory.New(&memory.Options{Clock: mock}), queue: qAlpha + ".suspects", looks: make(chan struct{}, 100)}
			defer b.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			log := slog.New(slog.DiscardHandler)
			p, err := queuey.NewProducer(ctx, b, app, &queuey.ProducerConfig{Clock: mock, Logger: log})
			must(t, err)
			w, err := queuey.NewWorker(b, app, &queuey.WorkerConfig{Clock: mock, Logger: log, PoisonAfter: 3, Concurrency: 4})
			must(t, err)
			suspectRan := make(chan struct{})
			var floodRuns atomic.Int64
			must(t, queuey.Handle(w, func(ctx context.Context, j alphaJob, jc queuey.JobContext) error {
				if j.Name == "suspect" {
					close(suspectRan)
				} else {
					floodRuns.Add(1)
				}
				return nil
			}))
			must(t, queuey.Handle(w, func(ctx context.Context, j betaJob, jc queuey.JobContext) error { return nil }))
			must(t, queuey.Handle(w, func(ctx context.Context, j gammaJob, jc queuey.JobContext) error { return nil }))
			stopped := make(chan error, 1)
			go func() { stopped <- w.Run(ctx) }()
			b.waitForALook(t, "the look as the queue is first consumed")
			env := broker.NewEnvelope(alphaJob{}.Kind(), qAlpha, []byte(`{"name":"suspect"}`), mock.Now())
			msg, _ := env.Message()
			msg.Queue = qAlpha + ".suspects"
			must(t, b.Publish(ctx, msg))
			stopFlood := startFlood(ctx, flood, p)
			waitUntil(t, "the flood's first hundred runs", func() bool { return !flood || floodRuns.Load() >= 100 })
			mock.Add(time.Minute) // the minute's look falls due, the actor busy
			b.waitForALook(t, "the minute's look")
			stopFlood()
			select {
			case <-suspectRan:
			case <-time.After(10 * time.Second):
				t.Fatalf("the suspect left in %s.suspects did not run after the minute's look (%d still there)", qAlpha, b.Pending(qAlpha+".suspects"))
			}
			cancel()
			stopWorker(t, stopped, mock)
		})
	}
}

// lookCounter is a memory backend that tells each look at one queue's
// depth (a queue actor's look for suspects) on looks.
type lookCounter struct {
	*memory.Backend
	queue string
	looks chan struct{}
}

// Depth tells the look, then answers it.
func (b *lookCounter) Depth(ctx context.Context, queue string) (int, error) {
	if queue == b.queue {
		select {
		case b.looks <- struct{}{}:
		default:
		}
	}
	return b.Backend.Depth(ctx, queue)
}

// waitForALook waits for the next look at the queue's depth.
func (b *lookCounter) waitForALook(t *testing.T, what string) {
	t.Helper()
	select {
	case <-b.looks:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not happen in 10 s", what)
	}
}

// startFlood enqueues alpha jobs from a goroutine until the returned func
// is called (which waits for it to end); with on false it does nothing.
func startFlood(ctx context.Context, on bool, p *queuey.Producer) (stop func()) {
	if !on {
		return func() {}
	}
	var stopping atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stopping.Load() {
			_, _ = p.Enqueue(ctx, alphaJob{named("flood")})
		}
	}()
	return func() { stopping.Store(true); <-done }
}

// waitUntil polls cond every millisecond for up to 10 s: for what real
// scheduling does, outside a synctest bubble.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not in 10 s", what)
		}
	}
}

// stopWorker waits for a worker's Run to return, moving the mock clock on
// so that its graceful stop's waits end.
func stopWorker(t *testing.T, stopped <-chan error, mock *clock.Mock) {
	t.Helper()
	for {
		select {
		case err := <-stopped:
			must(t, err)
			return
		case <-time.After(10 * time.Millisecond):
			mock.Add(time.Second)
		}
	}
}

// publishRaw publishes a job of kind to queue (e.g. a suspects queue), as a
// worker that died would have left it.
func publishRaw(t *testing.T, h *clocktest.Harness, kind, home, queue, payload string) string {
	t.Helper()
	env := broker.NewEnvelope(kind, home, json.RawMessage(payload), h.Clock.Now())
	msg, err := env.Message()
	must(t, err)
	msg.Queue = queue
	must(t, h.Backend.Publish(t.Context(), msg))
	return env.JobID
}

// handlePausing registers the plan-driven handlers of the three queues,
// except that a job named "pauser" pauses its queue for five minutes the
// first time it runs.
func handlePausing(t *testing.T, h *clocktest.Harness) {
	t.Helper()
	run := func(ctx context.Context, p plan, jc queuey.JobContext) error {
		if p.Name == "pauser" && jc.Deferrals == 0 {
			return queuey.PauseQueue(5*time.Minute, "429")
		}
		return p.run(ctx, h.Clock, jc)
	}
	must(t, queuey.Handle(h.Worker, func(ctx context.Context, j alphaJob, jc queuey.JobContext) error { return run(ctx, j.plan, jc) }))
	must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error { return run(ctx, j.plan, jc) }))
	must(t, queuey.Handle(h.Worker, func(ctx context.Context, j gammaJob, jc queuey.JobContext) error { return run(ctx, j.plan, jc) }))
}

// A suspect that lands while the queue is paused runs once the queue is
// consumed again.
func TestSuspectsAreLookedForAfterAPause(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{PoisonAfter: 3, Concurrency: 1}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handlePausing(t, h)
		h.Advance(time.Second) // consuming: the first look for suspects (none)
		pauser := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("pauser")}))
		h.Advance(time.Second) // beta is paused for 5 minutes
		suspect := publishRaw(t, h, betaJob{}.Kind(), qBeta, qBeta+".suspects", `{"name":"suspect"}`)
		h.Advance(30 * time.Minute)
		if n := len(h.Log.Of(pauser)); n != 2 {
			t.Fatalf("pauser ran %d times, want 2", n)
		}
		if n := len(h.Log.Of(suspect)); n != 1 {
			t.Errorf("the suspect left in %s.suspects ran %d times in 30 minutes, want 1 (looked for 'when it consumes again' and 'once a minute'); %d still waiting",
				qBeta, n, h.Backend.Pending(qBeta+".suspects"))
		}
	})
}

// A suspect left by another worker is found within a minute.
func TestSuspectsLeftByAnotherWorkerAreFound(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{PoisonAfter: 3, Concurrency: 1}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		h.Advance(time.Second)
		suspect := publishRaw(t, h, betaJob{}.Kind(), qBeta, qBeta+".suspects", `{"name":"suspect"}`)
		h.Advance(30 * time.Minute)
		if n := len(h.Log.Of(suspect)); n != 1 {
			t.Errorf("suspect ran %d times, want 1", n)
		}
	})
}

// A suspect run alone whose hold (a deferral) fails once is held again
// after the backoff, its consumer kept open meanwhile: its handler does
// not run again before the hour it asked for.
func TestASuspectWhoseHoldFailsIsNotRunAgain(t *testing.T) {
	var r *refusingHolds
	opts := &clocktest.Options{
		Worker: queuey.WorkerConfig{PoisonAfter: 3, Concurrency: 1},
		WrapBackend: func(b *memory.Backend) broker.Backend {
			r = &refusingHolds{Backend: b}
			r.refuse.Store(1)
			return r
		},
	}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		must(t, h.Backend.Declare(t.Context(), broker.QueueSpec{Name: qBeta + ".suspects", Durable: true, Plain: true}))
		id := publishRaw(t, h, betaJob{}.Kind(), qBeta, qBeta+".suspects", `{"name":"d","defers":1,"defer_for":3600000000000}`)
		h.Advance(time.Minute)
		runs := h.Log.Of(id)
		if len(runs) != 1 {
			for _, e := range runs {
				t.Logf("run at %v deferrals=%d redelivered=%v", e.At.Sub(clocktest.Epoch), e.Deferrals, e.Redelivered)
			}
			t.Errorf("a suspect that asked for a 1h deferral ran %d times within a minute, want 1 (a failed publish is not a reason to run the handler again)", len(runs))
		}
	})
}

// The same for a Fatal suspect whose dead letter fails once: it runs once.
func TestAFatalSuspectWhoseDeadLetterFailsIsNotRunAgain(t *testing.T) {
	opts := &clocktest.Options{
		Worker: queuey.WorkerConfig{PoisonAfter: 3, Concurrency: 1},
		WrapBackend: func(b *memory.Backend) broker.Backend {
			r := &refusingDeadLetters{Backend: b}
			r.refuse.Store(1)
			return r
		},
	}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		must(t, h.Backend.Declare(t.Context(), broker.QueueSpec{Name: qBeta + ".suspects", Durable: true, Plain: true}))
		id := publishRaw(t, h, betaJob{}.Kind(), qBeta, qBeta+".suspects", `{"name":"f","fatal":true}`)
		h.Advance(time.Minute)
		if runs := h.Log.Of(id); len(runs) != 1 {
			t.Errorf("a fatal suspect whose dead letter failed once ran %d times, want 1", len(runs))
		}
	})
}

// A job that came back from a crash, moved to the suspects queue, runs
// alone even when a queue-mate pauses the queue before its turn: the
// suspects are looked for again when the queue is consumed again.
func TestASuspectOfACrashRunsAfterAQueueMatesPause(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{PoisonAfter: 3, Concurrency: 2}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handlePausing(t, h)
		x := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "x", Block: 10 * time.Second}}))
		h.WaitFor("x running", func() bool { return len(h.Log.Of(x)) == 1 })
		h.Backend.Disconnect(qAlpha) // x comes back redelivered: a suspect
		mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("pauser")}))
		h.Advance(30 * time.Minute)
		if n := len(h.Log.Of(x)); n != 2 {
			t.Errorf("x ran %d times in 30 minutes, want 2 (then alone); %s.suspects holds %d", n, qAlpha, h.Backend.Pending(qAlpha+".suspects"))
		}
	})
}
