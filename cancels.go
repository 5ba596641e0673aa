package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync/atomic"
	"time"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/mailbox"
)

// cancelsActor follows the queue set's ledger of cancellations for one
// worker (ARCHITECTURE.md §2, "Cancellation: the ledger"). Its goroutine
// owns the set of cancelled jobs; it shows the handler goroutines a copy,
// replaced whole on each change (view), which they read and never write,
// and it reads what each of them runs (running), which only that
// goroutine writes. A handler goroutine publishes the job it starts
// before it reads the view, and the actor publishes a new view before it
// reads what runs: with sequentially consistent atomics, one of the two
// sees the other, so a job is either not started or told through its ctx.
//
// Until it has read the ledger to its end, the worker's queue actors hand
// out nothing (their gate, cancelGate). A follow that ends (a lost
// connection) closes the gates again until the ledger is read anew.
type cancelsActor struct {
	w        *Worker
	ledger   broker.CancelLedger
	bc       broker.Broadcaster
	follower string // this worker's name in its answers

	view    atomic.Pointer[map[string]time.Time] // the cancelled jobs and until when; nil: none
	running []atomic.Pointer[runningJob]         // one per handler goroutine, written by it
	met     *mailbox.Mailbox[string]             // cancelled jobs that arrived and ended, to forget

	ids  map[string]time.Time // the actor's own: the cancelled jobs, until when
	asks []string             // cancellations read before catching up, to answer then
}

// runningJob is a job a handler goroutine runs, and how to tell it.
type runningJob struct {
	id     string
	cancel context.CancelCauseFunc
}

// Bounds of the actor.
const (
	// cancelMetBuffer bounds the forgets waiting to be recorded; past it
	// a cancellation is kept until its end instead.
	cancelMetBuffer = 1024
	// cancelAnswerWindow: a cancellation read later than this after it
	// was recorded is not answered (its Cancel call has given up); the
	// ledger read from its start is not answered record by record.
	cancelAnswerWindow = time.Minute
	// cancelWriteTimeout bounds a record's or an answer's write.
	cancelWriteTimeout = 10 * time.Second
	// cancelBackoffMin and Max bound the wait before following again.
	cancelBackoffMin = time.Second
	cancelBackoffMax = 30 * time.Second
)

// newCancelsActor returns w's actor, or nil when w's backend keeps no
// ledger: then nothing is gated and no job can be cancelled.
func newCancelsActor(w *Worker) *cancelsActor {
	ledger, bc, err := cancelLedger(w.backend)
	if err != nil {
		return nil
	}
	return &cancelsActor{w: w, ledger: ledger, bc: bc, follower: nonce(),
		running: make([]atomic.Pointer[runningJob], w.concurrency), met: mailbox.New[string](cancelMetBuffer)}
}

// Run follows the ledger until ctx ends, following it again after a
// backoff whenever a follow ends; it returns the backend's ErrClosed.
func (c *cancelsActor) Run(ctx context.Context) error {
	wait := time.Duration(0)
	c.gate(ctx, false) // closed already at the worker's start; after a crash, not
	for {
		caughtUp, err := c.follow(ctx)
		c.gate(ctx, false) // at once: what the worker missed meanwhile is not known
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, broker.ErrClosed):
			return err
		case caughtUp:
			wait = 0
		}
		wait = min(max(2*wait, cancelBackoffMin), cancelBackoffMax)
		c.w.log.Warn("lost the ledger of cancellations; the worker starts no job until it has read it again", "error", err, "retry_in", wait)
		select {
		case <-c.w.clock.After(wait):
		case <-ctx.Done():
			return nil
		}
	}
}

// follow reads the ledger from its start, opens the gates once it has
// read its own mark, and applies each record after, until the follow
// ends. It reports whether it caught up.
func (c *cancelsActor) follow(ctx context.Context) (caughtUp bool, _ error) {
	l, err := c.ledger.FollowCancels(ctx, c.w.set.prefix)
	if err != nil {
		return false, err
	}
	defer l.Close()
	mark := nonce()
	if err := c.write(ctx, cancelRecord{Op: opMark, Mark: mark}); err != nil {
		return false, err
	}
	c.ids, c.asks = map[string]time.Time{}, nil
	for {
		select {
		case body, ok := <-l.Messages():
			if !ok {
				return caughtUp, l.Err()
			}
			if c.read(ctx, body, caughtUp) == mark && !caughtUp {
				caughtUp = true
				c.caughtUp(ctx)
			}
		case id := <-c.met.Receive():
			_ = c.write(ctx, cancelRecord{Op: opForget, JobID: id}) // unwritten, it lasts until its end
		case <-ctx.Done():
			return caughtUp, nil
		}
	}
}

// caughtUp shows the cancelled jobs, tells those running, answers the
// cancellations read on the way (only now: a task handed out before the
// gates closed may still start with the view before), and opens the
// gates.
func (c *cancelsActor) caughtUp(ctx context.Context) {
	c.publish()
	for id := range c.ids {
		c.tellRunning(cancelRecord{Op: opCancel, JobID: id})
	}
	for _, ask := range c.asks {
		c.answer(ctx, ask)
	}
	c.asks = nil
	c.gate(ctx, true)
}

// read applies one record of the ledger and returns its mark, if it is
// one. Once caught up, each change is shown at once and a cancellation
// is answered once applied; before, its answer waits (caughtUp).
func (c *cancelsActor) read(ctx context.Context, body []byte, caughtUp bool) (mark string) {
	var rec cancelRecord
	if err := json.Unmarshal(body, &rec); err != nil {
		c.w.log.Warn("skipping a record of the ledger of cancellations that does not decode", "error", err)
		return ""
	}
	now := c.w.clock.Now()
	switch rec.Op {
	case opMark:
		return rec.Mark
	case opForget:
		delete(c.ids, rec.JobID)
	case opCancel:
		if until := time.UnixMilli(rec.Until); until.After(now) && rec.JobID != "" {
			c.ids[rec.JobID] = until
		}
	default:
		return ""
	}
	fresh := rec.Op == opCancel && rec.Ask != "" && now.Sub(time.UnixMilli(rec.At)) < cancelAnswerWindow
	switch {
	case caughtUp:
		c.publish()
		c.tellRunning(rec)
		if fresh {
			c.answer(ctx, rec.Ask)
		}
	case fresh:
		c.asks = append(c.asks, rec.Ask)
	}
	return ""
}

// publish shows the handler goroutines the cancelled jobs now, the
// expired ones left out.
func (c *cancelsActor) publish() {
	now := c.w.clock.Now()
	maps.DeleteFunc(c.ids, func(_ string, until time.Time) bool { return !until.After(now) })
	if len(c.ids) == 0 {
		c.view.Store(nil)
		return
	}
	v := maps.Clone(c.ids)
	c.view.Store(&v)
}

// tellRunning cancels the ctx of a running job that rec cancels.
func (c *cancelsActor) tellRunning(rec cancelRecord) {
	if rec.Op != opCancel {
		return
	}
	for i := range c.running {
		if r := c.running[i].Load(); r != nil && r.id == rec.JobID {
			r.cancel(ErrJobCancelled)
		}
	}
}

// answer tells the Cancel call that asked that this worker has applied
// its cancellation. An answer lost is made up by the next count of
// followers, which drops a follower that went away.
func (c *cancelsActor) answer(ctx context.Context, ask string) {
	body, _ := json.Marshal(cancelAnswer{Ask: ask, Follower: c.follower})
	wctx, cancel := c.w.clock.WithTimeout(ctx, cancelWriteTimeout)
	defer cancel()
	if err := c.bc.Broadcast(wctx, broker.CancelAnswersTopic(c.w.set.prefix), body); err != nil {
		c.w.log.Warn("could not answer a cancellation", "error", err)
	}
}

// write appends rec to the ledger.
func (c *cancelsActor) write(ctx context.Context, rec cancelRecord) error {
	wctx, cancel := c.w.clock.WithTimeout(ctx, cancelWriteTimeout)
	defer cancel()
	return appendRecord(wctx, c.ledger, c.w.set.prefix, rec)
}

// gate opens or closes every queue actor's gate.
func (c *cancelsActor) gate(ctx context.Context, open bool) {
	for _, q := range c.w.queues {
		_ = c.w.queueActors[q.Name].tell(ctx, cancelGate{open: open})
	}
}

// isCancelled reports whether the job id is cancelled, as the view shows.
func (c *cancelsActor) isCancelled(id string) bool {
	v := c.view.Load()
	if v == nil {
		return false
	}
	until, ok := (*v)[id]
	return ok && until.After(c.w.clock.Now())
}

// watch publishes, in slot, that the calling handler goroutine runs the
// job id with the ctx it returns, which the actor cancels if the job is
// cancelled. unwatch ends it.
func (c *cancelsActor) watch(ctx context.Context, slot int, id string) (context.Context, *runningJob) {
	ctx, cancel := context.WithCancelCause(ctx)
	r := &runningJob{id: id, cancel: cancel}
	c.running[slot].Store(r)
	return ctx, r
}

// unwatch ends watch's r: the job is over.
func (c *cancelsActor) unwatch(slot int, r *runningJob) {
	c.running[slot].Store(nil)
	r.cancel(nil)
}

// forget asks for the cancellation of id, whose job arrived and ended,
// to be forgotten; it never waits.
func (c *cancelsActor) forget(id string) { _ = c.met.TryPut(id) }

// cancelled settles a cancelled job: an ack, whether it ran (and its
// handler returned err once told) or not, its cancellation to be
// forgotten. A unique job lets its key go; a chain stops here.
func (w *Worker) cancelled(f jobFacts, ran bool, err error) settlement {
	w.cancels.forget(f.env.JobID)
	return settlement{action: actAck, log: f.log, out: Outcome{Result: Cancelled, Ran: ran, Err: err}}
}
