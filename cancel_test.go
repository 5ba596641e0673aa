package queuey_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

// A job that deferred itself for 30 s and is cancelled at 10 s never runs
// again: when it comes back from its hold, at 30 s, it ends as Cancelled,
// unrun, and nothing is left of it.
func TestCancelADeferredJobWhileItWaits(t *testing.T) {
	var seen clocktest.Outcomes
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: seen.Hooks()}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{deferring(1, 30*time.Second)}))
		h.Advance(10 * time.Second)
		must(t, h.Producer.Cancel(t.Context(), id))
		h.Advance(time.Hour)
		if runs := h.Log.Of(id); len(runs) != 1 {
			t.Fatalf("the job ran %d times, want once (before it deferred)", len(runs))
		}
		want := []queuey.Result{queuey.Deferred, queuey.Cancelled}
		if got := seen.Of(id); !equalResults(got, want) {
			t.Fatalf("outcomes %v, want %v", got, want)
		}
		q := broker.QueueName(app.Prefix, alpha.Name)
		if n := h.Backend.Pending(q) + h.Backend.Held(q) + h.Backend.InFlight(q) + len(h.Backend.DeadLetters(q)); n != 0 {
			t.Fatalf("%d messages left behind", n)
		}
	})
}

// A job enqueued to run in an hour and a job ready in a paused queue are
// cancelled before they run: neither ever does.
func TestCancelJobsThatHaveNotRunYet(t *testing.T) {
	var seen clocktest.Outcomes
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: seen.Hooks()}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		later := mustID(t)(h.Producer.EnqueueAfter(t.Context(), alphaJob{named("later")}, time.Hour))
		h.Start()
		must(t, h.Worker.Pause(t.Context(), beta.Name, h.Clock.Now().Add(time.Minute)))
		ready := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("ready")}))
		h.Idle()
		for _, id := range []string{later, ready} {
			must(t, h.Producer.Cancel(t.Context(), id))
		}
		h.Advance(2 * time.Hour)
		for _, id := range []string{later, ready} {
			if runs := h.Log.Of(id); len(runs) != 0 {
				t.Errorf("job %s ran %d times after it was cancelled", id, len(runs))
			}
			if got := seen.Of(id); !equalResults(got, []queuey.Result{queuey.Cancelled}) {
				t.Errorf("job %s: outcomes %v, want [cancelled]", id, got)
			}
		}
	})
}

// A job cancelled before any worker runs (nobody follows the ledger yet)
// is cancelled all the same: the worker reads the ledger before it starts
// anything.
func TestCancelBeforeAnyWorkerRuns(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("early")}))
		other := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("kept")}))
		must(t, h.Producer.Cancel(t.Context(), id))
		h.Advance(time.Second)
		if runs := h.Log.Of(id); len(runs) != 0 {
			t.Fatalf("the cancelled job ran %d times", len(runs))
		}
		if runs := h.Log.Of(other); len(runs) != 1 {
			t.Fatalf("the other job ran %d times, want once", len(runs))
		}
	})
}

// A running job is told through its ctx, whose cause is ErrJobCancelled;
// its handler returns the ctx's error, and the job ends as Cancelled, not
// retried. Cancel has returned by then.
func TestCancelARunningJobTellsItsCtx(t *testing.T) {
	var seen clocktest.Outcomes
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: seen.Hooks()}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		started, cause := make(chan struct{}), make(chan error, 1)
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, _ alphaJob, _ queuey.JobContext) error {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		}))
		id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("long")}))
		h.Start()
		<-started
		must(t, h.Producer.Cancel(t.Context(), id))
		if err := <-cause; !errors.Is(err, queuey.ErrJobCancelled) {
			t.Fatalf("the handler's ctx ended with %v, want ErrJobCancelled", err)
		}
		h.Advance(time.Minute)
		if got := seen.Of(id); !equalResults(got, []queuey.Result{queuey.Cancelled}) {
			t.Fatalf("outcomes %v, want [cancelled]", got)
		}
	})
}

// A handler told of its cancellation that finishes its job all the same
// has succeeded.
func TestCancelledJobThatFinishesSucceeds(t *testing.T) {
	var seen clocktest.Outcomes
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: seen.Hooks()}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		started := make(chan struct{})
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, _ alphaJob, _ queuey.JobContext) error {
			close(started)
			<-ctx.Done()
			return nil
		}))
		id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("stubborn")}))
		h.Start()
		<-started
		must(t, h.Producer.Cancel(t.Context(), id))
		h.Advance(time.Second)
		if got := seen.Of(id); !equalResults(got, []queuey.Result{queuey.Succeeded}) {
			t.Fatalf("outcomes %v, want [succeeded]", got)
		}
	})
}

// Cancel waits for every follower of the ledger; one that never answers
// leaves it with a *CancelError once its ctx ends, the cancellation
// recorded all the same.
func TestCancelWithAFollowerThatDoesNotAnswer(t *testing.T) {
	b := memory.New(nil)
	defer b.Close()
	p, err := queuey.NewProducer(t.Context(), b, app, nil)
	must(t, err)
	silent, err := b.FollowCancels(t.Context(), app.Prefix)
	must(t, err)
	defer silent.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err = p.Cancel(ctx, "job-1")
	ce, ok := errors.AsType[*queuey.CancelError](err)
	if !ok || !errors.Is(err, queuey.ErrCancelUnconfirmed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a *CancelError that is ErrCancelUnconfirmed and DeadlineExceeded", err)
	}
	if ce.JobID != "job-1" || ce.Answered != 0 || ce.Workers != 1 {
		t.Fatalf("got %+v, want job-1, 0 of 1 answered", ce)
	}
	if rec := readRecord(t, silent); rec["op"] != "cancel" || rec["job_id"] != "job-1" {
		t.Fatalf("the ledger holds %v, want job-1's cancellation", rec)
	}
}

// A cancelled job that arrived is forgotten: the worker that ended it
// records so in the ledger.
func TestCancelledJobIsForgottenOnceItArrives(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("gone")}))
		must(t, h.Producer.Cancel(t.Context(), id))
		h.Advance(time.Second)
		l, err := h.Backend.FollowCancels(t.Context(), app.Prefix)
		must(t, err)
		defer l.Close()
		var ops []string
		for len(l.Messages()) > 0 {
			if rec := readRecord(t, l); rec["job_id"] == id {
				ops = append(ops, rec["op"].(string))
			}
		}
		if strings.Join(ops, ",") != "cancel,forget" {
			t.Fatalf("the ledger holds %v for the job, want its cancel then its forget", ops)
		}
	})
}

// Ids that cannot be a job's are refused before anything is recorded.
func TestCancelRefusesBadJobIDs(t *testing.T) {
	b := memory.New(nil)
	defer b.Close()
	p, err := queuey.NewProducer(t.Context(), b, app, nil)
	must(t, err)
	for _, id := range []string{"", strings.Repeat("x", queuey.MaxJobIDBytes+1), "a\x00b", "tab\there", "\xff"} {
		if err := p.Cancel(t.Context(), id); !errors.Is(err, queuey.ErrInvalidJob) {
			t.Errorf("Cancel(%q): got %v, want ErrInvalidJob", id, err)
		}
	}
	l, err := b.FollowCancels(t.Context(), app.Prefix)
	must(t, err)
	defer l.Close()
	if n := len(l.Messages()); n != 0 {
		t.Fatalf("the ledger holds %d records, want none", n)
	}
}

func readRecord(t *testing.T, l broker.Listener) map[string]any {
	t.Helper()
	select {
	case body := <-l.Messages():
		var rec map[string]any
		must(t, json.Unmarshal(body, &rec))
		return rec
	case <-time.After(5 * time.Second):
		t.Fatal("the ledger holds nothing")
		return nil
	}
}

func equalResults(a, b []queuey.Result) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A worker that loses the ledger starts no job until it has read it
// again (after its backoff, 1 s): a job cancelled meanwhile cannot slip
// through.
func TestWorkerThatLostTheLedgerStartsNothingUntilItReadsItAgain(t *testing.T) {
	cuts := &cuttableLedger{}
	opts := &clocktest.Options{WrapBackend: func(b *memory.Backend) broker.Backend { cuts.Backend = b; return cuts }}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		first := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("first")}))
		h.Advance(time.Second)
		if len(h.Log.Of(first)) != 1 {
			t.Fatal("the first job did not run")
		}
		cuts.cut()
		h.Idle()
		next := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{named("next")}))
		h.Advance(500 * time.Millisecond)
		if n := len(h.Log.Of(next)); n != 0 {
			t.Fatalf("a job started while the ledger was lost (%d runs)", n)
		}
		h.Advance(time.Second)
		if n := len(h.Log.Of(next)); n != 1 {
			t.Fatalf("the job ran %d times once the ledger was read again, want once", n)
		}
		if n := cuts.follows(); n != 2 {
			t.Fatalf("the ledger was followed %d times, want 2", n)
		}
	})
}

// cuttableLedger is the memory backend with follows that a test can end,
// as a lost connection ends one.
type cuttableLedger struct {
	*memory.Backend
	mu   sync.Mutex
	cuts []chan struct{}
}

var errCut = errors.New("the follow was cut")

func (c *cuttableLedger) FollowCancels(ctx context.Context, prefix string) (broker.Listener, error) {
	l, err := c.Backend.FollowCancels(ctx, prefix)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cut := make(chan struct{})
	c.cuts = append(c.cuts, cut)
	out := &cutListener{Listener: l, ch: make(chan []byte), done: make(chan struct{})}
	go out.forward(cut)
	return out, nil
}

// cut ends the newest follow.
func (c *cuttableLedger) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.cuts[len(c.cuts)-1])
}

func (c *cuttableLedger) follows() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cuts)
}

// cutListener hands on what its listener reads until it is cut (Err:
// errCut) or the listener ends.
type cutListener struct {
	broker.Listener
	ch   chan []byte
	done chan struct{}
	err  error // set before done is closed
}

func (l *cutListener) forward(cut <-chan struct{}) {
	defer close(l.ch)
	defer close(l.done)
	for {
		select {
		case m, ok := <-l.Listener.Messages():
			if !ok {
				l.err = l.Listener.Err()
				return
			}
			select {
			case l.ch <- m:
			case <-cut:
				l.err = errCut
				l.Listener.Close()
				return
			}
		case <-cut:
			l.err = errCut
			l.Listener.Close()
			return
		}
	}
}

func (l *cutListener) Messages() <-chan []byte { return l.ch }

func (l *cutListener) Err() error {
	<-l.done
	return l.err
}

// A job that waits for its time is cancelled: it never runs, and the
// worker ends it as Cancelled when it comes due.
func ExampleProducer_Cancel() {
	ctx := context.Background()
	outcomes := make(chan queuey.Result, 2)
	_, _, producer, worker := exampleApp(queuey.WorkerConfig{Hooks: &queuey.Hooks{
		Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
			return ctx, func(o queuey.Outcome) { outcomes <- o.Result }
		},
	}})
	err := queuey.Handle(worker, func(ctx context.Context, job CallAPI, jc queuey.JobContext) error {
		fmt.Println("running job", job.N)
		return nil
	})
	if err != nil {
		panic(err)
	}
	stop := startWorker(worker)
	defer stop()
	first, err := producer.EnqueueAfter(ctx, CallAPI{N: 1}, 200*time.Millisecond)
	if err != nil {
		panic(err)
	}
	if _, err := producer.EnqueueAfter(ctx, CallAPI{N: 2}, 400*time.Millisecond); err != nil {
		panic(err)
	}
	if err := producer.Cancel(ctx, first); err != nil {
		panic(err)
	}
	fmt.Println(<-outcomes)
	fmt.Println(<-outcomes)
	// Output:
	// cancelled
	// running job 2
	// succeeded
}
