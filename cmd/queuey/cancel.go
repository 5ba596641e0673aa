package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
)

// defaultCancelTimeout is how long cancel waits, by default, for the
// workers to confirm each cancellation.
const defaultCancelTimeout = 30 * time.Second

// cancelFlags are queuey cancel's flags, once checked.
type cancelFlags struct {
	url, prefix string
	ids         []string
	timeout     time.Duration
}

// cancelJobs is queuey cancel: it cancels each job of -id in turn, and
// prints a line per id on stdout, "cancelled <id>" once every worker of
// the set has confirmed it. One whose workers did not all confirm it
// within -timeout is recorded all the same (each worker applies it as it
// reads the ledger): its line says so, and the status is 1.
func cancelJobs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newNamedCommand("queuey cancel", "queuey cancel -id ID[,ID...] [-prefix P] [-url URL] [-timeout 30s]", stdout, stderr)
	var f cancelFlags
	ids := c.fs.String("id", "", "cancel the jobs of these job ids, comma-separated (required)")
	c.fs.StringVar(&f.url, "url", "", "AMQP URL of the broker (default $QUEUEY_AMQP_URL, else the local broker at 127.0.0.1:5672 as guest)")
	c.fs.StringVar(&f.prefix, "prefix", "", "the queue set's prefix: its workers are told")
	c.fs.DurationVar(&f.timeout, "timeout", defaultCancelTimeout, "how long to wait, for each id, for every worker of the set to confirm it")
	if status, ok := c.parse(args); !ok {
		return status
	}
	if err := f.check(*ids); err != nil {
		return c.usageError(err)
	}

	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	backend, err := rabbitmq.Dial(ctx, f.url, &rabbitmq.Options{ConnectionName: "queuey cli", Logger: logger})
	if err != nil {
		return c.fail(err) // says why (refused credentials, no broker) without the password
	}
	defer backend.Close()
	return f.cancelEach(ctx, c, backend)
}

// check reports a usage error, and fills in the ids and the URL.
func (f *cancelFlags) check(ids string) error {
	if strings.TrimSpace(ids) == "" {
		return errors.New("-id is required")
	}
	for id := range strings.SplitSeq(ids, ",") {
		if id = strings.TrimSpace(id); id != "" && !slices.Contains(f.ids, id) {
			f.ids = append(f.ids, id)
		}
	}
	if len(f.ids) == 0 {
		return fmt.Errorf("-id %q names no job id", ids)
	}
	for _, id := range f.ids {
		if err := queuey.CheckJobID(id); err != nil {
			return fmt.Errorf("-id: %w; nothing was cancelled", err)
		}
	}
	if err := broker.ValidateQueueName(broker.CancelFollowersName(f.prefix)); err != nil {
		return fmt.Errorf("-prefix: %w", err)
	}
	if f.timeout <= 0 {
		return fmt.Errorf("-timeout %v is not positive", f.timeout)
	}
	f.url = cmp.Or(f.url, os.Getenv("QUEUEY_AMQP_URL"), defaultURL)
	return nil
}

// cancelEach cancels f's ids in turn on backend. A cancellation the
// workers did not all confirm goes on to the next id; any other error,
// or an interrupt, stops there, and names the ids not tried.
func (f *cancelFlags) cancelEach(ctx context.Context, c *command, backend broker.Backend) int {
	status := exitOK
	for i, id := range f.ids {
		err := f.cancelOne(ctx, backend, id)
		var ce *queuey.CancelError
		switch {
		case err == nil:
			fmt.Fprintf(c.stdout, "cancelled %s\n", printable(id))
		case errors.As(err, &ce):
			fmt.Fprintf(c.stdout, "recorded %s: its cancellation stands, but only %d of %d workers had confirmed it (%v); the others apply it as they read the ledger\n",
				printable(id), ce.Answered, ce.Workers, ce.Err)
			status = exitError
		default:
			c.fail(fmt.Errorf("cancel %s: %w", id, err))
			f.notTried(c, i+1)
			return exitError
		}
		if ctx.Err() != nil && i+1 < len(f.ids) {
			fmt.Fprintf(c.stderr, "%s: interrupted\n", c.fs.Name())
			f.notTried(c, i+1)
			return exitError
		}
	}
	if status == exitOK {
		f.noteNoFollower(ctx, c, backend)
	}
	return status
}

// cancelOne cancels id, waiting at most f.timeout for the workers.
func (f *cancelFlags) cancelOne(ctx context.Context, backend broker.Backend, id string) error {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	return queuey.CancelJob(ctx, backend, f.prefix, id)
}

// notTried says which ids, from the i-th on, were not tried.
func (f *cancelFlags) notTried(c *command, i int) {
	if i >= len(f.ids) {
		return
	}
	left := make([]string, 0, len(f.ids)-i)
	for _, id := range f.ids[i:] {
		left = append(left, printable(id))
	}
	fmt.Fprintf(c.stderr, "not cancelled (not tried): %s\n", strings.Join(left, ", "))
}

// noteNoFollower tells stderr when no worker of the set follows the
// ledger now: the cancellations stand, and a worker that starts applies
// them before it runs anything, but a -prefix that names no queue set
// would leave them unread.
func (f *cancelFlags) noteNoFollower(ctx context.Context, c *command, backend broker.Backend) {
	ledger, ok := backend.(broker.CancelLedger)
	if !ok {
		return
	}
	if n, err := ledger.CancelFollowers(ctx, f.prefix); err == nil && n == 0 {
		fmt.Fprintf(c.stderr, "(no worker of the queue set %q runs now: each applies the cancellations when it starts; check -prefix if one should)\n", f.prefix)
	}
}
