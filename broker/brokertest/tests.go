package brokertest

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey/broker"
)

var tests = []struct {
	name string
	run  func(e *env)
}{
	{"DeclareIsIdempotent", func(e *env) {
		spec := broker.QueueSpec{Name: e.queue("work"), MaxPriority: 10, Durable: true}
		e.declare(spec)
		e.publish(msg(spec.Name, "kept", 0))
		e.declare(spec, spec)
		wantIDs(e.t, e.ids(e.consume(spec.Name, 1), 1), "kept")
	}},
	{"RedeclaringWithOtherArgumentsFails", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		err := e.b.Declare(e.t.Context(), e.topology(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true, MessageTTL: time.Hour}))
		wantErr(e.t, "redeclare", err, broker.ErrPreconditionFailed)
		if err != nil && !contains(err.Error(), q) {
			e.t.Errorf("error %q does not name the queue %q", err, q)
		}
		// The backend stays usable.
		e.publish(msg(q, "after", 0))
		wantIDs(e.t, e.ids(e.consume(q, 1), 1), "after")
	}},
	{"MessagesRoundTrip", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		want := broker.Message{
			Queue: q, ID: "0b4f3ad2-8a4e-4f1e-9a57-3f0b7f2f5c11", Type: "send_email", Priority: 3,
			Attempt: 2, Deferrals: 4, CorrelationID: "order-17", Headers: map[string]string{"traceparent": "00-abc-def-01"},
			DueAt: time.UnixMilli(1767268800123),
			Body:  []byte(`{"job_id":"x","payload":{"to":"a@b.c"}}`),
		}
		sent := want
		sent.FromHold = true // Publish ignores it: only a hold queue's release sets it
		e.publish(sent)
		d := e.recv(e.consume(q, 1), e.slack)
		if diff := cmp.Diff(want, d.Message()); diff != "" {
			e.t.Errorf("message differs (-want +got):\n%s", diff)
		}
		if d.Redelivered() {
			e.t.Errorf("first delivery marked redelivered")
		}
		e.ack(d)
	}},
	{"OneLevelIsFIFO", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		c := e.consume(q, 10)
		for _, n := range []string{"1", "2", "3", "4", "5"} {
			e.publish(msg(q, n, 0))
		}
		wantIDs(e.t, e.ids(c, 5), "1", "2", "3", "4", "5")
	}},
	{"HighestPriorityFirstFIFOWithinALevel", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		e.publish(msg(q, "normal-1", 0), msg(q, "urgent-1", 10), msg(q, "normal-2", 0),
			msg(q, "urgent-2", 10), msg(q, "middle", 5), msg(q, "normal-3", 0))
		e.wantPriorityOrder(e.ids(e.consume(q, 1), 6), 3, "urgent-1", "urgent-2", "middle", "normal-1", "normal-2", "normal-3")
	}},
	{"APriorityAboveTheMaximumCountsAsTheMaximum", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 5, Durable: true})
		e.publish(msg(q, "low", 0), msg(q, "max", 5), msg(q, "over", 9))
		e.wantPriorityOrder(e.ids(e.consume(q, 1), 3), 2, "max", "over", "low")
	}},
	{"WithoutPrioritiesEverythingIsFIFO", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, Durable: true})
		e.publish(msg(q, "a", 0), msg(q, "b", 10), msg(q, "c", 3))
		wantIDs(e.t, e.ids(e.consume(q, 1), 3), "a", "b", "c")
	}},
	{"PrefetchCapsUnsettledDeliveries", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		e.publish(msg(q, "1", 0), msg(q, "2", 0), msg(q, "3", 0))
		c := e.consume(q, 2)
		first, _ := e.recv(c, e.slack), e.recv(c, e.slack)
		e.none(c, 300*time.Millisecond)
		e.ack(first)
		if got := e.recv(c, e.slack).Message().ID; got != "3" {
			e.t.Errorf("after an ack: got %s, want 3", got)
		}
	}},
	{"DepthCountsReadyMessages", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		e.publish(msg(q, "1", 0), msg(q, "2", 0), msg(q, "3", 0))
		if n, err := e.b.Depth(e.t.Context(), q); err != nil || n != 3 {
			e.t.Errorf("depth: got %d, %v; want 3", n, err)
		}
		if _, err := e.b.Depth(e.t.Context(), e.queue("missing")); !errors.Is(err, broker.ErrNoQueue) {
			e.t.Errorf("depth of a missing queue: got %v, want ErrNoQueue", err)
		}
	}},
	{"PublishBatchReportsEachMessage", func(e *env) {
		bp, ok := e.b.(broker.BatchPublisher)
		if !ok {
			e.t.Skip("the backend is not a broker.BatchPublisher")
		}
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		// More than a window of confirms (256 on RabbitMQ), and one message
		// nobody can route in the middle.
		const n = 600
		msgs := make([]broker.Message, n)
		want := make([]string, 0, n-1)
		for i := range msgs {
			msgs[i] = msg(q, fmt.Sprintf("m%03d", i), 0)
			if i == 300 {
				msgs[i].Queue = e.queue("missing")
				continue
			}
			want = append(want, msgs[i].ID)
		}
		errs := make([]error, n)
		times := make([]int, n)
		bp.PublishBatch(e.t.Context(), msgs, func(i int, err error) {
			errs[i] = err
			times[i]++
		})
		for i, k := range times {
			if k != 1 {
				e.t.Fatalf("message %d was settled %d times, want once", i, k)
			}
		}
		for i, err := range errs {
			if i == 300 {
				wantErr(e.t, "the unroutable message of the batch", err, broker.ErrUnroutable)
			} else if err != nil {
				e.t.Errorf("message %d: %v", i, err)
			}
		}
		got := e.ids(e.consume(q, 100), n-1)
		slices.Sort(got)
		wantIDs(e.t, got, want...)
		bp.PublishBatch(e.t.Context(), nil, func(i int, err error) {
			e.t.Errorf("an empty batch settled message %d: %v", i, err)
		})
	}},
	{"PublishingToAMissingQueueIsUnroutable", func(e *env) {
		err := e.b.Publish(e.t.Context(), msg(e.queue("missing"), "lost", 0))
		wantErr(e.t, "publish", err, broker.ErrUnroutable)
	}},
	{"ConsumingAMissingQueueFails", func(e *env) {
		_, err := e.b.Consume(e.t.Context(), e.queue("missing"), 1)
		wantErr(e.t, "consume", err, broker.ErrNoQueue)
	}},
	{"AHoldNeedsADeclaredQueue", func(e *env) {
		missing := e.queue("missing")
		wantErr(e.t, "declare hold", e.b.DeclareHold(e.t.Context(), missing, time.Second), broker.ErrUnknownQueue)
		wantErr(e.t, "hold", e.b.Hold(e.t.Context(), msg(missing, "x", 0), time.Second), broker.ErrUnknownQueue)
	}},
	{"AHoldsTTLMustBeWholeMillisecondsUpToTheLongest", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		for _, ttl := range []time.Duration{0, -time.Second, time.Second + time.Microsecond, (broker.MaxHoldMs + 1) * time.Millisecond} {
			wantErr(e.t, fmt.Sprintf("declare a hold of %v", ttl), e.b.DeclareHold(e.t.Context(), q, ttl), broker.ErrInvalidDelay)
			wantErr(e.t, fmt.Sprintf("hold for %v", ttl), e.b.Hold(e.t.Context(), msg(q, "x", 0), ttl), broker.ErrInvalidDelay)
		}
	}},
	{"AHoldIsReleasedAfterItsTTLAndNotBefore", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		c := e.consume(q, 1)
		start := time.Now()
		held := msg(q, "held", 10)
		held.DueAt = time.UnixMilli(1767268800123)
		e.hold(held, time.Second)
		d := e.recv(c, time.Second+e.slack)
		if waited := time.Since(start); waited < time.Second {
			e.t.Errorf("released after %v, before its 1s TTL", waited)
		}
		if got := d.Message(); got.ID != "held" || got.Priority != 10 || !got.FromHold || !got.DueAt.Equal(held.DueAt) {
			e.t.Errorf("released message: got %s at priority %d, from a hold %t, due %v; want held at 10, from a hold, due %v",
				got.ID, got.Priority, got.FromHold, got.DueAt, held.DueAt)
		}
		e.ack(d)
	}},
	{"AReleasedHoldOvertakesTheBacklogByPriority", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		e.hold(msg(q, "deferred", 10), time.Second)
		e.hold(msg(q, "delayed", 0), time.Second)
		e.publish(msg(q, "backlog-1", 0), msg(q, "backlog-2", 0))
		<-time.After(time.Second + e.slack) // both holds have landed behind the backlog
		e.wantPriorityOrder(e.ids(e.consume(q, 1), 4), 1, "deferred", "backlog-1", "backlog-2", "delayed")
	}},
	{"AShortHoldIsNotStuckBehindALongOne", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		c := e.consume(q, 1)
		e.hold(msg(q, "long", 0), 3*time.Second)
		e.hold(msg(q, "short", 0), time.Second)
		short := e.recv(c, time.Second+e.slack)
		e.ack(short)
		long := e.recv(c, 3*time.Second+e.slack)
		e.ack(long)
		wantIDs(e.t, []string{short.Message().ID, long.Message().ID}, "short", "long")
	}},
	{"DeadLettersCarryTheirReason", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		m := msg(q, "doomed", 0)
		m.Attempt = 3
		if err := e.b.DeadLetter(e.t.Context(), broker.DeadLetter{Message: m, Reason: "fatal error: no"}); err != nil {
			e.t.Fatalf("dead letter: %v", err)
		}
		d := e.recv(e.consume(broker.DeadQueueName(q), 1), e.slack)
		got := d.Message()
		want := map[string]string{
			broker.HeaderDeathReason: "fatal error: no", broker.HeaderOriginalQueue: q, broker.HeaderAttempts: "3",
		}
		for k, v := range want {
			if got.Headers[k] != v {
				e.t.Errorf("header %s: got %q, want %q", k, got.Headers[k], v)
			}
		}
		if string(got.Body) != string(m.Body) || got.ID != m.ID {
			e.t.Errorf("dead letter: got %s %q, want %s %q verbatim", got.ID, got.Body, m.ID, m.Body)
		}
		e.ack(d)
	}},
	{"ARequeuedDeliveryComesBackFirst", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		e.publish(msg(q, "1", 0), msg(q, "2", 0))
		c := e.consume(q, 1)
		d := e.recv(c, e.slack)
		if err := d.Requeue(e.t.Context()); err != nil {
			e.t.Fatalf("requeue: %v", err)
		}
		if e.qtype == broker.Quorum {
			// A quorum queue (RabbitMQ 3.10) puts it behind what is ready.
			wantIDs(e.t, e.ids(c, 1), "2")
		}
		again := e.recv(c, e.slack)
		if again.Message().ID != "1" || !again.Redelivered() {
			e.t.Errorf("after requeue: got %s redelivered=%t, want 1 redelivered", again.Message().ID, again.Redelivered())
		}
		e.ack(again)
		if e.qtype != broker.Quorum {
			wantIDs(e.t, e.ids(c, 1), "2")
		}
	}},
	{"SettlingTwiceIsRefused", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		e.publish(msg(q, "1", 0))
		d := e.recv(e.consume(q, 1), e.slack)
		e.ack(d)
		wantErr(e.t, "second ack", d.Ack(e.t.Context()), broker.ErrAlreadySettled)
		wantErr(e.t, "requeue after ack", d.Requeue(e.t.Context()), broker.ErrAlreadySettled)
	}},
	{"CancelReturnsUnsettledDeliveriesInOrder", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		e.publish(msg(q, "1", 0), msg(q, "2", 0), msg(q, "3", 0))
		c, err := e.b.Consume(e.t.Context(), q, 3)
		if err != nil {
			e.t.Fatal(err)
		}
		first := e.recv(c, e.slack)
		e.recv(c, e.slack) // read but unsettled; the third is never read
		c.Cancel()
		for range c.Deliveries() { // drains what was buffered, then ends
		}
		if err := c.Err(); err != nil {
			e.t.Errorf("Err after Cancel: got %v, want nil", err)
		}
		wantErr(e.t, "ack after cancel", first.Ack(e.t.Context()), broker.ErrStaleDelivery)
		c2 := e.consume(q, 3)
		var got []string
		for range 3 {
			d := e.recv(c2, e.slack)
			if !d.Redelivered() {
				e.t.Errorf("%s not marked redelivered", d.Message().ID)
			}
			got = append(got, d.Message().ID)
			e.ack(d)
		}
		wantIDs(e.t, got, "1", "2", "3")
	}},
	{"StopEndsNewDeliveriesButKeepsSettling", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		e.publish(msg(q, "1", 0), msg(q, "2", 0), msg(q, "3", 0))
		c1 := e.consume(q, 2)
		d1, d2 := e.recv(c1, e.slack), e.recv(c1, e.slack)
		c1.Stop()
		for range c1.Deliveries() { // nothing more comes, and it ends
		}
		if err := c1.Err(); err != nil {
			e.t.Errorf("Err after Stop: got %v, want nil", err)
		}
		// Given back after the stop, a delivery goes to another consumer,
		// not back to the stopped one; the stopped one still settles.
		if err := d2.Requeue(e.t.Context()); err != nil {
			e.t.Fatalf("requeue after stop: %v", err)
		}
		e.ack(d1)
		if e.qtype == broker.Quorum { // a requeue goes to the back there
			wantIDs(e.t, e.ids(e.consume(q, 2), 2), "3", "2")
		} else {
			wantIDs(e.t, e.ids(e.consume(q, 2), 2), "2", "3")
		}
	}},
	{"ConsumersShareAQueue", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		a, b := e.consume(q, 1), e.consume(q, 1)
		e.publish(msg(q, "1", 0), msg(q, "2", 0))
		da, db := e.recv(a, e.slack), e.recv(b, e.slack)
		if da.Message().ID == db.Message().ID {
			e.t.Errorf("both consumers got %s", da.Message().ID)
		}
		e.ack(da)
		e.ack(db)
	}},
	{"ASingleActiveConsumerTakesEverythingUntilItEnds", func(e *env) {
		q := e.queue("sac")
		e.declare(broker.QueueSpec{Name: q, Plain: true, SingleActiveConsumer: true})
		first, second := e.consume(q, 2), e.consume(q, 2)
		e.publish(msg(q, "1", 0), msg(q, "2", 0))
		a, b := e.recv(first, 5*time.Second), e.recv(first, 5*time.Second)
		e.none(second, 300*time.Millisecond)
		e.ack(a)
		first.Cancel() // the unsettled one goes to the next consumer
		if got := e.recv(second, 5*time.Second).Message().ID; got != b.Message().ID {
			e.t.Fatalf("the next consumer got %s, want %s", got, b.Message().ID)
		}
	}},
	{"AnExclusiveConsumerIsAlone", func(e *env) {
		ex, ok := e.b.(broker.ExclusiveConsumer)
		if !ok {
			e.t.Skip("the backend has no exclusive consumers")
		}
		ctx := e.t.Context()
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		e.publish(msg(q, "1", 0), msg(q, "2", 0))
		// Not while another consumer is there.
		other := e.consume(q, 1)
		_, err := ex.ConsumeExclusive(ctx, q, 10)
		wantErr(e.t, "an exclusive consume beside another consumer", err, broker.ErrInUse)
		d := e.recv(other, e.slack)
		if err := d.Requeue(ctx); err != nil {
			e.t.Fatal(err)
		}
		other.Cancel()
		// Alone, it gets everything, and no one else can consume.
		alone, err := ex.ConsumeExclusive(ctx, q, 10)
		if err != nil {
			e.t.Fatalf("an exclusive consume on a queue without consumers: %v", err)
		}
		e.t.Cleanup(alone.Cancel)
		// On a quorum queue a requeue goes to the back, and whether the
		// requeued "1" was handed to the other consumer again before it
		// ended is a race: there, both come, in either order.
		sameSet := func(got []string) []string {
			if e.qtype == broker.Quorum {
				slices.Sort(got)
			}
			return got
		}
		wantIDs(e.t, sameSet([]string{e.recv(alone, e.slack).Message().ID, e.recv(alone, e.slack).Message().ID}), "1", "2")
		beside, err := e.b.Consume(ctx, q, 1)
		if e.qtype == broker.Quorum {
			// RabbitMQ 3.10 lets it through on a quorum queue: an
			// exclusive consumer only checks that it came first.
			if err != nil {
				e.t.Fatalf("a consume beside an exclusive consumer of a quorum queue: %v", err)
			}
			beside.Cancel()
		} else {
			wantErr(e.t, "a consume beside an exclusive consumer", err, broker.ErrInUse)
		}
		_, err = ex.ConsumeExclusive(ctx, q, 1)
		wantErr(e.t, "a second exclusive consume", err, broker.ErrInUse)
		// Once it stops, others may consume; what it held goes back with it.
		alone.Cancel()
		wantIDs(e.t, sameSet(e.ids(e.consume(q, 2), 2)), "1", "2")
	}},
	{"CloseEndsConsumersAndRefusesCalls", func(e *env) {
		q := e.queue("work")
		e.declare(broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true})
		c, err := e.b.Consume(e.t.Context(), q, 1)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := e.b.Close(); err != nil {
			e.t.Fatalf("close: %v", err)
		}
		select {
		case _, ok := <-c.Deliveries():
			if ok {
				e.t.Errorf("delivery after close")
			}
		case <-time.After(e.slack):
			e.t.Fatalf("consumer still open %v after close", e.slack)
		}
		wantErr(e.t, "consumer Err", c.Err(), broker.ErrClosed)
		wantErr(e.t, "publish after close", e.b.Publish(e.t.Context(), msg(q, "x", 0)), broker.ErrClosed)
		wantErr(e.t, "declare after close", e.b.Declare(e.t.Context(), e.topology(broker.QueueSpec{Name: q})), broker.ErrClosed)
		wantErr(e.t, "declare a hold after close", e.b.DeclareHold(e.t.Context(), q, time.Second), broker.ErrClosed)
		wantErr(e.t, "hold after close", e.b.Hold(e.t.Context(), msg(q, "x", 0), time.Second), broker.ErrClosed)
	}},
}
