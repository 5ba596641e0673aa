package mailbox_test

import (
	"context"
	"fmt"

	"github.com/queuey-go/queuey/mailbox"
)

func Example() {
	ctx := context.Background()
	mb := mailbox.New[string](2)

	_ = mb.Put(ctx, "job 1")
	_ = mb.Put(ctx, "job 2")
	fmt.Println("room for job 3:", mb.TryPut("job 3")) // full: backpressure
	_ = mb.PutSystem(ctx, "pause")                     // the system lane has its own room

	mb.Close()
	for {
		msg, err := mb.Get(ctx)
		if err != nil {
			fmt.Println(err)
			break
		}
		fmt.Println(msg)
	}
	// Output:
	// room for job 3: false
	// pause
	// job 1
	// job 2
	// mailbox: closed
}
