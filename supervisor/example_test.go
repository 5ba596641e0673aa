package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/queuey-go/queuey/supervisor"
)

func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	attempts := 0 // each run of the child happens after the previous one ended
	up := make(chan struct{})
	connect := supervisor.Child{
		Name:    "connection",
		Restart: supervisor.Permanent, // restarted whenever it exits
		Run: func(ctx context.Context) error {
			attempts++
			if attempts < 3 {
				return fmt.Errorf("dial attempt %d: connection refused", attempts)
			}
			close(up)
			<-ctx.Done() // serve until the supervisor stops us
			return nil
		},
	}
	sup := supervisor.New(supervisor.Spec{
		Name:       "worker",
		MinBackoff: time.Millisecond,
		Logger:     slog.New(slog.DiscardHandler), // restarts are logged at WARN
	}, connect)

	done := make(chan error)
	go func() { done <- sup.Run(ctx) }()
	<-up
	cancel()
	fmt.Println("connected after", attempts, "attempts; Run returned", <-done)
	// Output: connected after 3 attempts; Run returned <nil>
}

func Example_escalation() {
	errRefused := errors.New("connection refused")
	sup := supervisor.New(supervisor.Spec{
		Name:       "worker",
		Intensity:  2,
		MinBackoff: time.Millisecond, // short backoff, for the example
		Logger:     slog.New(slog.DiscardHandler),
	}, supervisor.Child{
		Name:    "queue:emails",
		Run:     func(context.Context) error { return errRefused },
		Restart: supervisor.Permanent,
	})

	err := sup.Run(context.Background()) // returns although ctx never ends
	fmt.Println(err)
	fmt.Println(errors.Is(err, errRefused))
	// Output:
	// supervisor worker: child queue:emails restarted 3 times in 10s, giving up: connection refused
	// true
}
