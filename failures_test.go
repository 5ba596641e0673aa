package queuey_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
	"github.com/queuey-go/queuey/internal/panicniltest"
)

// Scenario 7: rounding, the cap, and waits that need a declared queue.
func TestHoldRounding(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx, id := t.Context(), mustID(t)
		id(h.Producer.Defer(ctx, alphaJob{named("a")}, 29200*time.Millisecond))
		id(h.Producer.Defer(ctx, alphaJob{named("b")}, 30*time.Second))
		if got, want := h.Backend.HoldQueues(qAlpha), map[string]int{"test.alpha.deferred.30000": 2}; !equalMaps(got, want) {
			t.Fatalf("hold queues: got %v, want %v", got, want)
		}
		h.Clock.Add(30*time.Second - time.Millisecond)
		if got := h.Backend.Pending(qAlpha); got != 0 {
			t.Fatalf("pending one tick before the rounded delay: got %d, want 0", got)
		}
		h.Clock.Add(time.Millisecond)
		if got := h.Backend.Pending(qAlpha); got != 2 {
			t.Fatalf("pending at the rounded delay: got %d, want 2", got)
		}

		_, err := h.Producer.Defer(ctx, alphaJob{named("too late")}, 25*24*time.Hour)
		if !errors.Is(err, queuey.ErrDelayTooLong) {
			t.Errorf("Defer 25 days: got %v, want ErrDelayTooLong", err)
		}
		_, err = h.Producer.EnqueueAfter(ctx, alphaJob{named("too late")}, 25*24*time.Hour)
		if !errors.Is(err, queuey.ErrDelayTooLong) {
			t.Errorf("EnqueueAfter 25 days: got %v, want ErrDelayTooLong", err)
		}
		_, err = h.Producer.Defer(ctx, alphaJob{named("past")}, -time.Second)
		if !errors.Is(err, queuey.ErrInvalidDelay) {
			t.Errorf("Defer -1s: got %v, want ErrInvalidDelay", err)
		}
		if held := h.Backend.Held(qAlpha); held != 0 {
			t.Errorf("held after refused delays: got %d, want 0", held)
		}
	})
}

func TestRetryAndDeferralGranularitiesAreSeparate(t *testing.T) {
	set := app
	set.RetryGranularity, set.DeferGranularity = 5*time.Second, time.Second
	clocktest.Run(t, set, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx, id := t.Context(), mustID(t)
		id(h.Producer.EnqueueAfter(ctx, alphaJob{named("a")}, 1200*time.Millisecond))
		id(h.Producer.Defer(ctx, alphaJob{named("b")}, 1200*time.Millisecond))
		want := map[string]int{"test.alpha.deferred.5000": 1, "test.alpha.deferred.2000": 1}
		if got := h.Backend.HoldQueues(qAlpha); !equalMaps(got, want) {
			t.Errorf("hold queues: got %v, want %v", got, want)
		}
	})
}

func TestAnUndeclaredProducerCannotWait(t *testing.T) {
	backend := memory.New(nil)
	p, err := queuey.NewUndeclaredProducer(backend, app, nil)
	must(t, err)
	ctx := t.Context()
	if _, err := p.Defer(ctx, alphaJob{}, time.Second); !errors.Is(err, queuey.ErrUnknownQueue) || !strings.Contains(err.Error(), "not declared through this backend") {
		t.Errorf("Defer: got %v, want ErrUnknownQueue saying the queue was not declared through this backend", err)
	}
	if _, err := p.EnqueueAfter(ctx, alphaJob{}, time.Second); !errors.Is(err, queuey.ErrUnknownQueue) {
		t.Errorf("EnqueueAfter: got %v, want ErrUnknownQueue", err)
	}
	if _, err := p.Enqueue(ctx, alphaJob{}); !errors.Is(err, broker.ErrUnroutable) {
		t.Errorf("Enqueue to a queue nobody declared: got %v, want ErrUnroutable", err)
	}
	// Once something in the process declared the queue on this backend, the
	// undeclared producer can wait too.
	_, err = queuey.NewProducer(ctx, backend, app, nil)
	must(t, err)
	if _, err := p.Defer(ctx, alphaJob{}, time.Second); err != nil {
		t.Errorf("Defer after the declaration: got %v, want nil", err)
	}
}

// Scenario 8.
func TestFailures(t *testing.T) {
	for _, tc := range []struct {
		name       string
		plan       plan
		wantRuns   []shape
		wantReason string // "" means acked in the end
		wantLog    string
		wantLevel  slog.Level
	}{
		{"retried then succeeds", plan{Name: "flaky", Fail: 1}, []shape{{1, 0, 0}, {2, 0, 0}}, "", "job failed; retrying", slog.LevelWarn},
		{"retries exhaust into the dead letters", plan{Name: "doomed", Fail: 99}, []shape{{1, 0, 0}, {2, 0, 0}, {3, 0, 0}},
			"max attempts (3) exhausted after attempt 3: doomed failed on attempt 3", "job failed; giving up", slog.LevelError},
		{"fatal dead-letters at once", plan{Name: "bad", Fatal: true}, []shape{{1, 0, 0}}, "fatal error: bad cannot be done", "job failed fatally", slog.LevelError},
		{"a panic is retried and the worker survives", plan{Panic: 1}, []shape{{1, 0, 0}, {2, 0, 0}}, "", "handler panicked", slog.LevelError},
		{"a success", plan{}, []shape{{1, 0, 0}}, "", "job succeeded", slog.LevelDebug},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logRecorder{}
			clocktest.Run(t, app, &clocktest.Options{Logger: slog.New(logs)}, func(t *testing.T, h *clocktest.Harness) {
				handleAll(t, h.Worker, h.Clock)
				id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{tc.plan}))
				h.Advance(time.Minute)
				wantShapes(t, h.Log.Of(id), tc.wantRuns...)
				dead := h.Backend.DeadLetters(qAlpha)
				switch {
				case tc.wantReason == "" && len(dead) != 0:
					t.Errorf("dead letters: got %v, want none", dead)
				case tc.wantReason != "" && (len(dead) != 1 || dead[0].Reason != tc.wantReason):
					t.Errorf("dead letters: got %+v, want one with reason %q", dead, tc.wantReason)
				case tc.wantReason != "" && dead[0].Attempt != uint32(len(tc.wantRuns)):
					t.Errorf("dead letter attempt: got %d, want %d", dead[0].Attempt, len(tc.wantRuns))
				}
				if lvl, ok := logs.levelOf(tc.wantLog); !ok || lvl != tc.wantLevel {
					t.Errorf("%q logged at %v (found %t), want %v", tc.wantLog, lvl, ok, tc.wantLevel)
				}
				if h.Backend.InFlight(qAlpha) != 0 || h.Backend.Pending(qAlpha) != 0 || h.Backend.Held(qAlpha) != 0 {
					t.Errorf("left behind: in flight %d, pending %d, held %d", h.Backend.InFlight(qAlpha), h.Backend.Pending(qAlpha), h.Backend.Held(qAlpha))
				}
			})
		})
	}
}

func TestAJobTimeoutIsRetryable(t *testing.T) {
	q := queuey.Queue{Name: "p", JobTimeout: 5 * time.Second, Retry: &queuey.RetryPolicy{MaxAttempts: 2}}
	set := queuey.QueueSet{Prefix: "test", Queues: []queuey.Queue{q}}
	clocktest.Run(t, set, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j pJob, jc queuey.JobContext) error {
			if jc.Attempt == 1 {
				j.Block = time.Hour // ends when the timeout cancels ctx
			}
			return j.run(ctx, h.Clock, jc)
		}))
		id := mustID(t)(h.Producer.Enqueue(t.Context(), pJob{}))
		h.Advance(5*time.Second - time.Millisecond)
		if n := h.Log.Len(); n != 1 {
			t.Fatalf("runs before the timeout: got %d, want 1", n)
		}
		h.Advance(time.Second + time.Millisecond) // timeout, then the 1 s retry step
		runs := h.Log.Of(id)
		wantShapes(t, runs, shape{1, 0, 0}, shape{2, 0, 0})
		if got := runs[1].At.Sub(runs[0].At); got != 6*time.Second {
			t.Errorf("retry started %v after the first run, want 6s (5 s timeout + 1 s step)", got)
		}
		if acked := len(h.Backend.Acked("test.p")); acked != 2 {
			t.Errorf("acked: got %d, want 2 (the timed-out run's retry, then the success)", acked)
		}
	})
}

// A run that outlives its job timeout failed, whatever its handler then
// returns on the cancelled ctx (ARCHITECTURE.md §1: +1 attempt, the
// policy decides):
// a Fatal or a Defer built from the ctx's error is a retry too. A handler
// that returns nil finished its work: that is taken at its word.
func TestAJobTimeoutIsARetryWhateverTheHandlerThenReturns(t *testing.T) {
	q := queuey.Queue{Name: "p", JobTimeout: 5 * time.Second, Retry: &queuey.RetryPolicy{MaxAttempts: 2}}
	set := queuey.QueueSet{Prefix: "test", Queues: []queuey.Queue{q}}
	for _, c := range []struct {
		name string
		then func(ctx context.Context) error
	}{
		{"fatal", func(ctx context.Context) error { return queuey.Fatal(fmt.Errorf("upstream call: %w", ctx.Err())) }},
		{"defer", func(context.Context) error { return queuey.Defer(time.Second, "upstream slow") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			clocktest.Run(t, set, nil, func(t *testing.T, h *clocktest.Harness) {
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, _ pJob, _ queuey.JobContext) error {
					<-ctx.Done() // the timeout
					return c.then(ctx)
				}))
				id := mustID(t)(h.Producer.Enqueue(t.Context(), pJob{}))
				h.Advance(time.Minute)
				wantShapes(t, h.Log.Of(id), shape{1, 0, 0}, shape{2, 0, 0})
				dead := h.Backend.DeadLetters("test.p")
				if len(dead) != 1 || !strings.HasPrefix(dead[0].Reason, "max attempts (2) exhausted after attempt 2: job timed out after 5s") {
					t.Errorf("dead letters: %+v, want the job, its two attempts timed out", dead)
				}
			})
		})
	}
}

// An unknown kind is dead-lettered at once only when the worker is told
// not to wait for a handler (a negative UnknownKindWait); execute_test.go
// has the wait.
func TestWhatCannotRunIsDeadLetteredAndTheHandlerNeverRuns(t *testing.T) {
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{UnknownKindWait: -1}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		ctx := t.Context()
		handleAll(t, h.Worker, h.Clock)
		mustID(t)(h.Producer.Enqueue(ctx, orphanJob{}))

		wrongShape := broker.NewEnvelope("alpha_job", qAlpha, []byte(`{"name": 42}`), h.Clock.Now())
		msg, err := wrongShape.Message()
		must(t, err)
		must(t, h.Backend.Publish(ctx, msg))

		garbage := []byte("\x00not json at all")
		must(t, h.Backend.Publish(ctx, broker.Message{Queue: qAlpha, Body: garbage}))

		h.Advance(time.Second)
		if n := h.Log.Len(); n != 0 {
			t.Errorf("handler runs: got %d, want 0", n)
		}
		dead := h.Backend.DeadLetters(qAlpha)
		wantPrefixes := []string{`no handler for job type "orphan_job"`, "decode error: ", "malformed envelope: "}
		if len(dead) != len(wantPrefixes) {
			t.Fatalf("dead letters: got %d (%+v), want %d", len(dead), dead, len(wantPrefixes))
		}
		// Their publishes are made at once, in any order.
		byReason := map[string]broker.DeadLetter{}
		for _, want := range wantPrefixes {
			for _, d := range dead {
				if strings.HasPrefix(d.Reason, want) {
					byReason[want] = d
				}
			}
			if _, ok := byReason[want]; !ok {
				t.Errorf("no dead letter's reason begins %q: %+v", want, dead)
			}
		}
		malformed := byReason["malformed envelope: "]
		if string(malformed.Body) != string(garbage) {
			t.Errorf("malformed body: got %q, want it verbatim %q", malformed.Body, garbage)
		}
		if want := "malformed envelope: body is not a JSON object: "; !strings.HasPrefix(malformed.Reason, want) {
			t.Errorf("malformed reason: got %q, want it to begin %q, once", malformed.Reason, want)
		}
		if h.Backend.Pending(qAlpha) != 0 || h.Backend.InFlight(qAlpha) != 0 {
			t.Errorf("queue not drained: pending %d, in flight %d", h.Backend.Pending(qAlpha), h.Backend.InFlight(qAlpha))
		}
	})
}

func TestPerJobRetryPolicyOverridesTheQueue(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j stubbornJob, jc queuey.JobContext) error {
			return j.run(ctx, h.Clock, jc)
		}))
		id := mustID(t)(h.Producer.Enqueue(t.Context(), stubbornJob{plan{Name: "s", Fail: 99}}))
		h.Advance(time.Minute)
		runs := h.Log.Of(id)
		wantShapes(t, runs, shape{1, 0, 0}, shape{2, 0, 0}) // beta alone would allow one
		if runs[0].MaxAttempts != 2 {
			t.Errorf("MaxAttempts: got %d, want 2", runs[0].MaxAttempts)
		}
		if got := runs[1].At.Sub(runs[0].At); got != 5*time.Second {
			t.Errorf("retry came after %v, want the job's own 5s", got)
		}
	})
}

// A backoff longer than the longest hold waits the longest hold at the
// retry granularity (24.8 days less the rounding), as Backoff.Max says, and
// the job goes on to its next attempt and, once they are used up, to the
// dead letters; it is not refused over and over.
func TestABackoffLongerThanTheLongestHoldWaitsTheLongestHold(t *testing.T) {
	logs := &logRecorder{}
	clocktest.Run(t, app, &clocktest.Options{Logger: slog.New(logs)}, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j patientJob, jc queuey.JobContext) error {
			return j.run(ctx, h.Clock, jc)
		}))
		id := mustID(t)(h.Producer.Enqueue(t.Context(), patientJob{plan{Name: "p", Fail: 99}}))
		h.Advance(60 * 24 * time.Hour)
		runs := h.Log.Of(id)
		wantShapes(t, runs, shape{1, 0, 0}, shape{2, 0, 0}, shape{3, 0, 0})
		longest := broker.LongestHold(time.Second)
		if longest != 2147483*time.Second {
			t.Errorf("LongestHold(1s) = %v, want 2147483s", longest)
		}
		for i := 1; i < len(runs); i++ {
			if got := runs[i].At.Sub(runs[i-1].At); got != longest {
				t.Errorf("run %d came %v after run %d, want the longest hold, %v", i+1, got, i, longest)
			}
		}
		dead := h.Backend.DeadLetters(qAlpha)
		if len(dead) != 1 || !strings.Contains(dead[0].Reason, "max attempts (3) exhausted") {
			t.Errorf("dead letters: %+v, want the job, its attempts exhausted", dead)
		}
		if got := h.Worker.SettleFailures(); got != 0 {
			t.Errorf("settle failures: %d, want 0", got)
		}
		// The log says the capped backoff, and what the job waits.
		delay, _ := logs.attrOf("job failed; retrying", "delay")
		waits, _ := logs.attrOf("job failed; retrying", "waits")
		if delay != longest.String() || waits != longest.String() {
			t.Errorf("retry logged delay=%q waits=%q, want %v for both", delay, waits, longest)
		}
	})
}

// A zero backoff logs a zero delay and the one step the job waits.
func TestAZeroBackoffLogsTheStepItWaits(t *testing.T) {
	logs := &logRecorder{}
	clocktest.Run(t, app, &clocktest.Options{Logger: slog.New(logs)}, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j eagerJob, jc queuey.JobContext) error {
			return j.run(ctx, h.Clock, jc)
		}))
		id := mustID(t)(h.Producer.Enqueue(t.Context(), eagerJob{plan{Name: "e", Fail: 1}}))
		h.Advance(time.Minute)
		runs := h.Log.Of(id)
		wantShapes(t, runs, shape{1, 0, 0}, shape{2, 0, 0})
		if len(runs) == 2 && runs[1].At.Sub(runs[0].At) != time.Second {
			t.Errorf("retry came %v after the first run, want one step, 1s", runs[1].At.Sub(runs[0].At))
		}
		delay, _ := logs.attrOf("job failed; retrying", "delay")
		waits, _ := logs.attrOf("job failed; retrying", "waits")
		if delay != "0s" || waits != "1s" {
			t.Errorf("retry logged delay=%q waits=%q, want 0s and 1s", delay, waits)
		}
	})
}

// eagerJob lives on alpha but retries with a zero backoff.
type eagerJob struct{ plan }

func (eagerJob) Kind() string                    { return "eager" }
func (eagerJob) Queue() queuey.Queue             { return alpha }
func (eagerJob) RetryPolicy() queuey.RetryPolicy { return queuey.RetryPolicy{MaxAttempts: 2} }

// A panic's value may hold whatever the handler had: it goes to the
// worker's log with the stack, not into the dead letter's reason, which
// travels in the message's headers and onto spans.
func TestAPanicsValueStaysOutOfTheDeadLetterReason(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{plan{Name: "p", Panic: 1}})) // beta: one attempt
		h.Advance(time.Second)
		dead := h.Backend.DeadLetters(qBeta)
		want := "max attempts (1) exhausted after attempt 1: handler panicked (its value and stack are in the worker's log)"
		if len(dead) != 1 || dead[0].Reason != want {
			t.Errorf("dead letters: %+v, want one with reason %q", dead, want)
		}
	})
}

// A handler (or a middleware) that panics with nil under
// GODEBUG=panicnil=1, where recover gives nil, has panicked all the same:
// its run failed and is retried, not acked as if it had returned.
func TestAHandlerPanickingWithNilUnderPanicnilHasFailed(t *testing.T) {
	if !panicniltest.Under(t) {
		return
	}
	for _, where := range []string{"handler", "middleware"} {
		t.Run(where, func(t *testing.T) {
			opts := &clocktest.Options{Logger: slog.New(slog.DiscardHandler)}
			if where == "middleware" {
				opts.Worker.Middleware = []queuey.Middleware{func(ctx context.Context, jc queuey.JobContext, next func(context.Context) error) error {
					if jc.Attempt == 1 {
						panic(nil)
					}
					return next(ctx)
				}}
			}
			clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
				var attempts []int
				must(t, queuey.Handle(h.Worker, func(_ context.Context, _ alphaJob, jc queuey.JobContext) error {
					attempts = append(attempts, jc.Attempt)
					if where == "handler" && jc.Attempt == 1 {
						panic(nil)
					}
					return nil
				}))
				mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("nil")}))
				h.Advance(time.Minute)
				want := []int{1, 2}
				if where == "middleware" {
					want = []int{2} // the first attempt's middleware panicked before the handler
				}
				if fmt.Sprint(attempts) != fmt.Sprint(want) {
					t.Errorf("the handler ran at attempts %v, want %v (the first failed, then a retry)", attempts, want)
				}
			})
		})
	}
}

// patientJob lives on alpha but retries 30 days apart, past the longest hold.
type patientJob struct{ plan }

func (patientJob) Kind() string        { return "patient" }
func (patientJob) Queue() queuey.Queue { return alpha }
func (patientJob) RetryPolicy() queuey.RetryPolicy {
	return queuey.RetryPolicy{MaxAttempts: 3, Backoff: queuey.Backoff{Base: 30 * 24 * time.Hour}}
}

// stubbornJob lives on beta (no retries) but asks for two attempts 5 s apart.
type stubbornJob struct{ plan }

func (stubbornJob) Kind() string                    { return "stubborn" }
func (stubbornJob) Queue() queuey.Queue             { return beta }
func (stubbornJob) RetryPolicy() queuey.RetryPolicy { return queuey.FixedRetries(2, 5*time.Second) }

func equalMaps(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A middleware is part of the run: its panic, before or after the handler,
// is the run's failure, retried as a handler's panic is, and the worker
// survives it.
func TestAPanicInMiddlewareIsRetriedAndTheWorkerSurvives(t *testing.T) {
	for _, when := range []string{"before", "after"} {
		t.Run(when, func(t *testing.T) {
			panicky := func(ctx context.Context, jc queuey.JobContext, next func(context.Context) error) error {
				if when == "before" && jc.Attempt == 1 {
					panic("middleware before the handler")
				}
				err := next(ctx)
				if when == "after" && jc.Attempt == 1 {
					panic("middleware after the handler")
				}
				return err
			}
			opts := &clocktest.Options{Worker: queuey.WorkerConfig{Middleware: []queuey.Middleware{panicky}}}
			clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
				handleAll(t, h.Worker, h.Clock)
				id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("mw")}))
				h.Advance(time.Minute)
				want := []shape{{2, 0, 0}}
				if when == "after" {
					want = []shape{{1, 0, 0}, {2, 0, 0}} // the handler ran, then the middleware panicked
				}
				wantShapes(t, h.Log.Of(id), want...)
				if dead := h.Backend.DeadLetters(qAlpha); len(dead) != 0 {
					t.Errorf("dead letters: got %v, want none", dead)
				}
				if h.Backend.InFlight(qAlpha) != 0 || h.Backend.Pending(qAlpha) != 0 || h.Backend.Held(qAlpha) != 0 {
					t.Errorf("left behind: in flight %d, pending %d, held %d", h.Backend.InFlight(qAlpha), h.Backend.Pending(qAlpha), h.Backend.Held(qAlpha))
				}
			})
		})
	}
}

// The worker decodes a delivery sharing the message's properties
// (broker.DecodeMessage) and its payload through a pooled decoder: what it
// reads is still the body as it is, judged as encoding/json judges it.
func TestTheWorkerJudgesTheBodyAsItIsNotAsPublished(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx := t.Context()
		handleAll(t, h.Worker, h.Clock)

		// A body changed in place after encoding, its properties left as
		// they were: malformed, not the job it was published as.
		good := broker.NewEnvelope("alpha_job", qAlpha, []byte(`{}`), h.Clock.Now())
		msg, err := good.Message()
		must(t, err)
		copy(msg.Body[len(msg.Body)-3:], `{]}`)
		must(t, h.Backend.Publish(ctx, msg))

		// A payload encoding/json will not put in the handler's type: the
		// reason is json.Unmarshal's error, word for word.
		payload := []byte(`{"name": 42}`)
		wrongShape := broker.NewEnvelope("alpha_job", qAlpha, payload, h.Clock.Now())
		msg, err = wrongShape.Message()
		must(t, err)
		must(t, h.Backend.Publish(ctx, msg))
		wantErr := json.Unmarshal(payload, new(alphaJob))
		if wantErr == nil {
			t.Fatal("the wrong-shaped payload decodes")
		}

		h.Advance(time.Second)
		if n := h.Log.Len(); n != 0 {
			t.Errorf("handler runs: got %d, want 0", n)
		}
		dead := h.Backend.DeadLetters(qAlpha)
		if len(dead) != 2 {
			t.Fatalf("dead letters: got %d (%+v), want 2", len(dead), dead)
		}
		// Their publishes are made at once, in any order.
		slices.SortFunc(dead, func(a, b broker.DeadLetter) int { return strings.Compare(b.Reason, a.Reason) })
		if want := "malformed envelope: "; !strings.HasPrefix(dead[0].Reason, want) {
			t.Errorf("changed body: reason %q, want prefix %q", dead[0].Reason, want)
		}
		if want := "decode error: " + wantErr.Error(); dead[1].Reason != want {
			t.Errorf("wrong shape: reason %q, want %q", dead[1].Reason, want)
		}
	})
}
