package inspect_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/inspect"
)

type welcome struct {
	To string `json:"to"`
}

func (welcome) Kind() string        { return "welcome" }
func (welcome) Queue() queuey.Queue { return queuey.Queue{Name: "emails"} }

// On RabbitMQ, give For the management API (&inspect.Management{URL:
// "http://127.0.0.1:15672", User: "guest", Password: "guest"}) to see
// unacked messages, consumers and hold queues; without it, a look sees
// only ready counts.
func ExampleFor() {
	ctx := context.Background()
	backend := memory.New(nil)
	defer backend.Close()
	set := queuey.QueueSet{Prefix: "app", Queues: []queuey.Queue{{Name: "emails"}}}
	producer, err := queuey.NewProducer(ctx, backend, set, nil)
	if err != nil {
		panic(err)
	}
	for _, to := range []string{"ann@example.com", "bob@example.com"} {
		if _, err := producer.Enqueue(ctx, welcome{To: to}); err != nil {
			panic(err)
		}
	}

	snap, err := inspect.For(backend, nil).Inspect(ctx, inspect.Names(set))
	if err != nil {
		panic(err)
	}
	for _, d := range snap.Depths(set) {
		fmt.Printf("%s: %d ready, %d unacked, %d held, %d dead (%d broker requests)\n",
			d.BrokerName, d.Ready, d.Unacked, d.Held, d.Dead, snap.Requests)
	}
	// Output: app.emails: 2 ready, 0 unacked, 0 held, 0 dead (0 broker requests)
}

// A queue's declaration, as the management API tells it
// (Management.Declaration), is the queuey.Queue to declare it as again:
// here a classic queue with 5 priorities and a TTL of a minute.
func ExampleDeclaration_Queue() {
	d := inspect.Declaration{Name: "app.emails", Type: "classic", Durable: true,
		Arguments: map[string]any{"x-max-priority": json.Number("5"), "x-message-ttl": json.Number("60000")}}
	q, err := d.Queue("emails")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %v, max priority %d, TTL %v, transient %v\n", q.Name, q.Type, q.MaxPriority, q.MessageTTL, q.Transient)
	// Output: emails: classic, max priority 5, TTL 1m0s, transient false
}
