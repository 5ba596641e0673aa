package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

// Scenario 9: a graceful stop finishes what runs, gives back what waits,
// and leaves held jobs in the broker for the next worker.
func TestGracefulShutdown(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{ShutdownTimeout: time.Minute}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		ctx, id := t.Context(), mustID(t)
		handleAll(t, h.Worker, h.Clock)
		slow := id(h.Producer.Enqueue(ctx, alphaJob{plan{Block: 10 * time.Second}}))
		for i := range 5 {
			id(h.Producer.Enqueue(ctx, alphaJob{named(fmt.Sprint(i))}))
		}
		later := id(h.Producer.Defer(ctx, alphaJob{named("later")}, time.Hour))
		h.Start()
		// Concurrency 1, prefetch 4: the slow job runs, three wait in the
		// mailbox, two wait on the queue.
		if got := h.Backend.InFlight(qAlpha); got != 4 {
			t.Fatalf("in flight: got %d, want 4", got)
		}
		h.BeginStop()
		// While the slow job still runs, what was prefetched is back on the
		// queue already, not handed back to the stopping consumer.
		if pending, inFlight := h.Backend.Pending(qAlpha), h.Backend.InFlight(qAlpha); pending != 5 || inFlight != 1 {
			t.Errorf("during the stop: pending %d, in flight %d; want 5 and 1", pending, inFlight)
		}
		if err := h.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		checkLeftAfterStop(t, h, slow)
		pickUpAfterStop(t, h, later)
	})
}

// checkLeftAfterStop checks what TestGracefulShutdown's stop left: the
// slow job run once and acked, the five others back on the queue, the
// held job still held, nothing in flight.
func checkLeftAfterStop(t *testing.T, h *clocktest.Harness, slow string) {
	t.Helper()
	acked := len(h.Backend.Acked(qAlpha))
	if acked != 1 || h.Log.Len() != 1 {
		t.Errorf("after stop: got %d acked and %d runs, want the slow job finished: 1 and 1", acked, h.Log.Len())
	}
	if got, want := acked+h.Backend.Pending(qAlpha), 6; got != want {
		t.Errorf("acked + pending: got %d, want %d (nothing lost)", got, want)
	}
	if got := h.Backend.InFlight(qAlpha); got != 0 {
		t.Errorf("in flight after stop: got %d, want 0", got)
	}
	if got := h.Backend.Held(qAlpha); got != 1 {
		t.Errorf("held after stop: got %d, want 1", got)
	}
	if runs := h.Log.Of(slow); len(runs) != 1 {
		t.Errorf("slow job runs: got %d, want 1", len(runs))
	}
}

// pickUpAfterStop runs a new worker on h's backend: it runs the five jobs
// given back at once, and the held job (later) when its hour is up.
func pickUpAfterStop(t *testing.T, h *clocktest.Harness, later string) {
	t.Helper()
	w2, err := queuey.NewWorker(h.Backend, app, &queuey.WorkerConfig{Clock: h.Clock, Logger: slog.New(slog.DiscardHandler), Middleware: []queuey.Middleware{h.Log.Middleware(h.Clock)}})
	must(t, err)
	handleAll(t, w2, h.Clock)
	runCtx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w2.Run(runCtx) }()
	synctest.Wait()
	if got := len(h.Backend.Acked(qAlpha)); got != 6 {
		t.Errorf("acked after the second worker: got %d, want 6", got)
	}
	h.Clock.Add(time.Hour)
	synctest.Wait()
	wantShapes(t, h.Log.Of(later), shape{1, 0, 10})
	stop()
	if err := <-done; err != nil {
		t.Errorf("second worker: %v", err)
	}
}

func TestShutdownCancelsHandlersThatOutliveTheTimeout(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{ShutdownTimeout: 5 * time.Second}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Block: time.Hour}}))
		h.Start()
		start := h.Clock.Now()
		if err := h.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if took := h.Clock.Since(start); took < 5*time.Second || took > 10*time.Second {
			t.Errorf("stop took %v of virtual time, want about the 5s shutdown timeout", took)
		}
		// The interrupted job was not its own failure: it goes back as it was.
		if got := h.Backend.Pending(qAlpha); got != 1 {
			t.Errorf("pending after stop: got %d, want the interrupted job back", got)
		}
		if dl := h.Backend.DeadLetters(qAlpha); len(dl) != 0 {
			t.Errorf("dead letters: got %v, want none", dl)
		}
	})
}

// A handler that ignores its ctx cannot be stopped: Run waits the shutdown
// timeout, cancels it, waits as long again, then returns
// ErrHandlersStillRunning instead of waiting for ever; the job, never
// settled, comes back.
func TestAHandlerThatIgnoresItsCtxIsAbandonedAfterTwiceTheShutdownTimeout(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{ShutdownTimeout: 5 * time.Second}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		release := make(chan struct{})
		running := make(chan struct{})
		must(t, queuey.Handle(h.Worker, func(context.Context, deafJob, queuey.JobContext) error {
			close(running)
			<-release // deaf to its ctx
			return nil
		}))
		mustID(t)(h.Producer.Enqueue(t.Context(), deafJob{}))
		h.Start()
		<-running
		start := h.Clock.Now()
		err := h.Stop()
		if !errors.Is(err, queuey.ErrHandlersStillRunning) {
			t.Errorf("Stop: %v, want ErrHandlersStillRunning", err)
		}
		if took := h.Clock.Since(start); took < 10*time.Second || took > 12*time.Second {
			t.Errorf("stop took %v of virtual time, want about twice the 5s shutdown timeout", took)
		}
		if got := h.Backend.Pending(qAlpha); got != 1 {
			t.Errorf("pending after stop: got %d, want the abandoned job back", got)
		}
		close(release)
		h.Idle() // the abandoned handler returns; its late ack is refused
		if got := h.Backend.Pending(qAlpha); got != 1 {
			t.Errorf("pending after the abandoned handler returned: got %d, want the job still there", got)
		}
	})
}

// A handler that returns when its ctx is cancelled is not abandoned while
// its job is being published again (PoisonAfter: a job cut short by a stop
// is set aside), however short the shutdown timeout: the publish has
// giveBackTimeout. Abandoned, the job would be requeued with its
// consumer and published again too: two copies.
func TestAJobBeingSetAsideIsNotAbandoned(t *testing.T) {
	var clk *clocktest.Clock // set before anything is published
	slowRedelivery := &queuey.Hooks{Publish: func(_ context.Context, p *queuey.PublishInfo) func(error) {
		if p.Op == queuey.OpRedelivery {
			clk.Sleep(400 * time.Millisecond) // a slow broker
		}
		return nil
	}}
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{ShutdownTimeout: 100 * time.Millisecond, PoisonAfter: 3, Hooks: slowRedelivery}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		clk = h.Clock
		handleAll(t, h.Worker, h.Clock)
		mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "long", Block: time.Hour}}))
		h.Start()
		if err := h.Stop(); err != nil {
			t.Errorf("Stop: %v, want nil", err)
		}
		if got := h.Backend.Pending(qAlpha); got != 1 {
			t.Errorf("pending: %d, want the one job, published again once", got)
		}
	})
}

// deafJob's handler in the test above ignores its ctx.
type deafJob struct{}

func (deafJob) Kind() string        { return "deaf" }
func (deafJob) Queue() queuey.Queue { return alpha }

// Scenario 10: a queue actor whose consumer is lost crashes; its supervisor
// starts it again and no job is lost.
func TestACrashedQueueActorIsRestartedWithoutLosingAJob(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx, id := t.Context(), mustID(t)
		handleAll(t, h.Worker, h.Clock)
		slow := id(h.Producer.Enqueue(ctx, alphaJob{plan{Block: 2 * time.Second}}))
		var rest []string
		for i := range 5 {
			rest = append(rest, id(h.Producer.Enqueue(ctx, alphaJob{named(fmt.Sprint(i))})))
		}
		h.Start()
		h.Backend.Disconnect(qAlpha) // the slow job is running
		h.WaitFor("every job acked", func() bool { return len(h.Backend.Acked(qAlpha)) == 6 })
		if got := h.Backend.Consumers(qAlpha); got != 1 {
			t.Errorf("consumers after the restart: got %d, want 1", got)
		}
		// The broker took the slow job back with the lost consumer, so its
		// run was cancelled (it could not be acked) and it ran again, at
		// once, without waiting for the cancelled run: at least once.
		runs := h.Log.Of(slow)
		if len(runs) != 2 || !runs[1].Redelivered {
			t.Fatalf("slow job runs: got %+v, want 2, the second redelivered", runs)
		}
		if wait := runs[1].At.Sub(runs[0].At); wait >= 2*time.Second {
			t.Errorf("the queue was consumed again %v after the loss; it waited for the cancelled run", wait)
		}
		if got := h.Worker.SettleFailures(); got != 0 {
			t.Errorf("settle failures: got %d, want 0 (the cancelled run settles nothing)", got)
		}
		for _, r := range rest {
			if n := len(h.Log.Of(r)); n != 1 {
				t.Errorf("job %s ran %d times, want 1", r, n)
			}
		}
	})
}

func TestAClosedBackendEndsRun(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		h.Start()
		must(t, h.Backend.Close())
		h.Idle()
		if err := h.Stop(); !errors.Is(err, broker.ErrClosed) {
			t.Errorf("Run: got %v, want an error wrapping ErrClosed", err)
		}
	})
}

// Scenario 11: a month of deferrals and retries of many jobs, in virtual
// time: each of 1,000 jobs defers for a day 28 times, fails twice with an
// hour's backoff, then succeeds, 31 runs each.
func TestThirtyDaysOfDeferralsAndRetries(t *testing.T) {
	const jobs = 1000
	q := queuey.Queue{Name: "p", Prefetch: 64, Retry: &queuey.RetryPolicy{MaxAttempts: 3, Backoff: queuey.FixedBackoff(time.Hour)}}
	set := queuey.QueueSet{Prefix: "month", Queues: []queuey.Queue{q}}
	start := time.Now()
	clocktest.Run(t, set, &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: 8}}, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j pJob, jc queuey.JobContext) error {
			return j.run(ctx, h.Clock, jc)
		}))
		for range jobs {
			mustID(t)(h.Producer.Enqueue(t.Context(), pJob{plan{Defers: 28, DeferFor: 24 * time.Hour, Fail: 2}}))
		}
		h.Advance(30 * 24 * time.Hour)
		if got, want := h.Log.Len(), jobs*31; got != want {
			t.Errorf("runs: got %d, want %d", got, want)
		}
		if got := h.Backend.AckedCount("month.p"); got != jobs*31 {
			t.Fatalf("acked: got %d, want %d", got, jobs*31)
		}
		if dl := h.Backend.DeadLetters("month.p"); len(dl) != 0 {
			t.Errorf("dead letters: got %d, want 0", len(dl))
		}
		acked := h.Backend.Acked("month.p")
		if last := acked[len(acked)-1]; last.Attempt != 3 || last.Deferrals != 28 {
			t.Errorf("last ack: attempt %d deferrals %d, want 3 and 28", last.Attempt, last.Deferrals)
		}
	})
	// Outside the bubble time.Now is the wall clock again.
	t.Logf("%d jobs, %d runs over 30 simulated days took %v of wall time", jobs, jobs*31, time.Since(start))
}

// A job cut short by a stop that ran out of time did not crash its worker:
// with PoisonAfter on it goes back unchanged (published again and acked,
// as an unstarted delivery does), not requeued to come back counted, so a
// long job is not dead-lettered as poison by a few restarts.
// A job cut short by a stop, with PoisonAfter on, is published again
// unchanged; if that publish fails, the outcome the hooks see says so
// (SettleErr), as for any settlement that fails, and it is counted.
func TestAFailedSetAsideOfAJobCutShortIsASettleFailure(t *testing.T) {
	var outcomes []queuey.Outcome
	var mu sync.Mutex
	opts := &clocktest.Options{
		Worker: queuey.WorkerConfig{ShutdownTimeout: 5 * time.Second, PoisonAfter: 1, Hooks: &queuey.Hooks{
			Deliver: func(ctx context.Context, _ *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
				return ctx, func(o queuey.Outcome) {
					mu.Lock()
					defer mu.Unlock()
					outcomes = append(outcomes, o)
				}
			},
		}},
		WrapBackend: func(b *memory.Backend) broker.Backend {
			r := &refusingPublishes{Backend: b}
			r.allow.Store(1) // the enqueue
			return r
		},
	}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "long", Block: time.Hour}}))
		h.Start()
		must(t, h.Stop()) // cuts the job short after 5 s; its set-aside is refused
		mu.Lock()
		defer mu.Unlock()
		if len(outcomes) != 1 || outcomes[0].Result != queuey.Requeued || outcomes[0].SettleErr == nil {
			t.Errorf("outcomes: %+v, want one Requeued with its SettleErr", outcomes)
		}
		if got := h.Worker.SettleFailures(); got != 1 {
			t.Errorf("settle failures: %d, want 1", got)
		}
		if got := h.Backend.Pending(qAlpha); got != 1 {
			t.Errorf("pending: %d, want the job back (requeued)", got)
		}
	})
}

// refusingPublishes lets allow publishes through, then refuses them.
type refusingPublishes struct {
	*memory.Backend
	allow atomic.Int32
}

func (r *refusingPublishes) Publish(ctx context.Context, msg broker.Message) error {
	if r.allow.Add(-1) < 0 {
		return errors.New("publish refused")
	}
	return r.Backend.Publish(ctx, msg)
}

func TestAJobCutShortByAStopIsNotCountedAsACrash(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{ShutdownTimeout: 5 * time.Second, PoisonAfter: 1}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "long", Block: time.Hour}}))
		h.Start()
		must(t, h.Stop()) // cuts the job short after 5 s

		second, err := queuey.NewWorker(h.Backend, app, &queuey.WorkerConfig{
			Clock: h.Clock, PoisonAfter: 1, Logger: slog.New(slog.DiscardHandler),
		})
		must(t, err)
		ran := make(chan queuey.JobContext, 1)
		must(t, queuey.Handle(second, func(_ context.Context, _ alphaJob, jc queuey.JobContext) error {
			ran <- jc
			return nil
		}))
		runUntilIdle(t, second)

		if dl := h.Backend.DeadLetters(qAlpha); len(dl) != 0 {
			t.Fatalf("dead letters: got %v, want none", dl)
		}
		select {
		case jc := <-ran:
			if jc.JobID != id || jc.Attempt != 1 {
				t.Errorf("second run: job %s attempt %d, want %s attempt 1", jc.JobID, jc.Attempt, id)
			}
		default:
			t.Fatal("the job did not run again")
		}
	})
}
