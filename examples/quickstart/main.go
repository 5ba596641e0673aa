// Command quickstart tours queuey on the in-memory backend, with no broker to
// run: a job that succeeds, one that succeeds on its second attempt, one that
// fails fatally into the dead letters, and a call to a rate-limited API that
// answers 429 and is deferred, then overtakes the backlog queued behind it.
//
//	go run ./examples/quickstart
//
// It uses the real clock and short delays, so the tour takes about two
// seconds. The tour goes to stdout; the library's warnings and errors (a
// retry, a fatal failure) go to stderr. examples/rabbitmq runs the same tour
// (examples/internal/tour) on a real broker.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/examples/internal/tour"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run tours queuey, printing to out, and returns once the worker has
// stopped: after the last expected run, or early when ctx ends.
func run(ctx context.Context, out io.Writer) error {
	// The memory backend counts pending messages and acks itself, so the
	// tour needs no more configuration than the queue-name prefix.
	backend := memory.New(nil)
	defer backend.Close()
	_, err := tour.Run(ctx, backend, tour.Config{Prefix: "quickstart"}, out)
	return err
}
