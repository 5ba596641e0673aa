package rabbitmq_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// Acks that reach a channel's acker together go as one multiple ack where
// they can; a multiple ack settles every delivery up to its tag, so it
// must never reach past a delivery left unsettled or requeued. Here 40
// deliveries are settled at once from 40 goroutines in a random order,
// but for two left open and one requeued: once the consumer's channel is
// closed, exactly those three are in the queue again, and the acks
// written before the close (Cancel flushes the acker) are all the others.
func TestAcksTakenTogetherSettleNoDeliveryLeftOpen(t *testing.T) {
	t.Parallel()
	b := rabbittest.Dial(t, nil)
	t.Cleanup(func() { _ = b.Close() })
	const n = 40
	q, c := consumeQueueOf(t, b, "acks", n)
	ds := receive(t, c, n)
	open, requeued := []string{"9", "24"}, "4"
	var wg sync.WaitGroup
	for _, i := range rand.Perm(n) {
		d := ds[i]
		switch id := d.Message().ID; {
		case slices.Contains(open, id):
		case id == requeued:
			wg.Go(func() {
				if err := d.Requeue(t.Context()); err != nil {
					t.Errorf("requeue %s: %v", id, err)
				}
			})
		default:
			wg.Go(func() {
				if err := d.Ack(t.Context()); err != nil {
					t.Errorf("ack %s: %v", id, err)
				}
			})
		}
	}
	wg.Wait()
	c.Cancel()
	if err := c.Err(); err != nil {
		t.Fatalf("the consumer ended with %v: a settle the broker refused (an unknown delivery tag) closes its channel", err)
	}

	again, err := b.Consume(t.Context(), q, n)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Cancel()
	var back []string
	for _, d := range receive(t, again, 3) {
		back = append(back, d.Message().ID)
		if err := d.Ack(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(back)
	if want := []string{"24", "4", "9"}; !slices.Equal(back, want) {
		t.Fatalf("back in the queue: %q, want %q (the two left open and the one requeued)", back, want)
	}
	again.Cancel()
	if depth, err := b.Depth(t.Context(), q); err != nil || depth != 0 {
		t.Fatalf("depth %d (%v) once those three are acked, want 0: an ack went missing", depth, err)
	}
}

// consumeQueueOf declares a queue named after name, deleted when the test
// ends, publishes n messages to it with ids 0 to n-1, and consumes it
// with a prefetch of n.
func consumeQueueOf(t *testing.T, b *rabbitmq.Backend, name string, n int) (string, broker.Consumer) {
	t.Helper()
	q := unique(name)
	t.Cleanup(func() { rabbittest.DeleteQueues(t, q) })
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := b.Publish(t.Context(), broker.Message{Queue: q, ID: strconv.Itoa(i), Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := b.Consume(t.Context(), q, n)
	if err != nil {
		t.Fatal(err)
	}
	return q, c
}

// receive takes n deliveries from c, failing the test if they are not
// there within 10 s.
func receive(t *testing.T, c broker.Consumer, n int) []broker.Delivery {
	t.Helper()
	var ds []broker.Delivery
	timeout := time.After(10 * time.Second)
	for len(ds) < n {
		select {
		case d, ok := <-c.Deliveries():
			if !ok {
				t.Fatalf("deliveries ended after %d of %d: %v", len(ds), n, c.Err())
			}
			ds = append(ds, d)
		case <-timeout:
			t.Fatalf("%d of %d deliveries in 10 s", len(ds), n)
		}
	}
	return ds
}

// Acks handed to the acker go before the backend's Close closes the
// connection: 400 deliveries acked at once, then Close at once, and none
// is in the queue again.
func TestAcksGoBeforeTheBackendCloses(t *testing.T) {
	t.Parallel()
	b := rabbittest.Dial(t, nil)
	t.Cleanup(func() { _ = b.Close() }) // should the test end before its Close
	const n = 400
	q, c := consumeQueueOf(t, b, "acks-close", n)
	var wg sync.WaitGroup
	for _, d := range receive(t, c, n) {
		wg.Go(func() {
			if err := d.Ack(t.Context()); err != nil {
				t.Errorf("ack %s: %v", d.Message().ID, err)
			}
		})
	}
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	other := rabbittest.Dial(t, nil)
	t.Cleanup(func() { _ = other.Close() })
	if err := other.Declare(t.Context(), broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if depth, err := other.Depth(t.Context(), q); err != nil || depth != 0 {
		t.Fatalf("%d of %d acked deliveries back in the queue after Close (%v): their acks were dropped", depth, n, err)
	}
}
