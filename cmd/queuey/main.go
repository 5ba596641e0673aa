// Command queuey inspects and replays the dead letters of a queuey queue on
// RabbitMQ, cancels jobs (queuey cancel) and serves the operator's console
// (queuey web).
//
//	queuey dead list   -queue NAME [-prefix P] [-json]
//	queuey dead show   -queue NAME [-prefix P] -id JOBID
//	queuey dead replay -queue NAME [-prefix P] (-id ID[,ID...] | -kind KIND | -all) [-after 30s] [-yes]
//	queuey cancel      -id ID[,ID...] [-prefix P] [-timeout 30s]
//
// Every command also takes -url; the broker is -url, else
// $QUEUEY_AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/. Its password is
// never printed.
//
// The queue is <prefix>.<name>, its dead letters <prefix>.<name>.dead. A
// queue that does not exist is an error, and is not created. One that
// exists is declared as the broker has it, because a replay publishes
// into it: its type (classic or quorum), max priority, message TTL and
// durability are read from RabbitMQ's management API (-management,
// default http://127.0.0.1:15672, with the AMQP URL's credentials).
// Without the API (-management off, or one that cannot be read) AMQP
// tells only that the queue exists, and the flags -type, -max-priority
// (0, the default, means the library's default of 10; -1 a queue without
// priorities), -transient and -message-ttl say the rest; given with the
// API, they override what it tells. A queue declared otherwise is refused
// with PRECONDITION_FAILED, nothing is changed, and the error names the
// flag that fixes it.
//
// -queue names the work queue, never its dead-letter or hold queues.
//
// Listing (and showing) takes the dead letters off their queue for a
// moment and puts them all back, in order; a list shows the first 65,535
// and says when there are more. A replay republishes the selected ones
// with their attempts reset to 1, now or after -after, and removes each
// from the dead letters once its republish is confirmed; -all goes past
// the first 65,535. Unless -yes is given it first says how many it would
// replay and asks. Ctrl-C stops a replay after the dead letter it is
// moving (a second one ends the process at once).
//
// Output: stdout carries what a user may pipe or keep, and nothing else:
// a list (its table and count, or its JSON lines), a dead letter shown,
// cancel's line per id, the usage asked for with -h. Everything else
// goes to stderr, in the order it happens: a replay's count, its
// question, its progress and what it replayed (or that it replayed
// nothing), notices (a list cut short, malformed dead letters, no worker
// to tell of a cancellation), the broker's warnings, errors and the usage
// after a usage error. So a replay writes to stderr only, and
// "queuey dead list -json > dead.jsonl" still says on the terminal when
// the list was cut short.
//
// queuey cancel cancels the jobs of the queue set -prefix whose ids -id
// names (queuey.CancelJob), one after the other: a job that has not run
// never does, and a running one is told through its ctx. It prints a line
// per id on stdout: "cancelled <id>" once every worker of the set has
// confirmed it, or, when some had not within -timeout, that the
// cancellation is recorded (the workers apply it as they read the
// ledger) and how many had confirmed it; the status is then 1. An id that
// cannot be a job's is a usage error, and then no id is cancelled. With
// no worker running it returns at once: a worker that starts applies the
// cancellations before it runs anything.
//
// Exit status: 0 done, 1 a runtime error (the broker, a refused
// declaration, a job id that is not there, a cancellation not every
// worker confirmed), 2 a usage error.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const defaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal asks the command to wind up (a replay finishes the
	// dead letter it is moving); a second one ends the process at once.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const topUsage = `usage: queuey dead <list|show|replay> [flags]
       queuey cancel -id ID[,ID...] [flags]
       queuey web [-demo] [flags]

  queuey dead list   -queue NAME [-prefix P] [-json]
  queuey dead show   -queue NAME [-prefix P] -id JOBID
  queuey dead replay -queue NAME [-prefix P] (-id ID[,ID...] | -kind KIND | -all) [-after 30s] [-yes]
  queuey cancel      -id ID[,ID...] [-prefix P] [-timeout 30s]

Each queue's declaration (type, priorities, TTL, durability) is read
from RabbitMQ's management API (-management); without it, or to
override it: -type, -max-priority, -transient, -message-ttl.

Lists (text or -json), a dead letter shown and -h's usage go to stdout;
everything else (a replay's question, progress and result, notices,
errors) to stderr, in order.

cancel prints a line per id to stdout: "cancelled <id>", or that the
cancellation is recorded but not every worker had confirmed it (exit 1).

Run "queuey dead <command> -h" or "queuey cancel -h" for a command's flags.
`

// run is the whole command: it parses args (without the program name),
// talks to the broker, reads answers from stdin and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, topUsage)
		return exitOK
	case "dead":
	case "web":
		return web(ctx, args[1:], stdout, stderr)
	case "cancel":
		return cancelJobs(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "queuey: unknown command %q\n\n%s", args[0], topUsage)
		return exitUsage
	}
	if len(args) < 2 {
		fmt.Fprint(stderr, topUsage)
		return exitUsage
	}
	sub, rest := args[1], args[2:]
	switch sub {
	case "list":
		return deadList(ctx, rest, stdout, stderr)
	case "show":
		return deadShow(ctx, rest, stdout, stderr)
	case "replay":
		return deadReplay(ctx, rest, stdin, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, topUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "queuey dead: unknown command %q\n\n%s", sub, topUsage)
		return exitUsage
	}
}
