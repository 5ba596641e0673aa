// Command rabbitmq runs the quick-start tour (the same as examples/quickstart)
// on a RabbitMQ broker: a job that succeeds, one that succeeds on its second
// attempt, one that fails fatally into the dead letters, and a call to a
// rate-limited API that answers 429 and is deferred, then overtakes the
// backlog queued behind it, its wait held by the broker in a hold queue.
//
//	go run ./examples/rabbitmq [-url amqp://user:pass@host:5672/] [-prefix p] [-keep]
//
// The URL is -url, else $QUEUEY_AMQP_URL, else the local broker as guest.
// Each run uses queues of its own ("quickstart-<random>.jobs", ...), so runs
// never collide, and deletes them at the end unless -keep is given.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/examples/internal/scratch"
	"github.com/queuey-go/queuey/examples/internal/tour"
)

const defaultURL = "amqp://guest:guest@127.0.0.1:5672/"

type options struct {
	url    string
	prefix string
	keep   bool // leave the queues on the broker
}

func main() {
	var o options
	// The URL's flag has no default value: flag's -help would print it,
	// and a URL from the environment may carry a real password.
	flag.StringVar(&o.url, "url", "", "AMQP URL of the broker (default $QUEUEY_AMQP_URL, else the local broker at 127.0.0.1:5672 as guest)")
	flag.StringVar(&o.prefix, "prefix", "", `queue-name prefix (default "quickstart-" and random hex, unique per run)`)
	flag.BoolVar(&o.keep, "keep", false, "keep the queues the tour made rather than deleting them")
	flag.Parse()
	o.url = cmp.Or(o.url, os.Getenv("QUEUEY_AMQP_URL"), defaultURL)
	o.prefix = cmp.Or(o.prefix, scratch.Prefix("quickstart"))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	_, err := run(ctx, o, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rabbitmq example:", err)
		os.Exit(1)
	}
}

// run connects, tours queuey, printing to out, then deletes the queues the
// tour made (unless o.keep), also when the tour failed part-way. It returns
// those queues.
func run(ctx context.Context, o options, out io.Writer) (made []string, err error) {
	fmt.Fprintf(out, "connecting to %s, queue prefix %q\n", rabbitmq.Redact(o.url), o.prefix)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	backend, err := rabbitmq.Dial(ctx, o.url, &rabbitmq.Options{ConnectionName: "queuey quickstart", Logger: logger})
	if err != nil {
		return nil, err // it says how to start a broker when none answers
	}
	defer backend.Close()
	// A second connection, in plain amqp091, for what the queuey backend
	// does not offer: counting a queue's messages and deleting queues.
	admin, err := amqp.Dial(o.url)
	if err != nil {
		return nil, fmt.Errorf("admin connection to %s: %w", rabbitmq.Redact(o.url), err)
	}
	defer admin.Close()

	made, err = tour.Run(ctx, backend, tour.Config{Prefix: o.prefix, Pending: pendingOn(admin)}, out)
	fmt.Fprintf(out, "queues made: %s\n", strings.Join(made, ", "))
	if o.keep {
		fmt.Fprintln(out, "kept them (-keep): hold queues expire by themselves, delete the rest with `rabbitmqctl delete_queue <name>`")
		return made, err
	}
	if derr := scratch.DeleteQueues(admin, made); derr != nil {
		return made, errors.Join(err, derr)
	}
	fmt.Fprintf(out, "deleted them\n")
	return made, err
}

// pendingOn counts a queue's ready messages with a passive declare. Each
// count has a channel of its own, because a failed passive declare (no such
// queue) closes its channel.
func pendingOn(conn *amqp.Connection) func(queue string) (int, error) {
	return func(queue string) (int, error) {
		ch, err := conn.Channel()
		if err != nil {
			return 0, err
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		return q.Messages, err
	}
}
