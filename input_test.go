package queuey_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

func TestInvalidQueueSetsAreRefused(t *testing.T) {
	long := strings.Repeat("x", 236)
	for _, tc := range []struct {
		name string
		set  queuey.QueueSet
		want error
	}{
		{"no queues", queuey.QueueSet{}, queuey.ErrInvalidQueue},
		{"empty name", queuey.QueueSet{Queues: []queuey.Queue{{}}}, queuey.ErrInvalidQueue},
		{"duplicate name", queuey.QueueSet{Queues: []queuey.Queue{{Name: "a"}, {Name: "a"}}}, queuey.ErrInvalidQueue},
		{"another's dead-letter queue", queuey.QueueSet{Prefix: "p", Queues: []queuey.Queue{{Name: "a"}, {Name: "a.dead"}}}, queuey.ErrInvalidQueue},
		{"another's hold queue", queuey.QueueSet{Queues: []queuey.Queue{{Name: "a.deferred.5000"}, {Name: "a"}}}, queuey.ErrInvalidQueue},
		{"the ledger of cancellations", queuey.QueueSet{Prefix: "p", Queues: []queuey.Queue{{Name: "cancellations"}}}, queuey.ErrInvalidQueue},
		{"the ledger's followers", queuey.QueueSet{Prefix: "p", Queues: []queuey.Queue{{Name: "cancellations.followers"}}}, queuey.ErrInvalidQueue},
		{"no room for hold queues", queuey.QueueSet{Queues: []queuey.Queue{{Name: long}}}, queuey.ErrInvalidName},
		{"prefix pushes the name over", queuey.QueueSet{Prefix: "app", Queues: []queuey.Queue{{Name: long[:233]}}}, queuey.ErrInvalidName},
		{"reserved amq. prefix", queuey.QueueSet{Prefix: "amq", Queues: []queuey.Queue{{Name: "a"}}}, queuey.ErrInvalidName},
		{"invalid UTF-8", queuey.QueueSet{Queues: []queuey.Queue{{Name: "\xff"}}}, queuey.ErrInvalidName},
		{"max priority 256", queuey.QueueSet{Queues: []queuey.Queue{{Name: "a", MaxPriority: 256}}}, queuey.ErrInvalidQueue},
		{"max priority -2", queuey.QueueSet{Queues: []queuey.Queue{{Name: "a", MaxPriority: -2}}}, queuey.ErrInvalidQueue},
		{"negative prefetch", queuey.QueueSet{Queues: []queuey.Queue{{Name: "a", Prefetch: -1}}}, queuey.ErrInvalidQueue},
		{"negative timeout", queuey.QueueSet{Queues: []queuey.Queue{{Name: "a", JobTimeout: -time.Second}}}, queuey.ErrInvalidQueue},
		{"negative granularity", queuey.QueueSet{RetryGranularity: -1, Queues: []queuey.Queue{{Name: "a"}}}, queuey.ErrInvalidQueue},
		{"negative attempts", queuey.QueueSet{Queues: []queuey.Queue{{Name: "a", Retry: &queuey.RetryPolicy{MaxAttempts: -1}}}}, queuey.ErrInvalidQueue},
		{"a transient quorum queue", queuey.QueueSet{Type: queuey.Quorum, Queues: []queuey.Queue{{Name: "a", Transient: true}}}, queuey.ErrInvalidQueue},
		{"a queue type that is none", queuey.QueueSet{Queues: []queuey.Queue{{Name: "a", Type: 7}}}, queuey.ErrInvalidQueue},
		{"a quorum name too long for its delay key", queuey.QueueSet{Queues: []queuey.Queue{{Name: long[:206], Type: queuey.Quorum}}}, queuey.ErrInvalidName},
		{"a quorum name with a wildcard word", queuey.QueueSet{Type: queuey.Quorum, Queues: []queuey.Queue{{Name: "a.#"}}}, queuey.ErrInvalidName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := memory.New(nil)
			_, err := queuey.NewProducer(t.Context(), b, tc.set, nil)
			if !errors.Is(err, tc.want) {
				t.Errorf("NewProducer: got %v, want %v", err, tc.want)
			}
			_, err = queuey.NewWorker(b, tc.set, nil)
			if !errors.Is(err, tc.want) {
				t.Errorf("NewWorker: got %v, want %v", err, tc.want)
			}
			if got := b.Queues(); len(got) != 0 {
				t.Errorf("queues declared despite the error: %v", got)
			}
		})
	}
}

func TestAChangedMaxPriorityIsAClearError(t *testing.T) {
	b := memory.New(nil)
	_, err := queuey.NewProducer(t.Context(), b, app, nil)
	must(t, err)
	changed := queuey.QueueSet{Prefix: "test", Queues: []queuey.Queue{{Name: "alpha", MaxPriority: 5}}}
	_, err = queuey.NewProducer(t.Context(), b, changed, nil)
	if !errors.Is(err, broker.ErrPreconditionFailed) || !strings.Contains(err.Error(), `"test.alpha"`) {
		t.Errorf("redeclare with max priority 5: got %v, want ErrPreconditionFailed naming test.alpha", err)
	}
}

type unencodable struct{ C chan int }

func (unencodable) Kind() string        { return "unencodable" }
func (unencodable) Queue() queuey.Queue { return alpha }

type emptyKind struct{}

func (emptyKind) Kind() string        { return "" }
func (emptyKind) Queue() queuey.Queue { return alpha }

type elsewhere struct{}

func (elsewhere) Kind() string        { return "elsewhere" }
func (elsewhere) Queue() queuey.Queue { return queuey.Queue{Name: "not-in-the-set"} }

func TestBadJobsAreRefusedAndNothingIsPublished(t *testing.T) {
	b := memory.New(nil)
	p, err := queuey.NewProducer(t.Context(), b, app, &queuey.ProducerConfig{MaxMessageBytes: 1024})
	must(t, err)
	var nilJob *alphaJob
	for _, tc := range []struct {
		name string
		job  queuey.Job
		want error
	}{
		{"nil job", nil, queuey.ErrInvalidJob},
		{"nil pointer job", nilJob, queuey.ErrInvalidJob},
		{"empty kind", emptyKind{}, queuey.ErrInvalidJob},
		{"unencodable payload", unencodable{C: make(chan int)}, queuey.ErrInvalidJob},
		{"queue not in the set", elsewhere{}, queuey.ErrUnknownQueue},
		{"oversize payload", alphaJob{plan{Name: strings.Repeat("x", 2000)}}, queuey.ErrMessageTooLarge},
		{"payload under the limit, envelope over it", alphaJob{plan{Name: strings.Repeat("x", 950)}}, queuey.ErrMessageTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			for call, f := range map[string]func() (string, error){
				"Enqueue":      func() (string, error) { return p.Enqueue(ctx, tc.job) },
				"EnqueueAfter": func() (string, error) { return p.EnqueueAfter(ctx, tc.job, time.Second) },
				"Defer":        func() (string, error) { return p.Defer(ctx, tc.job, time.Second) },
			} {
				id, err := f()
				if !errors.Is(err, tc.want) || id != "" {
					t.Errorf("%s: got (%q, %v), want %v", call, id, err, tc.want)
				}
				if tc.want == queuey.ErrUnknownQueue && (!strings.Contains(err.Error(), "not in the queue set") || strings.Contains(err.Error(), "declared")) {
					t.Errorf("%s: %q says something else than that the queue is not in the set", call, err)
				}
			}
		})
	}
	if b.Pending("test.alpha")+b.Held("test.alpha") != 0 {
		t.Errorf("something was published")
	}
}

func TestHandlerRegistrationMistakes(t *testing.T) {
	w, err := queuey.NewWorker(memory.New(nil), app, nil)
	must(t, err)
	ok := func(context.Context, alphaJob, queuey.JobContext) error { return nil }
	must(t, queuey.Handle(w, ok))
	if err := queuey.Handle(w, ok); !errors.Is(err, queuey.ErrDuplicateHandler) || !strings.Contains(err.Error(), "alpha_job") {
		t.Errorf("second handler: got %v, want ErrDuplicateHandler naming alpha_job", err)
	}
	if err := queuey.Handle[alphaJob](w, nil); !errors.Is(err, queuey.ErrInvalidJob) {
		t.Errorf("nil handler: got %v, want ErrInvalidJob", err)
	}
	if err := queuey.Handle(w, func(context.Context, elsewhere, queuey.JobContext) error { return nil }); !errors.Is(err, queuey.ErrUnknownQueue) {
		t.Errorf("handler for a job of another queue set: got %v, want ErrUnknownQueue", err)
	}
	if err := queuey.Handle(w, func(context.Context, *alphaJob, queuey.JobContext) error { return nil }); !errors.Is(err, queuey.ErrInvalidJob) {
		t.Errorf("pointer job type whose methods need a value: got %v, want ErrInvalidJob", err)
	}
	if _, err := queuey.NewWorker(memory.New(nil), app, &queuey.WorkerConfig{Queues: []string{"nope"}}); !errors.Is(err, queuey.ErrUnknownQueue) {
		t.Errorf("worker queue not in the set: got %v, want ErrUnknownQueue", err)
	}
}

func TestAWorkerWithoutHandlersDoesNotStart(t *testing.T) {
	w, err := queuey.NewWorker(memory.New(nil), app, nil)
	must(t, err)
	if err := w.Run(t.Context()); !errors.Is(err, queuey.ErrNoHandlers) {
		t.Errorf("Run: got %v, want ErrNoHandlers", err)
	}
}

func TestCallsAfterShutdown(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		h.Start()
		if err := queuey.Handle(h.Worker, func(context.Context, orphanJob, queuey.JobContext) error { return nil }); !errors.Is(err, queuey.ErrWorkerStarted) {
			t.Errorf("Handle while running: got %v, want ErrWorkerStarted", err)
		}
		must(t, h.Stop())
		if err := h.Worker.Run(t.Context()); !errors.Is(err, queuey.ErrWorkerStopped) {
			t.Errorf("Run again: got %v, want ErrWorkerStopped", err)
		}
		must(t, h.Backend.Close())
		if _, err := h.Producer.Enqueue(t.Context(), alphaJob{}); !errors.Is(err, queuey.ErrClosed) {
			t.Errorf("Enqueue after Close: got %v, want ErrClosed", err)
		}
		if _, err := h.Producer.Defer(t.Context(), alphaJob{}, time.Second); !errors.Is(err, queuey.ErrClosed) {
			t.Errorf("Defer after Close: got %v, want ErrClosed", err)
		}
	})
}

func TestADeferralNoHoldCanGiveIsDeadLettered(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{deferring(1, 30*24*time.Hour)}))
		h.Advance(time.Second)
		dead := h.Backend.DeadLetters(qBeta)
		if len(dead) != 1 || !strings.HasPrefix(dead[0].Reason, "invalid deferral: ") {
			t.Errorf("dead letters: got %+v, want one with an invalid deferral reason", dead)
		}
	})
}

// publishOnly hides the memory backend's PublishBatch: a producer then
// enqueues a batch with concurrent Publish calls.
type publishOnly struct{ broker.Backend }

// forgetful settles every message of a batch but the second.
type forgetful struct{ *memory.Backend }

func (f forgetful) PublishBatch(ctx context.Context, msgs []broker.Message, settled func(int, error)) {
	f.Backend.PublishBatch(ctx, msgs, func(i int, err error) {
		if i != 1 {
			settled(i, err)
		}
	})
}

func TestEnqueueBatchReportsEachJob(t *testing.T) {
	for _, c := range []struct {
		name string
		wrap func(*memory.Backend) broker.Backend
	}{
		{"batch publisher", func(b *memory.Backend) broker.Backend { return b }},
		{"concurrent publishes", func(b *memory.Backend) broker.Backend { return publishOnly{b} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := memory.New(nil)
			p, err := queuey.NewProducer(t.Context(), c.wrap(b), app, nil)
			must(t, err)
			jobs := []queuey.Job{alphaJob{named("a")}, nil, betaJob{named("b")}, elsewhere{}, gammaJob{named("c")}}
			ids, err := p.EnqueueBatch(t.Context(), jobs)
			if !errors.Is(err, queuey.ErrInvalidJob) || !errors.Is(err, queuey.ErrUnknownQueue) ||
				!strings.Contains(err.Error(), "job 1:") || !strings.Contains(err.Error(), "job 3:") {
				t.Errorf("err: got %v, want the failures of jobs 1 and 3", err)
			}
			for i, id := range ids {
				if failed := i == 1 || i == 3; (id == "") != failed {
					t.Errorf("ids[%d] = %q", i, id)
				}
			}
			if got := b.Pending(qAlpha) + b.Pending(qBeta) + b.Pending(qGamma); got != 3 {
				t.Errorf("pending: got %d, want 3", got)
			}
			if ids, err := p.EnqueueBatch(t.Context(), nil); err != nil || len(ids) != 0 {
				t.Errorf("empty batch: got %v, %v", ids, err)
			}
		})
	}
}

// A backend that does not report a publish of a batch makes that job fail
// with an error that says so, rather than leave its id empty and no error.
func TestAnUnreportedPublishOfABatchIsAnError(t *testing.T) {
	p, err := queuey.NewProducer(t.Context(), forgetful{memory.New(nil)}, app, nil)
	must(t, err)
	ids, err := p.EnqueueBatch(t.Context(), []queuey.Job{alphaJob{named("a")}, alphaJob{named("b")}, alphaJob{named("c")}})
	if err == nil || !strings.Contains(err.Error(), "job 1:") || !strings.Contains(err.Error(), "did not report") {
		t.Errorf("err: got %v, want job 1's unreported publish", err)
	}
	if ids[0] == "" || ids[1] != "" || ids[2] == "" {
		t.Errorf("ids: got %q, want jobs 0 and 2 only", ids)
	}
}

// A worker dead-letters a body over its MaxMessageBytes verbatim, without
// reading it as an envelope or running a handler, and goes on with the
// next job.
func TestAWorkerDoesNotReadABodyOverItsLimit(t *testing.T) {
	var mu sync.Mutex
	var causes []queuey.DeadLetterCause
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{MaxMessageBytes: 1024, OnDeadLetter: func(ctx context.Context, dl queuey.DeadLetterEvent) {
		mu.Lock()
		defer mu.Unlock()
		causes = append(causes, dl.Cause)
	}}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		big := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{plan{Name: strings.Repeat("x", 2000)}}))
		raw := bytes.Repeat([]byte("y"), 4096)
		must(t, h.Backend.Publish(t.Context(), broker.Message{ID: "raw", Queue: qAlpha, Body: raw}))
		fine := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("fine")}))
		h.Advance(time.Second)
		if n := len(h.Log.Of(big)); n != 0 {
			t.Errorf("the oversized job ran %d times", n)
		}
		if n := len(h.Log.Of(fine)); n != 1 {
			t.Errorf("the next job ran %d times, want once", n)
		}
		dead := h.Backend.DeadLetters(qAlpha)
		if len(dead) != 2 {
			t.Fatalf("dead letters: %d, want 2", len(dead))
		}
		for _, d := range dead {
			if !strings.HasPrefix(d.Reason, "too large: ") || len(d.Body) <= 1024 {
				t.Errorf("dead letter %s: reason %q, %d bytes; want too large, verbatim", d.ID, d.Reason, len(d.Body))
			}
		}
		if i := slices.IndexFunc(dead, func(d broker.DeadLetter) bool { return d.ID == "raw" }); i < 0 || !bytes.Equal(dead[i].Body, raw) {
			t.Errorf("the raw body was not dead-lettered verbatim") // the two publishes are made at once, in any order
		}
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]queuey.DeadLetterCause{queuey.CauseTooLarge, queuey.CauseTooLarge}, causes); diff != "" {
			t.Errorf("causes (-want +got):\n%s", diff)
		}
	})
}

// selfConfigured is a job whose Queue() gives settings of its own for
// alpha, which the QueueSet gives otherwise.
type selfConfigured struct{ plan }

func (selfConfigured) Kind() string { return "self_configured" }
func (selfConfigured) Queue() queuey.Queue {
	return queuey.Queue{Name: "alpha", Prefetch: 2, MaxPriority: 10}
}

// nameOnly names alpha and nothing else: a reference to the set's queue.
type nameOnly struct{ plan }

func (nameOnly) Kind() string        { return "name_only" }
func (nameOnly) Queue() queuey.Queue { return queuey.Queue{Name: "alpha"} }

// A job's Queue() that says other settings than the QueueSet's queue of
// that name is refused, naming the field, rather than half read: only its
// name was used, and its prefetch and priorities silently ignored.
func TestAJobQueueThatDisagreesWithTheSetIsRefused(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		_, err := h.Producer.Enqueue(t.Context(), selfConfigured{})
		if !errors.Is(err, queuey.ErrInvalidQueue) || !strings.Contains(err.Error(), "Prefetch") {
			t.Errorf("Enqueue: %v, want ErrInvalidQueue naming Prefetch", err)
		}
		err = queuey.Handle(h.Worker, func(context.Context, selfConfigured, queuey.JobContext) error { return nil })
		if !errors.Is(err, queuey.ErrInvalidQueue) || !strings.Contains(err.Error(), "Prefetch") {
			t.Errorf("Handle: %v, want ErrInvalidQueue naming Prefetch", err)
		}
		// The same Queue value as the set's, or its name alone, is fine.
		must(t, queuey.Handle(h.Worker, func(context.Context, nameOnly, queuey.JobContext) error { return nil }))
		mustID(t)(h.Producer.Enqueue(t.Context(), nameOnly{}))
		mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{}))
	})
}

// A deferral of zero or less, as a Retry-After date already past gives
// when the partner's clock is ahead, runs the job again after one step
// of DeferGranularity, its attempt unspent: it is not a bad deferral.
func TestADeferralOfZeroOrLessRunsAgainAfterOneStep(t *testing.T) {
	for _, d := range []time.Duration{-90 * time.Second, -time.Nanosecond, 0} {
		t.Run(d.String(), func(t *testing.T) {
			clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error {
					if jc.Deferrals == 0 {
						return queuey.Defer(d, "retry-after in the past")
					}
					return nil
				}))
				id := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("late")}))
				h.Advance(5 * time.Second)
				runs := h.Log.Of(id)
				if len(runs) != 2 {
					t.Fatalf("runs: got %d, want 2 (deferred, then again); dead letters: %+v", len(runs), h.Backend.DeadLetters(qBeta))
				}
				if gap := runs[1].At.Sub(runs[0].At); gap != time.Second {
					t.Errorf("ran again %v after the deferral, want one step of DeferGranularity (1s)", gap)
				}
				if runs[1].Attempt != 1 {
					t.Errorf("second run at attempt %d, want 1 (a deferral spends none)", runs[1].Attempt)
				}
			})
		})
	}
}
