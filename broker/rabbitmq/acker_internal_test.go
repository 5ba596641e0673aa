package rabbitmq

import (
	"cmp"
	"crypto/rand"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The acker's turns, one by one: an ack past a delivery still unsettled
// goes alone; once the deliveries before it are acked, one multiple ack
// settles them, whose tag is the highest acked in that turn, not the
// one settled alone before (the broker closes the channel on a multiple
// ack of a tag it no longer has: "unknown delivery tag"). A requeue goes
// alone, before the turn's multiple ack, which then passes over it.
func TestAnAckersTurnsSettleFromTheOldestUnsettledDelivery(t *testing.T) {
	t.Parallel()
	ch, tags := deliveredTags(t, 6)
	a := &acker{ch: ch, oldest: 1, settled: map[uint64]struct{}{}, counting: true}
	turn := func(acks []uint64, requeues []uint64, oldest uint64, alone int) {
		t.Helper()
		a.acks = acks
		for _, tag := range requeues {
			a.take(ackMsg{tag: tag, requeue: true, written: make(chan struct{})})
		}
		written := slices.Clone(a.requeues)
		a.write()
		for _, m := range written {
			select {
			case <-m.written:
			default:
				t.Fatalf("the requeue of %d written, but its caller not told", m.tag)
			}
		}
		if a.oldest != oldest || len(a.settled) != alone {
			t.Fatalf("after acks %v and requeues %v: oldest %d and %d settled alone, want %d and %d",
				acks, requeues, a.oldest, len(a.settled), oldest, alone)
		}
	}
	turn([]uint64{3}, nil, 1, 1)                // 1 and 2 unsettled: 3 alone
	turn([]uint64{2, 1}, nil, 4, 0)             // 1 and 2 with one ack of 2; 3 was settled
	turn([]uint64{6}, []uint64{4}, 5, 1)        // 4 requeued alone; 5 unsettled, so 6 alone
	turn([]uint64{5}, nil, 7, 0)                // 5 as a multiple ack of 5: nothing is left
	if err := ch.Qos(1, 0, false); err != nil { // a round trip: the broker has read the acks
		t.Fatalf("the channel closed under the acks: %v", err)
	}
	select {
	case d := <-tags:
		if d.MessageId != "4" || !d.Redelivered {
			t.Fatalf("delivered again: %q (redelivered %t), want only the requeued 4", d.MessageId, d.Redelivered)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the requeued delivery did not come back in 10 s")
	}
}

// deliveredTags publishes n messages, with ids 1 to n, to a queue of the
// test's own on a channel of a connection of its own, and consumes them:
// once they have all been delivered (tags 1 to n), it returns the channel
// and the deliveries that follow.
func deliveredTags(t *testing.T, n int) (*amqp.Channel, <-chan amqp.Delivery) {
	t.Helper()
	ch := RawChannel(t, cmp.Or(os.Getenv("QUEUEY_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/"))
	q, err := ch.QueueDeclare("queuey-test.acker."+rand.Text(), false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if err := ch.PublishWithContext(t.Context(), "", q.Name, false, false, amqp.Publishing{MessageId: strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	deliveries, err := ch.Consume(q.Name, "", false, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		select {
		case d := <-deliveries:
			if d.DeliveryTag != uint64(i) {
				t.Fatalf("delivery %d has tag %d", i, d.DeliveryTag)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d delivered in 10 s", i-1, n)
		}
	}
	return ch, deliveries
}
