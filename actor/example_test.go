package actor_test

import (
	"context"
	"fmt"

	"github.com/queuey-go/queuey/actor"
)

// counterMsg is the one message type of a counter: add, then optionally answer.
type counterMsg struct {
	add   int
	reply actor.Reply[int] // zero for a plain Send
}

func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	total := 0 // owned by the actor: only its Receive touches it
	counter := actor.New("counter", 16, func(_ context.Context, m counterMsg) error {
		total += m.add
		m.reply.Send(total, nil)
		return nil
	})
	done := make(chan error)
	go func() { done <- counter.Run(ctx) }() // normally a supervisor runs it

	for i := 1; i <= 3; i++ {
		_ = counter.Send(ctx, counterMsg{add: i})
	}
	got, err := actor.Ask(ctx, counter, func(r actor.Reply[int]) counterMsg {
		return counterMsg{add: 4, reply: r}
	})
	fmt.Println(got, err)

	counter.Stop()
	fmt.Println(<-done, counter.Send(ctx, counterMsg{add: 1}))
	// Output:
	// 10 <nil>
	// <nil> send to actor counter: actor stopped
}
