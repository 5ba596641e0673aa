// Command chaosworker is the worker process of the fault-injection suite
// (package chaos): a queuey Worker on RabbitMQ that runs chaos.Job and
// appends a record of every run to a ledger, so that a test can kill it for
// real (SIGKILL, os.Exit in a handler) and still score what it did.
//
//	chaosworker -prefix P -ledger FILE [-prefetch 4] [-concurrency N] [-poison-after N]
//	            [-shutdown-timeout 10s] [-conn-name NAME] [-heartbeat 0] [-schedule-every 0]
//
// The broker is $QUEUEY_AMQP_URL, else the local one as guest; the URL is
// never a flag, so that a password stays out of the process list. Logs go
// to stderr as JSON lines. SIGTERM or SIGINT stops it gracefully (Run's
// graceful stop); then it closes the backend and writes an exit record with
// its goroutine counts. Exit status: 0 after a graceful stop, 1 when a job
// crashed it, 2 for a usage error, 3 when Run failed.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/chaos"
	"github.com/queuey-go/queuey/clocktest"
)

func main() { os.Exit(run()) }

func run() int {
	prefix := flag.String("prefix", "", "queue-name prefix of the run (required)")
	ledgerPath := flag.String("ledger", "", "file the run records are appended to (required)")
	prefetch := flag.Int("prefetch", 4, "prefetch of the work queue")
	concurrency := flag.Int("concurrency", 0, "handlers at once (default: the prefetch)")
	poisonAfter := flag.Int("poison-after", 0, "WorkerConfig.PoisonAfter")
	shutdown := flag.Duration("shutdown-timeout", 10*time.Second, "WorkerConfig.ShutdownTimeout: the grace period")
	connName := flag.String("conn-name", "", "connection name shown by rabbitmqctl list_connections")
	heartbeat := flag.Duration("heartbeat", 0, "rabbitmq.Options.Heartbeat (default the library's)")
	every := flag.Duration("schedule-every", 0, "when set, the worker is also a candidate to lead the schedule \"chaos\", which enqueues a chaos.Job at this interval")
	skew := flag.Duration("clock-skew", 0, "how far ahead of the host's clock (behind when negative) the worker's clock reads, as on a host whose clock is off")
	flag.Parse()
	if *prefix == "" || *ledgerPath == "" {
		fmt.Fprintln(os.Stderr, "chaosworker: -prefix and -ledger are required")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	base := runtime.NumGoroutine()

	ledger, err := chaos.OpenLedger(*ledgerPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		return 2
	}
	defer ledger.Close()
	connLog := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	jobLog := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	url := cmp.Or(os.Getenv("QUEUEY_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	backend, err := rabbitmq.Dial(dialCtx, url, &rabbitmq.Options{
		ConnectionName: *connName,
		Heartbeat:      *heartbeat,
		ReconnectMin:   50 * time.Millisecond,
		ReconnectMax:   time.Second,
		Logger:         connLog,
	})
	cancel()
	if err != nil {
		connLog.Error("dial failed", "error", err)
		return 3
	}

	hooks := &queuey.Hooks{Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		id, attempt := d.Job.JobID, d.Job.Attempt
		return ctx, func(o queuey.Outcome) {
			r := chaos.Record{Ev: chaos.EvSettled, ID: id, Attempt: attempt, Result: string(o.Result), Ran: o.Ran}
			if o.SettleErr != nil {
				r.SettleErr = o.SettleErr.Error()
			}
			ledger.Write(r)
		}
	}}
	worker, err := queuey.NewWorker(backend, chaos.QueueSet(*prefix, *prefetch), &queuey.WorkerConfig{
		Concurrency:     *concurrency,
		ShutdownTimeout: *shutdown,
		PoisonAfter:     *poisonAfter,
		Hooks:           hooks,
		Logger:          jobLog,
		Clock:           clocktest.Skewed(clock.New(), *skew),
	})
	if err == nil {
		err = queuey.Handle(worker, func(ctx context.Context, j chaos.Job, jc queuey.JobContext) error {
			return handle(ctx, ledger, j, jc)
		})
	}
	if err == nil && *every > 0 {
		err = worker.AddSchedule(queuey.Schedule{Name: "chaos", Job: chaos.Job{Seq: -1}, Every: *every})
	}
	if err != nil {
		connLog.Error("worker setup failed", "error", err)
		_ = backend.Close()
		return 3
	}

	runErr := worker.Run(ctx)
	stoppedAt := time.Now()
	_ = backend.Close()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // goroutines that were told to end are ending
	}
	exit := chaos.Record{Ev: chaos.EvExit, StoppedAt: stoppedAt.UnixNano(), BaseGoroutines: base, Goroutines: runtime.NumGoroutine(), SettleFailures: worker.SettleFailures()}
	if runErr != nil {
		exit.RunErr = runErr.Error()
	}
	ledger.Write(exit)
	if runErr != nil {
		connLog.Error("worker run failed", "error", runErr)
		return 3
	}
	return 0
}

// handle runs one chaos.Job: it records the start, works, maybe fails or
// crashes, and records the return.
func handle(ctx context.Context, ledger *chaos.Ledger, j chaos.Job, jc queuey.JobContext) error {
	ledger.Write(chaos.Record{Ev: chaos.EvStart, ID: jc.JobID, Seq: j.Seq, Attempt: jc.Attempt, Redelivered: jc.Redelivered, NotBefore: j.NotBefore,
		EnqueuedAt: jc.EnqueuedAt.UnixMilli()})
	if j.Crash {
		os.Exit(1) // a poison job: the process dies with its deliveries unsettled
	}
	work := time.Duration(j.WorkMs) * time.Millisecond
	if j.SlowFirstMs > 0 && !jc.Redelivered {
		work = time.Duration(j.SlowFirstMs) * time.Millisecond
	}
	var err error
	if work > 0 {
		t := time.NewTimer(work)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			err = ctx.Err()
		}
	}
	switch {
	case err != nil:
	case j.Fail:
		err = errors.New("chaos: every attempt fails")
	case j.FailOnce && jc.Attempt == 1:
		err = errors.New("chaos: the first attempt fails")
	}
	done := chaos.Record{Ev: chaos.EvDone, ID: jc.JobID, Seq: j.Seq, Attempt: jc.Attempt}
	if err != nil {
		done.Err = err.Error()
	}
	ledger.Write(done)
	return err
}
