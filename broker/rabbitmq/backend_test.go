package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// TestAHoldsCheckDoesNotWaitForABusyWorkQueue: the check that a hold's
// work queue exists looks the queue up; it does not ask the queue for its
// counts, which a queue answers in its turn, behind the deliveries and
// acks it is busy with. Here the work queue's process is suspended and
// answers nothing: the hold is done all the same. (A check that asked for
// the counts waited for good, and the hold failed at its ctx's end.)
func TestAHoldsCheckDoesNotWaitForABusyWorkQueue(t *testing.T) {
	t.Parallel()
	b, q := dialWithWorkQueue(t, "checkbusy")
	suspendQueue(t, q)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := declareAndHold(ctx, b, broker.Message{Queue: q, ID: "1", Body: []byte("{}")}, time.Minute); err != nil {
		t.Fatalf("Hold while its work queue answers nothing: %v; want it held", err)
	}
}

// TestAHoldsCheckFindsAWorkQueueGoneAndTheNextCheckWorks: a hold that
// finds its work queue gone (which closes the channel it was published
// on) has it declared again, and the holds after it work on a channel of
// their own.
func TestAHoldsCheckFindsAWorkQueueGoneAndTheNextCheckWorks(t *testing.T) {
	t.Parallel()
	b, q := dialWithWorkQueue(t, "checkgone")
	p := workProducer(t, b, prefixOf(q), "work")
	for i := range 3 {
		if i == 1 {
			if _, err := rawChannel(t).QueueDelete(q, false, false, false); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.EnqueueAfter(t.Context(), workJob{ID: fmt.Sprint(i)}, time.Minute); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		if _, err := b.Depth(t.Context(), q); err != nil {
			t.Fatalf("after hold %d, Depth of the work queue: %v; want it there", i, err)
		}
	}
}

// The transport holds only into a hold that is there, for a work queue
// that is there: a hold queue never declared is broker.ErrNoHold, a work
// queue gone is broker.ErrNoQueue, and neither holds anything.
func TestAHoldIntoWhatIsNotThereHoldsNothing(t *testing.T) {
	t.Parallel()
	b, q := dialWithWorkQueue(t, "holdnothing")
	msg := broker.Message{Queue: q, ID: "1", Body: []byte("{}")}
	if err := b.Hold(t.Context(), msg, time.Minute); !errors.Is(err, broker.ErrNoHold) {
		t.Fatalf("Hold into a hold queue never declared: %v; want ErrNoHold", err)
	}
	if err := b.DeclareHold(t.Context(), q, time.Minute); err != nil {
		t.Fatal(err)
	}
	raw := rawChannel(t)
	if _, err := raw.QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(t.Context(), msg, time.Minute); !errors.Is(err, broker.ErrNoQueue) || errors.Is(err, broker.ErrNoHold) {
		t.Fatalf("Hold with its work queue gone: %v; want ErrNoQueue", err)
	}
	if n := heldIn(t, raw, q, time.Minute); n != 0 {
		t.Errorf("the hold queue has %d messages after two holds that failed; want 0", n)
	}
}

// TestAHoldThatFindsItsWorkQueueGoneLeavesThePoolOpen: holds go on a
// publishing channel of their own, so the check of a hold whose work
// queue is gone (a 404, which closes the channel it was sent on) closes
// that channel, not one of the pool, where a producer's publishes may be
// in flight (they would fail with it and go again, each alone).
func TestAHoldThatFindsItsWorkQueueGoneLeavesThePoolOpen(t *testing.T) {
	t.Parallel()
	b := rabbittest.Dial(t, &rabbitmq.Options{PublishChannels: 1, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = b.Close() })
	q := unique("holdapart") + ".work"
	t.Cleanup(func() { rabbittest.DeleteQueues(t, q, broker.DeadQueueName(q), broker.HoldQueueName(q, time.Minute)) })
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeclareHold(t.Context(), q, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(t.Context(), broker.Message{Queue: q, ID: "1", Body: []byte("{}")}); err != nil {
		t.Fatal(err) // the pool's one channel is open
	}
	if _, err := rawChannel(t).QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(t.Context(), broker.Message{Queue: q, ID: "2", Body: []byte("{}")}, time.Minute); !errors.Is(err, broker.ErrNoQueue) {
		t.Fatalf("Hold with its work queue gone: %v; want ErrNoQueue", err)
	}
	if n := rabbitmq.PoolChannelsClosed(b); n != 0 {
		t.Errorf("the hold's 404 closed %d channel of the publishing pool; want 0", n)
	}
}

// TestAHoldForAWorkQueueGoneIsTakenOnce: a hold asked for while its work
// queue is gone is not taken by the broker until the queue is back, so it
// is in the hold queue once, not twice (once when it went out, once again
// because the queue was gone then).
func TestAHoldForAWorkQueueGoneIsTakenOnce(t *testing.T) {
	t.Parallel()
	b, q := dialWithWorkQueue(t, "holdonce")
	raw := rawChannel(t)
	if _, err := raw.QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := workProducer(t, b, prefixOf(q), "work").EnqueueAfter(t.Context(), workJob{ID: "1"}, time.Minute); err != nil {
		t.Fatalf("EnqueueAfter with its work queue gone: %v; want it held", err)
	}
	if _, err := b.Depth(t.Context(), q); err != nil {
		t.Fatalf("Depth of the work queue after the hold: %v; want it declared again", err)
	}
	if n := heldIn(t, raw, q, time.Minute); n != 1 {
		t.Fatalf("the hold queue has %d messages; want the one hold, once", n)
	}
}

// TestConcurrentHoldsShareAChannelWithoutLosingTheConnection: each hold
// sends a passive declare of its work queue just before its publish, on
// the holds' channel, which others publish on at the same time: a declare
// that came between the frames of another's publish would be a protocol
// error, which ends the connection.
func TestConcurrentHoldsShareAChannelWithoutLosingTheConnection(t *testing.T) {
	t.Parallel()
	var lost atomic.Int64
	opts := rabbitmq.Options{Logger: slog.New(countingHandler{text: "connection lost", n: &lost})}
	b := rabbittest.Dial(t, &opts)
	t.Cleanup(func() { _ = b.Close() })
	q := unique("holdsshare") + ".work"
	t.Cleanup(func() { rabbittest.DeleteQueues(t, q, broker.DeadQueueName(q), broker.HoldQueueName(q, time.Minute)) })
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		t.Fatal(err)
	}
	var g errgroup.Group
	for w := range 8 {
		g.Go(func() error {
			for i := range 150 {
				msg := broker.Message{Queue: q, ID: fmt.Sprint(w, "-", i), Body: []byte(`{"pad":"` + strings.Repeat("p", 8<<10) + `"}`)}
				if err := declareAndHold(t.Context(), b, msg, time.Minute); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := lost.Load(); n != 0 {
		t.Errorf("the connection was lost %d times during 1,200 holds; want 0", n)
	}
}

// TestHoldsBesideAWorkQueueGoneAreAllHeld: holds for two work queues share
// the backend's channel of holds; one queue is deleted while they are in
// flight, and they go on after. The hold that finds it gone closes its
// channel, and what was in flight on it with it, though for the other
// queue, is published again; the queue is declared again: every hold is
// done and every job is in its hold queue (some, maybe, twice).
func TestHoldsBesideAWorkQueueGoneAreAllHeld(t *testing.T) {
	t.Parallel()
	prefix := unique("holdsbeside")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, nil)
	t.Cleanup(func() { _ = b.Close() })
	names := []string{"stays", "goes"}
	for _, n := range names {
		if err := b.Declare(t.Context(), broker.QueueSpec{Name: prefix + "." + n, MaxPriority: 10, Durable: true}); err != nil {
			t.Fatal(err)
		}
	}
	started, deleted := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { // a test that failed before the delete: the holders end too
		select {
		case <-deleted:
		default:
			close(deleted)
		}
	})
	held := make(chan error, 1)
	var made [2]atomic.Int32
	p := workProducer(t, b, prefix, names...)
	go func() { held <- holdBothUntil(p, names, &made, started, deleted) }()
	select {
	case <-started:
	case err := <-held:
		t.Fatalf("the holds ended before they were under way: %v", err)
	}
	if _, err := rawChannel(t).QueueDelete(prefix+".goes", false, false, false); err != nil {
		t.Fatal(err)
	}
	close(deleted)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	raw := rawChannel(t)
	for i, n := range names {
		q := prefix + "." + n
		if got, want := heldIn(t, raw, q, time.Minute), int(made[i].Load()); got < want {
			t.Errorf("the hold queue of %s has %d messages; want the %d held", n, got, want)
		}
		if _, err := b.Depth(t.Context(), q); err != nil {
			t.Errorf("Depth of %s after the holds: %v; want it there", n, err)
		}
	}
}

// holdBothUntil holds jobs for the two queues named, in turn, from 8
// goroutines, counting those held in made; it closes started after 50,
// and each goroutine stops 10 holds after deleted is closed.
func holdBothUntil(p *queuey.Producer, names []string, made *[2]atomic.Int32, started, deleted chan struct{}) error {
	var g errgroup.Group
	var done atomic.Int32
	for w := range 8 {
		g.Go(func() error {
			for i, after := w, 0; after < 10; i += 8 {
				select {
				case <-deleted:
					after++
				default:
				}
				if _, err := p.EnqueueAfter(context.Background(), workJob{ID: fmt.Sprint(i), To: names[i%2]}, time.Minute); err != nil {
					return fmt.Errorf("hold %d for %s: %w", i, names[i%2], err)
				}
				made[i%2].Add(1)
				if done.Add(1) == 50 {
					close(started)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// dialWithWorkQueue dials a backend and declares a durable work queue
// with priorities through it, under a prefix of name's that the test's
// end deletes.
func dialWithWorkQueue(t *testing.T, name string) (*rabbitmq.Backend, string) {
	t.Helper()
	prefix := unique(name)
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, nil)
	t.Cleanup(func() { _ = b.Close() })
	q := prefix + ".work"
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		t.Fatal(err)
	}
	return b, q
}

// suspendQueue suspends the broker's process of queue (on the default
// vhost) until the test ends: it takes no message and answers no call.
func suspendQueue(t *testing.T, queue string) {
	t.Helper()
	pid := fmt.Sprintf(`{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<%q>>)), P = amqqueue:get_pid(Q)`, queue)
	rabbitmqctl(t, "eval", pid+", sys:suspend(P).")
	t.Cleanup(func() { rabbitmqctl(t, "eval", pid+", sys:resume(P).") })
}
