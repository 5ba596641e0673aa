package queuey_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/clocktest"
	"github.com/queuey-go/queuey/internal/panicniltest"
)

// hookLog records what the hooks were told.
type hookLog struct {
	mu         sync.Mutex
	publishes  []queuey.PublishInfo
	deliveries []queuey.DeliveryInfo
	outcomes   []queuey.Outcome
}

func (l *hookLog) hooks() *queuey.Hooks {
	return &queuey.Hooks{
		Publish: func(ctx context.Context, p *queuey.PublishInfo) func(error) {
			p.Headers["traceparent"] = "from-" + string(p.Op)
			l.mu.Lock()
			l.publishes = append(l.publishes, *p)
			l.mu.Unlock()
			return nil
		},
		Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
			l.mu.Lock()
			l.deliveries = append(l.deliveries, *d)
			l.mu.Unlock()
			return ctx, func(o queuey.Outcome) {
				l.mu.Lock()
				l.outcomes = append(l.outcomes, o)
				l.mu.Unlock()
			}
		},
	}
}

// wantResults checks that the outcome funcs were told want, in order:
// each delivery's once.
func (l *hookLog) wantResults(t *testing.T, want ...queuey.Result) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var got []queuey.Result
	for _, o := range l.outcomes {
		got = append(got, o.Result)
	}
	if !slices.Equal(got, want) {
		t.Errorf("outcomes told: %v, want %v", got, want)
	}
}

func TestHooksFollowAJobThroughADeferralAndARetry(t *testing.T) {
	hl := &hookLog{}
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: hl.hooks()}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		p, err := queuey.NewProducer(t.Context(), h.Backend, app, &queuey.ProducerConfig{Clock: h.Clock, Hooks: hl.hooks()})
		must(t, err)
		job := deferring(1, 30*time.Second)
		job.Fail = 1
		mustID(t)(p.Enqueue(t.Context(), alphaJob{job}))
		h.Advance(time.Minute)

		hl.mu.Lock()
		defer hl.mu.Unlock()
		type pub struct {
			Op                           queuey.PublishOp
			Attempt, Deferrals, Priority int
			Delay                        time.Duration
		}
		var pubs []pub
		for _, p := range hl.publishes {
			pubs = append(pubs, pub{p.Op, p.Attempt, p.Deferrals, p.Priority, p.Delay})
		}
		wantPubs := []pub{
			{queuey.OpEnqueue, 1, 0, 0, 0},
			{queuey.OpDeferral, 1, 1, 10, 30 * time.Second},
			{queuey.OpRetry, 2, 1, 0, time.Second},
		}
		if diff := cmp.Diff(wantPubs, pubs); diff != "" {
			t.Errorf("publishes (-want +got):\n%s", diff)
		}
		wantOut := []queuey.Outcome{
			{Result: queuey.Deferred, Delay: 30 * time.Second, Reason: "rate limited", Ran: true},
			{Result: queuey.Retried, Delay: time.Second, NextAttempt: 2, Ran: true},
			{Result: queuey.Succeeded, Ran: true},
		}
		if diff := cmp.Diff(wantOut, hl.outcomes, cmpopts.IgnoreFields(queuey.Outcome{}, "Err", "HandlerDuration")); diff != "" {
			t.Errorf("outcomes (-want +got):\n%s", diff)
		}
		checkDeliveriesOnTime(t, hl.deliveries, wantPubs[0].Op, wantPubs[1].Op, wantPubs[2].Op)
	})
}

// checkDeliveriesOnTime checks the Deliver hook's three deliveries of
// TestHooksFollowAJobThroughADeferralAndARetry: each started when due, each
// carrying the trace context its publish (of op ops[i]) set, the second at
// the deferral's priority.
func checkDeliveriesOnTime(t *testing.T, deliveries []queuey.DeliveryInfo, ops ...queuey.PublishOp) {
	t.Helper()
	if len(deliveries) != 3 {
		t.Fatalf("deliveries: got %d, want 3", len(deliveries))
	}
	for i, d := range deliveries {
		if late := d.Started.Sub(d.DueAt); d.DueAt.IsZero() || late != 0 {
			t.Errorf("delivery %d started %v after it was due (due %v), want exactly on time", i, late, d.DueAt)
		}
		if want := "from-" + string(ops[i]); d.Headers["traceparent"] != want {
			t.Errorf("delivery %d carried traceparent %q, want %q", i, d.Headers["traceparent"], want)
		}
	}
	if d := deliveries[1]; d.Job.Deferrals != 1 || d.Job.Priority != 10 {
		t.Errorf("second delivery: %+v", d.Job)
	}
}

// A delivery's due time: its enqueue for a plain enqueue (no stamp on the
// wire), the end of its wait for a hold, the replay for a replayed dead
// letter, and unknown for a hold whose publisher did not stamp one (a Rust
// producer's enqueue_after).
func TestADeliveryIsDueAtItsEnqueueItsReleaseOrItsReplay(t *testing.T) {
	hl := &hookLog{}
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: hl.hooks()}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		ctx := t.Context()
		start := h.Clock.Now()
		mustID(t)(h.Producer.Enqueue(ctx, alphaJob{named("plain")}))
		h.Advance(time.Second)
		mustID(t)(h.Producer.EnqueueAfter(ctx, betaJob{named("later")}, 5*time.Second))
		h.Advance(10 * time.Second)

		// What a Rust producer's enqueue_after publishes: an envelope in a
		// hold queue, without a due time.
		env := broker.NewEnvelope(gammaJob{}.Kind(), "test.gamma", json.RawMessage(`{"name":"rust"}`), h.Clock.Now())
		msg, err := env.Message()
		must(t, err)
		must(t, h.Backend.Hold(ctx, msg, 2*time.Second))
		h.Advance(5 * time.Second)

		fatal := mustID(t)(h.Producer.Enqueue(ctx, alphaJob{plan{Name: "doomed", Fatal: true}}))
		h.Advance(time.Second)
		dl, err := queuey.NewDeadLetters(ctx, h.Backend, app, &queuey.ProducerConfig{Clock: h.Clock, Hooks: hl.hooks()})
		must(t, err)
		h.Advance(time.Minute)
		replayedAt := h.Clock.Now()
		if n, err := dl.Replay(ctx, "alpha", queuey.ReplayOptions{Select: queuey.ByID(fatal)}); n != 1 || err != nil {
			t.Fatalf("replay: %d, %v", n, err)
		}
		h.Advance(time.Second)

		hl.mu.Lock()
		defer hl.mu.Unlock()
		due := map[string]time.Time{}
		for _, d := range hl.deliveries {
			due[d.Job.Kind+"/"+strconv.Itoa(len(due))] = d.DueAt
		}
		want := map[string]time.Time{
			"alpha_job/0": start.Truncate(time.Millisecond),                       // enqueued
			"beta_job/1":  start.Add(6 * time.Second).Truncate(time.Millisecond),  // released
			"gamma_job/2": {},                                                     // unknown
			"alpha_job/3": start.Add(16 * time.Second).Truncate(time.Millisecond), // enqueued, then dead-lettered
			"alpha_job/4": replayedAt.Truncate(time.Millisecond),                  // replayed
		}
		if diff := cmp.Diff(want, due); diff != "" {
			t.Errorf("due times (-want +got):\n%s", diff)
		}
	})
}

// The copy a worker publishes in place of a redelivered job (PoisonAfter)
// is due when the original was: at the end of its wait, not at its enqueue.
// When that is unknown (a hold a Rust producer published, without a due
// time), the copy is due when it is made, not at its enqueue a wait ago.
func TestACountedCopyIsDueWhenTheOriginalWas(t *testing.T) {
	for _, stamped := range []bool{true, false} {
		t.Run(fmt.Sprintf("stamped=%t", stamped), func(t *testing.T) {
			hl := &hookLog{}
			opts := &clocktest.Options{Worker: queuey.WorkerConfig{ShutdownTimeout: time.Second}}
			clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
				handleAll(t, h.Worker, h.Clock)
				start := h.Clock.Now()
				slow := betaJob{plan{Name: "slow", Block: 10 * time.Hour}}
				if stamped {
					mustID(t)(h.Producer.EnqueueAfter(t.Context(), slow, time.Hour))
				} else {
					payload, err := json.Marshal(slow)
					must(t, err)
					msg, err := broker.NewEnvelope(slow.Kind(), "test.beta", payload, start).Message()
					must(t, err)
					must(t, h.Backend.Hold(t.Context(), msg, time.Hour))
				}
				h.Advance(time.Hour + time.Second) // released, and running
				must(t, h.Stop())                  // cut short: the job goes back, to be redelivered

				second, err := queuey.NewWorker(h.Backend, app, &queuey.WorkerConfig{
					Clock: h.Clock, Hooks: hl.hooks(), PoisonAfter: 3, Logger: slog.New(slog.DiscardHandler),
				})
				must(t, err)
				must(t, queuey.Handle(second, func(context.Context, betaJob, queuey.JobContext) error { return nil }))
				copiedAt := h.Clock.Now()
				runUntilIdle(t, second)

				hl.mu.Lock()
				defer hl.mu.Unlock()
				if len(hl.deliveries) != 2 {
					t.Fatalf("deliveries: got %d, want the redelivered original and its copy", len(hl.deliveries))
				}
				want := []time.Time{start.Add(time.Hour).Truncate(time.Millisecond), start.Add(time.Hour).Truncate(time.Millisecond)}
				if !stamped {
					want = []time.Time{{}, copiedAt.Truncate(time.Millisecond)} // unknown, then when copied
				}
				for i, d := range hl.deliveries {
					if !d.DueAt.Equal(want[i]) {
						t.Errorf("delivery %d (redelivered %t): due %v, want %v", i, d.Job.Redelivered, d.DueAt, want[i])
					}
				}
			})
		})
	}
}

// A dead-letter callback that panics is logged; the dead letter goes ahead.
func TestAPanickingOnDeadLetterDoesNotStopTheDeadLetter(t *testing.T) {
	logs := &logRecorder{}
	opts := &clocktest.Options{Logger: slog.New(logs), Worker: queuey.WorkerConfig{
		OnDeadLetter: func(context.Context, queuey.DeadLetterEvent) { panic("alerting is down") },
	}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "bad", Fatal: true}}))
		h.Advance(time.Minute)
		if dead := h.Backend.DeadLetters(qAlpha); len(dead) != 1 {
			t.Errorf("dead letters: got %d, want 1", len(dead))
		}
		if lvl, ok := logs.levelOf("hook panicked; going on without it"); !ok || lvl != slog.LevelError {
			t.Errorf("the callback's panic logged at %v (found %t), want an error", lvl, ok)
		}
	})
}

// A hook that panics is a bug in instrumentation: the worker logs it and
// goes on without the hook, rather than dying with every delivery in
// flight. The job's life is the same as without hooks.
func TestAPanickingHookDoesNotTakeTheWorkerDown(t *testing.T) {
	for _, which := range []string{"Deliver", "finish", "Publish", "publish result"} {
		t.Run(which, func(t *testing.T) {
			hooks := &queuey.Hooks{
				Publish: func(_ context.Context, p *queuey.PublishInfo) func(error) {
					if which == "Publish" && p.Op == queuey.OpRetry {
						panic("publish hook")
					}
					return func(error) {
						if which == "publish result" && p.Op == queuey.OpRetry {
							panic("publish result hook")
						}
					}
				},
				Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
					if which == "Deliver" {
						panic("deliver hook")
					}
					return ctx, func(queuey.Outcome) {
						if which == "finish" {
							panic("finish hook")
						}
					}
				},
			}
			logs := &logRecorder{}
			opts := &clocktest.Options{Logger: slog.New(logs), Worker: queuey.WorkerConfig{Hooks: hooks}}
			clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
				handleAll(t, h.Worker, h.Clock)
				id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "flaky", Fail: 1}}))
				h.Advance(time.Minute)
				wantShapes(t, h.Log.Of(id), shape{1, 0, 0}, shape{2, 0, 0})
				if dead := h.Backend.DeadLetters(qAlpha); len(dead) != 0 {
					t.Errorf("dead letters: got %v, want none", dead)
				}
				if h.Backend.InFlight(qAlpha) != 0 || h.Backend.Pending(qAlpha) != 0 || h.Backend.Held(qAlpha) != 0 {
					t.Errorf("left behind: in flight %d, pending %d, held %d", h.Backend.InFlight(qAlpha), h.Backend.Pending(qAlpha), h.Backend.Held(qAlpha))
				}
				if lvl, ok := logs.levelOf("hook panicked; going on without it"); !ok || lvl != slog.LevelError {
					t.Errorf("hook panic logged at %v (found %t), want an error", lvl, ok)
				}
			})
		})
	}
}

// Under GODEBUG=panicnil=1, which a program may run with, a hook's
// panic(nil) is recovered as nil. The worker must still run the job under
// its own ctx and go on (a job run under a nil ctx took the process down
// as its retry was decided). The test runs itself again with the setting.
func TestADeliverHookPanickingWithNilUnderPanicnilLeavesTheJobItsCtx(t *testing.T) {
	if !panicniltest.Under(t) {
		return
	}
	hooks := &queuey.Hooks{Deliver: func(context.Context, *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		panic(nil)
	}}
	opts := &clocktest.Options{Logger: slog.New(slog.DiscardHandler), Worker: queuey.WorkerConfig{Hooks: hooks}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: "flaky", Fail: 1}}))
		h.Advance(time.Minute)
		wantShapes(t, h.Log.Of(id), shape{1, 0, 0}, shape{2, 0, 0})
	})
}

// Package queuey names a queue as the QueueSet does, everywhere: in what a
// handler sees and in what the hooks are told, where the broker's name
// stands beside it as BrokerQueue.
func TestAQueueIsNamedAsItsSetNamesIt(t *testing.T) {
	var mu sync.Mutex
	var names []string
	hooks := &queuey.Hooks{
		Publish: func(ctx context.Context, p *queuey.PublishInfo) func(error) {
			mu.Lock()
			defer mu.Unlock()
			names = append(names, "publish "+p.Queue+" "+p.BrokerQueue)
			return nil
		},
		Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
			mu.Lock()
			defer mu.Unlock()
			names = append(names, "deliver "+d.Queue+" "+d.BrokerQueue)
			return ctx, nil
		},
	}
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: hooks}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error {
			mu.Lock()
			defer mu.Unlock()
			names = append(names, "handler "+jc.Queue+" "+jc.BrokerQueue)
			return nil
		}))
		p, err := queuey.NewProducer(t.Context(), h.Backend, app, &queuey.ProducerConfig{Clock: h.Clock, Hooks: hooks})
		must(t, err)
		mustID(t)(p.Enqueue(t.Context(), betaJob{named("b")}))
		h.Advance(time.Second)
	})
	want := []string{"publish beta test.beta", "deliver beta test.beta", "handler beta test.beta"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("queue names (-want +got):\n%s", diff)
	}
	if got := app.BrokerName("beta"); got != "test.beta" {
		t.Errorf("BrokerName(beta) = %q, want test.beta", got)
	}
}
