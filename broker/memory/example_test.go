package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
)

// A message held for 30 s waits in the queue's 30 s hold queue, invisible to
// consumers, and lands on its work queue when a mock clock reaches the TTL.
func ExampleBackend_Hold() {
	mock := clock.NewMock()
	b := memory.New(&memory.Options{Clock: mock})
	defer b.Close()
	ctx := context.Background()

	q := broker.QueueName("myapp", "emails")
	if err := b.Declare(ctx, broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		fmt.Println(err)
		return
	}
	msg := broker.Message{Queue: q, ID: "welcome-42", Type: "send_email", Priority: 10, Body: []byte(`{}`)}
	if err := b.Hold(ctx, msg, 30*time.Second); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held:", b.HoldQueues(q), "pending:", b.Pending(q))

	mock.Add(30*time.Second - time.Millisecond)
	fmt.Println("at 29.999s: held", b.Held(q), "pending", b.Pending(q))

	mock.Add(time.Millisecond)
	fmt.Println("at 30s: held", b.Held(q), "pending", b.Pending(q))

	c, err := b.Consume(ctx, q, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Cancel()
	d := <-c.Deliveries()
	fmt.Println("delivered:", d.Message().ID, "at priority", d.Message().Priority)
	if err := d.Ack(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// held: map[myapp.emails.deferred.30000:1] pending: 0
	// at 29.999s: held 1 pending 0
	// at 30s: held 0 pending 1
	// delivered: welcome-42 at priority 10
}
