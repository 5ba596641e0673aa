package rabbitmq_test

import (
	"testing"
	"time"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// A laned consumer that starts while jobs wait in both its lane and its
// work queue hands out the lane's first. Each round starts a consumer
// afresh, as a pause's end or a restart does: the moment when which of
// the two queues' first delivery reached the laned consumer first was
// left to the scheduling of goroutines. Not parallel: under the load of
// the parallel tests a backlog job went first in one run of many; the
// lane's lead at a start is one of time (ARCHITECTURE.md, the lane).
func TestALanedConsumerStartsWithItsLane(t *testing.T) {
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	q := unique("lanefirst") + ".work"
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, Durable: true, Type: broker.Quorum, MaxPriority: 10}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rabbittest.DeleteQueues(t, q, broker.DeadQueueName(q), broker.LaneQueueName(q)) })
	publish := func(priority uint8) string {
		t.Helper()
		msg := broker.Message{Queue: q, ID: broker.NewJobID(), Type: "t", Attempt: 1, Priority: priority, Body: []byte(`{}`)}
		if err := b.Publish(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
		return msg.ID
	}
	for range 4 {
		publish(0) // the backlog
	}
	const rounds = 20
	late := 0
	for range rounds {
		lane := publish(10) // back from a wait: into the lane
		c, err := b.Consume(t.Context(), q, 1)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-c.Deliveries():
			if d.Message().ID != lane {
				late++
				publish(0) // the backlog job taken stays taken: another in its place
			}
			if err := d.Ack(t.Context()); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery within 10 s")
		}
		c.Cancel()
	}
	if late > 0 {
		t.Errorf("in %d of %d starts a backlog job was handed out before the job in the lane", late, rounds)
	}
}
