package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

// awaitFirst waits for job id's first outcome and returns all it has had.
func awaitFirst(t *testing.T, seen *clocktest.Outcomes, id string) []queuey.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got, err := seen.Await(ctx, id, 1)
	if err != nil {
		t.Fatalf("job %s had no outcome: %v", id, err)
	}
	return got
}

// runWorker runs a worker of set on backend, whose handler succeeds, until
// the test ends.
func runWorker(t *testing.T, backend broker.Backend, set queuey.QueueSet, cfg *queuey.WorkerConfig) {
	t.Helper()
	cfg.Logger = quiet
	w, err := queuey.NewWorker(backend, set, cfg)
	must(t, err)
	must(t, queuey.Handle(w, func(context.Context, jobA, queuey.JobContext) error { return nil }))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
}

// cancelOn runs queuey cancel's cancellations on backend (the command
// dials RabbitMQ; its flags are checked as it checks them).
func cancelOn(t *testing.T, backend broker.Backend, prefix, ids string, timeout time.Duration) result {
	t.Helper()
	var stdout, stderr strings.Builder
	c := newNamedCommand("queuey cancel", "queuey cancel", &stdout, &stderr)
	f := cancelFlags{prefix: prefix, timeout: timeout}
	must(t, f.check(ids))
	code := f.cancelEach(t.Context(), c, backend)
	r := result{code, stdout.String(), stderr.String()}
	t.Logf("cancel %s\nexit %d\nstdout:\n%s\nstderr:\n%s", ids, r.code, r.stdout, r.stderr)
	return r
}

func TestCancelUsageErrorsExit2(t *testing.T) {
	nobody := []string{"-url", "amqp://nobody:secret@127.0.0.1:1/"} // never dialled: nothing is recorded
	long := strings.Repeat("x", queuey.MaxJobIDBytes+1)
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"cancel without -id", []string{"cancel"}, "-id is required"},
		{"an empty id list", []string{"cancel", "-id", " , ,"}, "names no job id"},
		{"an id too long", []string{"cancel", "-id", "ok-1," + long}, "is 256 bytes, over the 255-byte limit; nothing was cancelled"},
		{"an id with a control character", []string{"cancel", "-id", "ok-1,bad\x1b[2Jid"}, `job id "bad\x1b[2Jid" holds the control character U+001B; nothing was cancelled`},
		{"an id of invalid UTF-8", []string{"cancel", "-id", "bad\xffid"}, `job id "bad\xffid" is not valid UTF-8`},
		{"a reserved prefix", []string{"cancel", "-id", "a", "-prefix", "amq"}, `"amq." prefix is reserved`},
		{"a timeout of zero", []string{"cancel", "-id", "a", "-timeout", "0s"}, "-timeout 0s is not positive"},
		{"a timeout that is not a duration", []string{"cancel", "-id", "a", "-timeout", "soon"}, `invalid value "soon" for flag -timeout`},
		{"a stray argument", []string{"cancel", "-id", "a", "extra"}, `unexpected argument "extra"`},
		{"an unknown flag", []string{"cancel", "-queue", "q"}, "flag provided but not defined: -queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, "", append(tc.args, nobody...)...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want 2", r.code)
			}
			if !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "usage: queuey cancel") {
				t.Errorf("stderr: got %q, want %q and the usage", r.stderr, tc.want)
			}
			if strings.Contains(r.stderr, "\x1b") || strings.Contains(r.stderr, "\xff") { // bytes, not runes
				t.Errorf("stderr carries the id's bytes raw: %q", r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout: got %q, want nothing: no id was cancelled", r.stdout)
			}
		})
	}
}

func TestCancelHelpExits0(t *testing.T) {
	r := cli(t, "", "cancel", "-h")
	if r.code != exitOK || !strings.Contains(r.stdout, "usage: queuey cancel -id ID[,ID...]") || !strings.Contains(r.stdout, "-timeout") {
		t.Errorf("cancel -h: exit %d, stdout %q; want 0 and its usage", r.code, r.stdout)
	}
	if r := cli(t, "", "help"); !strings.Contains(r.stdout, "queuey cancel -id ID[,ID...]") {
		t.Errorf("help: stdout %q does not name queuey cancel", r.stdout)
	}
}

// On the memory backend, with a worker of the set running: a job that
// waits an hour is cancelled ("cancelled <id>", status 0), and when its
// hour is up it ends as Cancelled, unrun.
func TestCancelPrintsCancelledOnceTheWorkersConfirm(t *testing.T) {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	backend := memory.New(&memory.Options{Clock: mock})
	t.Cleanup(func() { _ = backend.Close() })
	set := queuey.QueueSet{Prefix: "cli", Queues: []queuey.Queue{jobs}}
	seen := new(clocktest.Outcomes)
	runWorker(t, backend, set, &queuey.WorkerConfig{Clock: mock, Hooks: seen.Hooks()})
	p, err := queuey.NewProducer(t.Context(), backend, set, &queuey.ProducerConfig{Clock: mock})
	must(t, err)
	// A job run first: the worker has read the ledger, and follows it.
	first, err := p.Enqueue(t.Context(), jobA{N: 1})
	must(t, err)
	awaitFirst(t, seen, first)
	later, err := p.EnqueueAfter(t.Context(), jobA{N: 2}, time.Hour)
	must(t, err)

	r := cancelOn(t, backend, set.Prefix, later, time.Minute)
	if r.code != exitOK || r.stdout != "cancelled "+later+"\n" || r.stderr != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0, \"cancelled %s\" and nothing on stderr", r.code, r.stdout, r.stderr, later)
	}
	mock.Add(2 * time.Hour)
	if got := awaitFirst(t, seen, later); len(got) != 1 || got[0] != queuey.Cancelled {
		t.Errorf("the cancelled job's outcomes: %v, want [cancelled]", got)
	}
}

// A worker that follows the ledger and never answers: each cancellation
// is recorded, its line says that 0 of 1 workers had confirmed it, the
// next id is cancelled all the same, and the status is 1.
func TestCancelUnconfirmedSaysItIsRecorded(t *testing.T) {
	backend := memory.New(nil)
	t.Cleanup(func() { _ = backend.Close() })
	silent, err := backend.FollowCancels(t.Context(), "cli")
	must(t, err)
	defer silent.Close()

	r := cancelOn(t, backend, "cli", "job-1,job-2", 100*time.Millisecond)
	want := "recorded job-1: its cancellation stands, but only 0 of 1 workers had confirmed it (context deadline exceeded); the others apply it as they read the ledger\n" +
		"recorded job-2: its cancellation stands, but only 0 of 1 workers had confirmed it (context deadline exceeded); the others apply it as they read the ledger\n"
	if r.code != exitError || r.stdout != want {
		t.Errorf("exit %d, stdout %q; want 1 and %q", r.code, r.stdout, want)
	}
	for _, id := range []string{"job-1", "job-2"} {
		if !recorded(t, silent, id) {
			t.Errorf("the ledger has no cancellation of %s", id)
		}
	}
}

// recorded reads the ledger's records that l holds now and reports
// whether one names id.
func recorded(t *testing.T, l broker.Listener, id string) bool {
	t.Helper()
	for {
		select {
		case body := <-l.Messages():
			if strings.Contains(string(body), `"job_id":"`+id+`"`) {
				return true
			}
		default:
			return false
		}
	}
}

// A backend that keeps no ledger: the first id fails, on stderr, which
// names the ids not tried; stdout has nothing, and the status is 1.
func TestCancelOnABackendWithoutALedgerFails(t *testing.T) {
	backend := memory.New(nil)
	t.Cleanup(func() { _ = backend.Close() })
	r := cancelOn(t, struct{ broker.Backend }{backend}, "cli", "job-1,job-2", time.Minute)
	if r.code != exitError || r.stdout != "" {
		t.Errorf("exit %d, stdout %q; want 1 and nothing", r.code, r.stdout)
	}
	for _, want := range []string{"queuey cancel: cancel job-1: ", "keeps no ledger of cancellations", "not cancelled (not tried): job-2\n"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q lacks %q", r.stderr, want)
		}
	}
}

// On RabbitMQ. With no worker of the set: the command returns at once
// (there is nobody to wait for), says so on stderr, and prints
// "cancelled". With one running: it prints "cancelled" once the worker
// has confirmed it.
func TestCancelOnRabbitMQ(t *testing.T) {
	f := newFixture(t, jobs, time.Hour)
	backend := f.dial(t)
	defer backend.Close()
	if _, ok := any(backend).(broker.CancelLedger); !ok {
		t.Skip("the RabbitMQ backend keeps no ledger of cancellations (it is not a broker.CancelLedger) yet: queuey cancel cannot cancel there")
	}
	args := func(id string) []string {
		return []string{"cancel", "-url", f.url, "-prefix", f.set.Prefix, "-id", id, "-timeout", "1m"}
	}

	t.Run("no worker", func(t *testing.T) {
		id := "no-such-job-" + randomHex()
		start := time.Now()
		r := cli(t, "", args(id)...)
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("took %v with no worker to wait for, want at once", took)
		}
		if r.code != exitOK || r.stdout != "cancelled "+id+"\n" || !strings.Contains(r.stderr, "no worker of the queue set") {
			t.Errorf("exit %d, stdout %q, stderr %q; want 0, cancelled and a note that no worker runs", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("a worker running", func(t *testing.T) {
		seen := new(clocktest.Outcomes)
		runWorker(t, backend, f.set, &queuey.WorkerConfig{Hooks: seen.Hooks()})
		p, err := queuey.NewProducer(t.Context(), backend, f.set, nil)
		must(t, err)
		first, err := p.Enqueue(t.Context(), jobA{N: 1}) // run: the worker follows the ledger
		must(t, err)
		awaitFirst(t, seen, first)
		later, err := p.EnqueueAfter(t.Context(), jobA{N: 2}, time.Hour)
		must(t, err)
		r := cli(t, "", args(later)...)
		if r.code != exitOK || r.stdout != "cancelled "+later+"\n" {
			t.Errorf("exit %d, stdout %q; want 0 and \"cancelled %s\"", r.code, r.stdout, later)
		}
	})
}
