package mailbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/queuey-go/queuey/mailbox"
)

func Example() {
	ctx := context.Background()
	mb := mailbox.New[string](2)

	_ = mb.Put(ctx, "job 1")
	_ = mb.Put(ctx, "job 2")
	full, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	fmt.Println("room for job 3:", mb.Put(full, "job 3")) // full: backpressure

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
	// room for job 3: context deadline exceeded
	// job 1
	// job 2
	// mailbox: closed
}
