package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

func TestDeadLettersCanBeListedShownAndReplayed(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx, id := t.Context(), mustID(t)
		fatal := true
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error {
			if fatal {
				return queuey.Fatalf("%s: upstream said no", j.Name)
			}
			return nil
		}))
		a := id(h.Producer.Enqueue(ctx, betaJob{named("a")}, queuey.WithCorrelationID("c-a")))
		b := id(h.Producer.Enqueue(ctx, betaJob{named("b")}))
		c := id(h.Producer.Enqueue(ctx, betaJob{named("c")}))
		must(t, h.Backend.Publish(ctx, broker.Message{Queue: qBeta, Body: []byte("not json")}))
		h.Advance(time.Hour)

		dl, err := queuey.NewDeadLetters(ctx, h.Backend, app, &queuey.ProducerConfig{Clock: h.Clock})
		must(t, err)
		checkDeadLetterList(t, h, dl, a)
		shown, err := dl.Show(ctx, "beta", b)
		if err != nil || shown.ID != b {
			t.Errorf("Show: %+v, %v", shown, err)
		}
		if _, err := dl.Show(ctx, "beta", "nope"); !errors.Is(err, queuey.ErrNotFound) {
			t.Errorf("Show of a missing id: %v", err)
		}
		fatal = false
		checkReplays(t, h, dl, [3]string{a, b, c})
	})
}

// checkDeadLetterList checks the list of beta's dead letters: a's (fatal,
// correlation id c-a), two more and a malformed body, all left in place.
func checkDeadLetterList(t *testing.T, h *clocktest.Harness, dl *queuey.DeadLetters, a string) {
	t.Helper()
	list, err := dl.List(t.Context(), "beta")
	must(t, err)
	if len(list) != 4 {
		t.Fatalf("listed %d dead letters, want 4", len(list))
	}
	// Their publishes are made at once, in any order.
	ia := slices.IndexFunc(list, func(d queuey.DeadLetter) bool { return d.ID == a })
	if ia < 0 {
		t.Fatalf("no dead letter of a in %+v", list)
	}
	if got := list[ia]; got.Kind != "beta_job" || got.Attempts != 1 || got.Age != time.Hour ||
		got.CorrelationID != "c-a" || !strings.Contains(got.Reason, "a: upstream said no") || !strings.Contains(string(got.Payload), `"a"`) {
		t.Errorf("a's dead letter: %+v", got)
	}
	if got := list[ia]; got.Cause != queuey.CauseFatal || got.Headers["x-queuey-dead-letter-cause"] != "fatal" {
		t.Errorf("a's dead letter: cause %q, header %q, want fatal in both", got.Cause, got.Headers["x-queuey-dead-letter-cause"])
	}
	im := slices.IndexFunc(list, func(d queuey.DeadLetter) bool { return d.Malformed })
	if im < 0 || string(list[im].Body) != "not json" || list[im].Cause != queuey.CauseMalformed {
		t.Errorf("the malformed dead letter: %+v", list)
	}
	if len(h.Backend.DeadLetters(qBeta)) != 4 {
		t.Errorf("listing must put everything back")
	}
}

// checkReplays replays a and c by id, then everything after 30 s (b; the
// malformed body stays), and checks that each job ran again.
func checkReplays(t *testing.T, h *clocktest.Harness, dl *queuey.DeadLetters, ids [3]string) {
	t.Helper()
	ctx, a, b, c := t.Context(), ids[0], ids[1], ids[2]
	var progress []int
	n, err := dl.Replay(ctx, "beta", queuey.ReplayOptions{Select: queuey.ByID(a, c), Progress: func(done, total int) {
		progress = append(progress, done)
	}})
	if err != nil || n != 2 {
		t.Fatalf("replay: %d, %v", n, err)
	}
	h.Advance(time.Second)
	wantShapes(t, h.Log.Of(a), shape{1, 0, 0}, shape{1, 0, 0})
	wantShapes(t, h.Log.Of(c), shape{1, 0, 0}, shape{1, 0, 0})
	if len(progress) != 2 || progress[1] != 2 {
		t.Errorf("progress: %v", progress)
	}
	left := h.Backend.DeadLetters(qBeta)
	if len(left) != 2 || left[0].ID != b {
		t.Errorf("left in the dead letters: %+v, want b and the malformed one", left)
	}

	n, err = dl.Replay(ctx, "beta", queuey.ReplayOptions{Select: queuey.All(), After: 30 * time.Second})
	if err != nil || n != 1 {
		t.Fatalf("deferred replay: %d, %v", n, err)
	}
	if h.Backend.Held(qBeta) != 1 {
		t.Errorf("the deferred replay is not held")
	}
	h.Advance(30 * time.Second)
	wantShapes(t, h.Log.Of(b), shape{1, 0, 0}, shape{1, 0, 10})
	if left := h.Backend.DeadLetters(qBeta); len(left) != 1 || string(left[0].Body) != "not json" {
		t.Errorf("left: %+v, want only the malformed body", left)
	}
}

// failingPublish refuses every publish to a work queue.
type failingPublish struct{ *memory.Backend }

func (f failingPublish) Publish(ctx context.Context, m broker.Message) error {
	return errors.New("broker said no")
}

// cancelAtPublish cancels its caller's ctx while the third publish waits
// for its confirm, as an operator's Ctrl-C would: the message is on the
// queue, and a publish on that ctx hears of the cancellation.
type cancelAtPublish struct {
	*memory.Backend
	cancel context.CancelFunc
	n      atomic.Int32
}

func (c *cancelAtPublish) Publish(ctx context.Context, m broker.Message) error {
	err := c.Backend.Publish(ctx, m)
	if c.n.Add(1) == 3 {
		c.cancel()
		select {
		case <-ctx.Done(): // (a mock clock's ctx hears of its parent's end a moment later)
			return ctx.Err() // published, but the caller waited no longer
		case <-time.After(time.Second): // the bubble's time: once all else waits
		}
	}
	return err
}

// A replay cut short (its ctx cancelled) finishes the dead letter whose
// republish had begun: it leaves the dead letters as it reached the work
// queue, and none is in both.
func TestAReplayCutShortLeavesNoCopyBehind(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		for i := range 5 {
			mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{plan{Name: fmt.Sprint(i), Fatal: true}}))
		}
		h.Advance(time.Second)
		must(t, h.Stop()) // what is replayed stays on the queue, to be counted
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		backend := &cancelAtPublish{Backend: h.Backend, cancel: cancel}
		dl, err := queuey.NewDeadLetters(t.Context(), backend, app, &queuey.ProducerConfig{Clock: h.Clock})
		must(t, err)
		n, err := dl.Replay(ctx, "beta", queuey.ReplayOptions{Select: queuey.All()})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Replay: %d, %v; want context.Canceled", n, err)
		}
		// The third was on its way when the ctx ended: it is finished.
		pending, dead := h.Backend.Pending(qBeta), len(h.Backend.DeadLetters(qBeta))
		if n != 3 || pending != 3 || dead != 2 {
			t.Errorf("replayed %d; %d on the queue, %d dead letters; want 3 moved, none in both places (3, 3, 2)", n, pending, dead)
		}
	})
}

func TestAReplayThatCannotPublishLosesNothing(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx := t.Context()
		handleAll(t, h.Worker, h.Clock)
		mustID(t)(h.Producer.Enqueue(ctx, betaJob{plan{Fatal: true}}))
		h.Advance(time.Second)
		dl, err := queuey.NewDeadLetters(ctx, failingPublish{h.Backend}, app, nil)
		must(t, err)
		if n, err := dl.Replay(ctx, "beta", queuey.ReplayOptions{Select: queuey.All()}); err == nil || n != 0 {
			t.Errorf("replay: %d, %v; want an error", n, err)
		}
		if got := len(h.Backend.DeadLetters(qBeta)); got != 1 {
			t.Errorf("dead letters after the failed replay: %d, want 1", got)
		}
	})
}

// Readers of the same dead letters at once: on one DeadLetters they take
// turns, each seeing them all; a reader through another DeadLetters (in
// another process, say) while one holds them is told ErrInUse, rather
// than given the part the other left as if it were all (or "not found"
// for one the other holds).
func TestConcurrentDeadLetterReadersSeeThemAllOrAreToldTheyAreInUse(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx := t.Context()
		handleAll(t, h.Worker, h.Clock)
		var ids []string
		for i := range 20 {
			ids = append(ids, mustID(t)(h.Producer.Enqueue(ctx, betaJob{plan{Name: fmt.Sprint(i), Fatal: true}})))
		}
		h.Advance(time.Second)
		if got := len(h.Backend.DeadLetters(qBeta)); got != 20 {
			t.Fatalf("dead letters: %d, want 20", got)
		}
		dl, err := queuey.NewDeadLetters(ctx, h.Backend, app, &queuey.ProducerConfig{Clock: h.Clock})
		must(t, err)

		var wg sync.WaitGroup
		sizes, errs := make([]int, 3), make([]error, 3)
		for i := range 3 {
			wg.Go(func() {
				list, err := dl.List(ctx, "beta")
				sizes[i], errs[i] = len(list), err
			})
		}
		wg.Wait()
		for i := range 3 {
			if sizes[i] != 20 || errs[i] != nil {
				t.Errorf("concurrent List %d: %d dead letters, %v; want all 20", i, sizes[i], errs[i])
			}
		}

		// A replay holds the dead letters while it looks at the first.
		release, replayed := holdDeadLetters(ctx, dl, "beta")
		other, err := queuey.NewDeadLetters(ctx, h.Backend, app, &queuey.ProducerConfig{Clock: h.Clock})
		must(t, err)
		if list, err := other.List(ctx, "beta"); !errors.Is(err, queuey.ErrInUse) {
			t.Errorf("List beside a replay: %d dead letters, %v; want ErrInUse", len(list), err)
		}
		if _, err := other.Show(ctx, "beta", ids[7]); !errors.Is(err, queuey.ErrInUse) {
			t.Errorf("Show beside a replay: %v, want ErrInUse", err)
		}
		release()
		must(t, <-replayed)
		if list, err := other.List(ctx, "beta"); err != nil || len(list) != 20 {
			t.Errorf("List after the replay: %d dead letters, %v; want all 20", len(list), err)
		}
	})
}

// A worker that consumes a queue a dead-letter read holds (the dead-letter
// queue of another queue set: an archiver, an alerter) waits for it, and
// takes it up once the read is over; it does not crash out of Run.
func TestAWorkerOnAQueueADeadLetterReadHoldsWaitsForIt(t *testing.T) {
	watched := queuey.Queue{Name: "orders.dead", Prefetch: 1, MaxPriority: queuey.NoPriorities}
	set := queuey.QueueSet{Prefix: "p", Queues: []queuey.Queue{watched}}
	clocktest.Run(t, set, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx := t.Context()
		orders := queuey.QueueSet{Prefix: "p", Queues: []queuey.Queue{{Name: "orders"}}}
		dl, err := queuey.NewDeadLetters(ctx, h.Backend, orders, &queuey.ProducerConfig{Clock: h.Clock})
		must(t, err)
		var ran atomic.Int32
		must(t, queuey.Handle(h.Worker, func(context.Context, deadWatchJob, queuey.JobContext) error {
			ran.Add(1)
			return nil
		}))
		env := broker.NewEnvelope(deadWatchJob{}.Kind(), "p.orders", []byte(`{}`), h.Clock.Now())
		msg, err := env.Message()
		must(t, err)
		msg.Queue = "p.orders.dead"
		must(t, h.Backend.Publish(ctx, msg))

		release, replayed := holdDeadLetters(ctx, dl, "orders")
		h.Start()
		h.Advance(10 * time.Second) // the worker finds the queue held, and waits
		if n := ran.Load(); n != 0 {
			t.Fatalf("the job ran %d times while the read held it", n)
		}
		release()
		must(t, <-replayed)
		h.WaitFor("the job ran", func() bool { return ran.Load() == 1 })
		if err := h.Stop(); err != nil {
			t.Errorf("Run: %v, want nil (a held queue is no crash)", err)
		}
	})
}

// deadWatchJob is what the worker above finds on the dead-letter queue.
type deadWatchJob struct{}

func (deadWatchJob) Kind() string { return "dead_watch" }
func (deadWatchJob) Queue() queuey.Queue {
	return queuey.Queue{Name: "orders.dead", Prefetch: 1, MaxPriority: queuey.NoPriorities}
}

// holdDeadLetters starts a Replay of the queue named name that selects
// nothing and holds the dead letters at the first of them until release
// is called; it returns once the replay holds them. replayed yields the
// replay's error.
func holdDeadLetters(ctx context.Context, dl *queuey.DeadLetters, name string) (release func(), replayed <-chan error) {
	looking, let := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		first := true
		_, err := dl.Replay(ctx, name, queuey.ReplayOptions{Select: func(queuey.DeadLetter) bool {
			if first {
				first = false
				close(looking)
				<-let
			}
			return false
		}})
		done <- err
	}()
	<-looking
	return func() { close(let) }, done
}

// A read takes ListLimit dead letters at most; a replay of all reads again
// until none is left.
func TestAReplayOfAllGoesPastOneRead(t *testing.T) {
	ctx := t.Context()
	backend := memory.New(nil)
	defer backend.Close()
	dl, err := queuey.NewDeadLetters(ctx, backend, app, nil)
	must(t, err)
	const n = queuey.ListLimit + 10
	for range n {
		env := broker.NewEnvelope("beta_job", qBeta, []byte(`{}`), time.Now())
		msg, err := env.Message()
		must(t, err)
		must(t, backend.DeadLetter(ctx, broker.DeadLetter{Message: msg, Reason: "test"}))
	}
	list, err := dl.List(ctx, "beta")
	must(t, err)
	if len(list) != queuey.ListLimit {
		t.Errorf("List: %d, want the first %d", len(list), queuey.ListLimit)
	}
	replayed, err := dl.Replay(ctx, "beta", queuey.ReplayOptions{Select: queuey.All()})
	must(t, err)
	if replayed != n || len(backend.DeadLetters(qBeta)) != 0 || backend.Pending(qBeta) != n {
		t.Errorf("replayed %d, %d dead letters left, %d pending; want all %d moved", replayed, len(backend.DeadLetters(qBeta)), backend.Pending(qBeta), n)
	}
}

// A read of the dead letters with an ended ctx returns the ctx's error: it
// is not told that another reader holds them (ErrInUse). Tried over and
// over, for a select between a free turn and an ended ctx picks either.
func TestADeadLetterReadWithAnEndedCtxReturnsItsError(t *testing.T) {
	backend := memory.New(nil)
	defer backend.Close()
	dl, err := queuey.NewDeadLetters(t.Context(), backend, app, nil)
	must(t, err)
	env := broker.NewEnvelope("beta_job", qBeta, []byte(`{}`), time.Now())
	msg, err := env.Message()
	must(t, err)
	must(t, backend.DeadLetter(t.Context(), broker.DeadLetter{Message: msg, Reason: "test"}))
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for range 100 {
		_, err := dl.List(ended, "beta")
		if !errors.Is(err, context.Canceled) || errors.Is(err, queuey.ErrInUse) || strings.Contains(fmt.Sprint(err), "another read") {
			t.Fatalf("List with an ended ctx: %v; want context.Canceled, and no word of another reader", err)
		}
	}
}
