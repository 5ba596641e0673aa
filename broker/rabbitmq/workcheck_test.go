package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// TestAHoldsCheckDoesNotWaitForABusyWorkQueue: the check beside a hold
// that its work queue exists looks the queue up; it does not ask the
// queue for its counts, which a queue answers in its turn, behind the
// deliveries and acks it is busy with. Here the work queue's process is
// suspended and answers nothing: the hold is done all the same. (A check
// that asked for the counts waited for good, and the hold failed at its
// ctx's end.)
func TestAHoldsCheckDoesNotWaitForABusyWorkQueue(t *testing.T) {
	t.Parallel()
	b, q := dialWithWorkQueue(t, "checkbusy")
	suspendQueue(t, q)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := b.Hold(ctx, broker.Message{Queue: q, ID: "1", Body: []byte("{}")}, time.Minute); err != nil {
		t.Fatalf("Hold while its work queue answers nothing: %v; want it held", err)
	}
}

// TestAHoldsCheckFindsAWorkQueueGoneAndTheNextCheckWorks: a check that
// finds its work queue gone (which closes the declaration channel) has it
// declared again, and the checks after it work on a channel of their own.
func TestAHoldsCheckFindsAWorkQueueGoneAndTheNextCheckWorks(t *testing.T) {
	t.Parallel()
	b, q := dialWithWorkQueue(t, "checkgone")
	for i := range 3 {
		if i == 1 {
			if _, err := rawChannel(t).QueueDelete(q, false, false, false); err != nil {
				t.Fatal(err)
			}
		}
		msg := broker.Message{Queue: q, ID: fmt.Sprint(i), Body: []byte("{}")}
		if err := b.Hold(t.Context(), msg, time.Minute); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		if _, err := b.Depth(t.Context(), q); err != nil {
			t.Fatalf("after hold %d, Depth of the work queue: %v; want it there", i, err)
		}
	}
}

// TestAChecksChannelClosedBeforeItsQosIsToldByAPassiveDeclare: when the
// declaration channel is closed before a check's qos goes out (a
// declare's 404, or the connection, overtook it), a passive declare with
// its answer tells whether the queue is there.
func TestAChecksChannelClosedBeforeItsQosIsToldByAPassiveDeclare(t *testing.T) {
	t.Parallel()
	b, q := dialWithWorkQueue(t, "checkclosed")
	if err := rabbitmq.Existence(t.Context(), b, []string{q}, amqp.ErrClosed); err != nil {
		t.Fatalf("work queue there, channel closed before the qos: %v; want nil", err)
	}
	if _, err := rawChannel(t).QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	err := rabbitmq.Existence(t.Context(), b, []string{q}, amqp.ErrClosed)
	if !errors.Is(err, broker.ErrNoQueue) {
		t.Fatalf("work queue gone, channel closed before the qos: %v; want ErrNoQueue", err)
	}
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
