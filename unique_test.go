package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

// duplicateOf checks that err refuses a unique job because the job id
// holds key, and returns err's live job id.
func duplicateOf(t *testing.T, err error, key, id string) {
	t.Helper()
	dup, ok := errors.AsType[*queuey.DuplicateError](err)
	if !ok || !errors.Is(err, queuey.ErrDuplicate) {
		t.Fatalf("got %v, want a *DuplicateError", err)
	}
	if dup.Key != key || dup.JobID != id || !strings.Contains(err.Error(), id) {
		t.Errorf("got %v (key %q, job %q), want key %q held by %s", err, dup.Key, dup.JobID, key, id)
	}
}

// Sixteen producers race 1,000 enqueues over ten keys while no worker
// runs: ten are enqueued, each of the others is refused naming the live
// job of its key, and exactly ten jobs run.
func TestUniqueJobsRacingProducersEnqueueOnePerKey(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, func(context.Context, betaJob, queuey.JobContext) error { return nil }))
		const producers, enqueues, keys = 16, 1000, 10
		var mu sync.Mutex
		enqueued := map[string]string{}  // key → job id
		refused := map[string][]string{} // key → live job ids named
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() {
				for i := p; i < enqueues; i += producers {
					key := fmt.Sprintf("key-%d", i%keys)
					id, err := h.Producer.Enqueue(t.Context(), betaJob{named(key)}, queuey.UniqueKey(key, time.Hour))
					mu.Lock()
					if dup, ok := errors.AsType[*queuey.DuplicateError](err); ok {
						refused[key] = append(refused[key], dup.JobID)
					} else if err != nil {
						t.Errorf("enqueue %d: %v", i, err)
					} else if first, twice := enqueued[key]; twice {
						t.Errorf("%s enqueued twice: %s and %s", key, first, id)
					} else {
						enqueued[key] = id
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		h.Advance(time.Second)
		if got := h.Log.Len(); got != keys || len(enqueued) != keys {
			t.Fatalf("%d jobs ran, %d enqueued, want %d", got, len(enqueued), keys)
		}
		for key, ids := range refused {
			for _, id := range ids {
				if id != enqueued[key] {
					t.Errorf("a refusal of %s named %s, not its live job %s", key, id, enqueued[key])
				}
			}
		}
		// Each succeeded, which let its key go.
		for key := range enqueued {
			_, err := h.Producer.Enqueue(t.Context(), betaJob{named(key)}, queuey.UniqueKey(key, time.Hour))
			must(t, err)
		}
	})
}

// A unique job holds its key while it is ready, while it waits for a
// retry and for a deferral, and lets it go once it succeeds.
func TestUniqueKeyIsHeldUntilTheJobSucceeds(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx := t.Context()
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j alphaJob, jc queuey.JobContext) error { return j.run(ctx, h.Clock, jc) }))
		p := plan{Name: "sync", Fail: 1, Defers: 1, DeferFor: 30 * time.Second}
		id, err := h.Producer.Enqueue(ctx, alphaJob{p}, queuey.Unique(time.Hour))
		must(t, err)
		key := "alpha_job:"
		refuse := func(when string) {
			t.Helper()
			_, err := h.Producer.Enqueue(ctx, alphaJob{p}, queuey.Unique(time.Hour))
			dup, _ := errors.AsType[*queuey.DuplicateError](err)
			if dup == nil || dup.JobID != id || !strings.HasPrefix(dup.Key, key) {
				t.Fatalf("%s: got %v, want a refusal naming %s", when, err, id)
			}
		}
		refuse("ready")
		h.Advance(0) // first run: deferred 30 s
		refuse("deferred")
		h.Advance(30 * time.Second) // second run fails: a retry in 1 s
		if h.Backend.Held(qAlpha) != 1 {
			t.Fatalf("held %d, want the retry", h.Backend.Held(qAlpha))
		}
		refuse("waiting for its retry")
		h.Advance(time.Second) // succeeds
		if runs := len(h.Log.Of(id)); runs != 3 {
			t.Fatalf("ran %d times, want 3", runs)
		}
		_, err = h.Producer.Enqueue(ctx, alphaJob{p}, queuey.Unique(time.Hour))
		must(t, err)
		// Another content is another key.
		_, err = h.Producer.Enqueue(ctx, alphaJob{named("other")}, queuey.Unique(time.Hour))
		must(t, err)
	})
}

// A dead letter never blocks a new job; its replay takes the key again,
// or is refused naming the newer job that holds it, and stays.
func TestUniqueKeyIsLetGoByADeadLetterAndTakenByItsReplay(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx := t.Context()
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error { return j.run(ctx, h.Clock, jc) }))
		unique := queuey.UniqueKey("report-7", time.Hour)
		dead, err := h.Producer.Enqueue(ctx, betaJob{plan{Name: "broken", Fatal: true}}, unique)
		must(t, err)
		h.Advance(0)
		if n := len(h.Backend.DeadLetters(qBeta)); n != 1 {
			t.Fatalf("%d dead letters, want 1", n)
		}
		newer, err := h.Producer.EnqueueAfter(ctx, betaJob{named("newer")}, time.Minute, unique)
		must(t, err)

		dl, err := queuey.NewDeadLetters(ctx, h.Backend, app, &queuey.ProducerConfig{Clock: h.Clock})
		must(t, err)
		if list, err := dl.List(ctx, "beta"); err != nil || len(list) != 1 || list[0].UniqueKey != "report-7" {
			t.Fatalf("dead letters %+v, %v; want one of key report-7", list, err)
		}
		n, err := dl.Replay(ctx, "beta", queuey.ReplayOptions{Select: queuey.All()})
		duplicateOf(t, err, "report-7", newer)
		if n != 0 || len(h.Backend.DeadLetters(qBeta)) != 1 {
			t.Fatalf("replayed %d, %d dead letters left; want 0 and the one", n, len(h.Backend.DeadLetters(qBeta)))
		}

		h.Advance(time.Minute) // newer runs and lets the key go
		n, err = dl.Replay(ctx, "beta", queuey.ReplayOptions{Select: queuey.ByID(dead), After: time.Minute})
		if err != nil || n != 1 {
			t.Fatalf("replay: %d, %v; want 1", n, err)
		}
		_, err = h.Producer.Enqueue(ctx, betaJob{named("third")}, unique)
		duplicateOf(t, err, "report-7", dead)
	})
}

// The window ends the key, whatever its job is doing: here, waiting for
// a deferral that outlasts it.
func TestUniqueKeyEndsWithItsWindow(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx := t.Context()
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j alphaJob, jc queuey.JobContext) error { return j.run(ctx, h.Clock, jc) }))
		long := alphaJob{deferring(1, 2*time.Hour)}
		id, err := h.Producer.Enqueue(ctx, long, queuey.UniqueKey("nightly", time.Hour))
		must(t, err)
		h.Advance(time.Hour - time.Millisecond)
		_, err = h.Producer.Enqueue(ctx, long, queuey.UniqueKey("nightly", time.Hour))
		duplicateOf(t, err, "nightly", id)
		h.Advance(time.Millisecond)
		_, err = h.Producer.Enqueue(ctx, long, queuey.UniqueKey("nightly", time.Hour))
		must(t, err)
		h.Idle() // the new job has run and deferred
		if h.Backend.Held(qAlpha) != 2 {
			t.Errorf("held %d, want 2: the first job's deferral still waiting, and the new job's", h.Backend.Held(qAlpha))
		}
	})
}

// A key or window that cannot be kept is refused with a clear error, and
// nothing is published.
func TestUniqueRefusesBadKeysAndWindows(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		cases := []struct {
			name string
			opts []queuey.EnqueueOption
			want error
			says string
		}{
			{"empty key", []queuey.EnqueueOption{queuey.UniqueKey("", time.Hour)}, queuey.ErrInvalidJob, "empty uniqueness key"},
			{"long key", []queuey.EnqueueOption{queuey.UniqueKey(strings.Repeat("k", 256), time.Hour)}, queuey.ErrInvalidJob, "256 bytes, over the 255-byte limit"},
			{"newline", []queuey.EnqueueOption{queuey.UniqueKey("a\nb", time.Hour)}, queuey.ErrInvalidJob, "control character U+000A"},
			{"nul", []queuey.EnqueueOption{queuey.UniqueKey("a\x00b", time.Hour)}, queuey.ErrInvalidJob, "control character U+0000"},
			{"not utf-8", []queuey.EnqueueOption{queuey.UniqueKey("a\xffb", time.Hour)}, queuey.ErrInvalidJob, "not valid UTF-8"},
			{"zero window", []queuey.EnqueueOption{queuey.Unique(0)}, queuey.ErrInvalidDelay, "uniqueness window 0s"},
			{"negative window", []queuey.EnqueueOption{queuey.UniqueKey("k", -time.Second)}, queuey.ErrInvalidDelay, "uniqueness window -1s"},
			{"window too long", []queuey.EnqueueOption{queuey.Unique(broker.MaxKeyTTL + time.Millisecond)}, queuey.ErrInvalidDelay, "is not in (0,"},
			{"twice", []queuey.EnqueueOption{queuey.Unique(time.Hour), queuey.UniqueKey("k", time.Hour)}, queuey.ErrInvalidJob, "given twice"},
		}
		for _, c := range cases {
			_, err := h.Producer.Enqueue(t.Context(), betaJob{named("x")}, c.opts...)
			if !errors.Is(err, c.want) || err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: got %v, want %v saying %q", c.name, err, c.want, c.says)
			}
			_, err = h.Producer.Defer(t.Context(), betaJob{named("x")}, time.Minute, c.opts...)
			if !errors.Is(err, c.want) {
				t.Errorf("%s, deferred: got %v, want %v", c.name, err, c.want)
			}
		}
		if n := h.Backend.Pending(qBeta) + h.Backend.Held(qBeta); n != 0 {
			t.Errorf("%d published, want none", n)
		}
	})
}

// refusingPublish is the memory backend with publishes refused while
// refuse is set.
type refusingPublish struct {
	*memory.Backend
	refuse atomic.Bool
}

func (b *refusingPublish) Publish(ctx context.Context, msg broker.Message) error {
	if b.refuse.Load() {
		return errors.New("refused by the test")
	}
	return b.Backend.Publish(ctx, msg)
}

// A queue set whose prefix leaves no room for a key's lock queues is
// told so at the unique enqueue, and nothing is published.
func TestUniqueRefusesAPrefixTooLongForItsLockQueues(t *testing.T) {
	set := queuey.QueueSet{Prefix: strings.Repeat("p", 215), Queues: []queuey.Queue{{Name: "q"}}}
	clocktest.Run(t, set, nil, func(t *testing.T, h *clocktest.Harness) {
		_, err := h.Producer.Enqueue(t.Context(), namedJob{"x"}, queuey.UniqueKey("k", time.Hour))
		if !errors.Is(err, queuey.ErrInvalidName) || !strings.Contains(err.Error(), "prefix is too long for unique jobs") {
			t.Errorf("got %v, want ErrInvalidName naming the prefix", err)
		}
		if n := h.Backend.Pending(set.BrokerName("q")); n != 0 {
			t.Errorf("%d published, want none", n)
		}
	})
}

// namedJob is a job on the queue "q" of whatever set a test makes.
type namedJob struct{ Name string }

func (namedJob) Kind() string        { return "named" }
func (namedJob) Queue() queuey.Queue { return queuey.Queue{Name: "q"} }

// A unique job whose publish fails lets its key go again.
func TestUniqueKeyIsLetGoWhenThePublishFails(t *testing.T) {
	var wrapped *refusingPublish
	opts := &clocktest.Options{WrapBackend: func(b *memory.Backend) broker.Backend {
		wrapped = &refusingPublish{Backend: b}
		return wrapped
	}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		ctx := t.Context()
		unique := queuey.UniqueKey("k", time.Hour)
		wrapped.refuse.Store(true)
		if _, err := h.Producer.Enqueue(ctx, betaJob{named("a")}, unique); err == nil || !strings.Contains(err.Error(), "refused by the test") {
			t.Fatalf("got %v, want the refusal", err)
		}
		if holder, _ := h.Backend.KeyHolder(ctx, broker.KeyLockName("test", "k")); holder != "" {
			t.Fatalf("key held by %q after a failed publish", holder)
		}
		wrapped.refuse.Store(false)
		_, err := h.Producer.Enqueue(ctx, betaJob{named("a")}, unique)
		must(t, err)
	})
}

// A unique job keeps others with its key out while it lives, or for its
// window at most: here no worker runs, so the window ends it.
func ExampleUniqueKey() {
	ctx := context.Background()
	clk := clock.NewMock() // the memory backend keeps keys on its clock
	backend := memory.New(&memory.Options{Clock: clk})
	app := queuey.QueueSet{Prefix: "example", Queues: []queuey.Queue{emails}}
	producer, err := queuey.NewProducer(ctx, backend, app, &queuey.ProducerConfig{Clock: clk})
	if err != nil {
		panic(err)
	}
	unique := queuey.UniqueKey("welcome:ada", time.Hour)
	first, err := producer.Enqueue(ctx, SendEmail{To: "ada@example.com"}, unique)
	if err != nil {
		panic(err)
	}
	_, err = producer.Enqueue(ctx, SendEmail{To: "ada@example.com"}, unique)
	var dup *queuey.DuplicateError
	fmt.Println("refused:", errors.As(err, &dup), "live job is the first:", dup.JobID == first)
	clk.Add(time.Hour)
	_, err = producer.Enqueue(ctx, SendEmail{To: "ada@example.com"}, unique)
	fmt.Println("after the window:", err)
	// Output:
	// refused: true live job is the first: true
	// after the window: <nil>
}

// BenchmarkUniqueEnqueueMemory measures, in one run, plain and unique
// enqueues (a key each) on the memory backend: enqueues/s each.
func BenchmarkUniqueEnqueueMemory(b *testing.B) {
	backend := memory.New(nil)
	p, err := queuey.NewProducer(b.Context(), backend, app, nil)
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64 // keys used, over every round of b.N
	for _, mode := range []string{"plain", "unique"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				var opts []queuey.EnqueueOption
				if mode == "unique" {
					opts = append(opts, queuey.UniqueKey(strconv.FormatInt(n.Add(1), 10), time.Minute))
				}
				if _, err := p.Enqueue(b.Context(), betaJob{named("bench")}, opts...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "enqueues/s")
		})
	}
}
