package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync"
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
	running []runningSlot                        // one per handler goroutine, written by it
	met     *mailbox.Mailbox[string]             // cancelled jobs that arrived and ended, to forget

	ids  map[string]time.Time // the actor's own: the cancelled jobs, until when
	asks []string             // cancellations read before catching up, to answer then
}

// runningSlot is where a handler goroutine shows the job it runs, alone on
// its cache line: each goroutine writes its own slot twice a job, and
// slots sharing a line would make each of those writes take the line from
// the cores running the other handlers.
type runningSlot struct {
	atomic.Pointer[jobCtx]
	_ [cacheLine - 8]byte
}

// cacheLine is the size of a CPU cache line on the common 64-bit machines.
const cacheLine = 64

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
		running: make([]runningSlot, w.concurrency), met: mailbox.New[string](cancelMetBuffer)}
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
		if j := c.running[i].Load(); j != nil && j.id == rec.JobID {
			j.tell()
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
func (c *cancelsActor) watch(ctx context.Context, slot int, id string) *jobCtx {
	j := &jobCtx{Context: ctx, id: id}
	c.running[slot].Store(j)
	return j
}

// unwatch ends watch's j: the job is over.
func (c *cancelsActor) unwatch(slot int, j *jobCtx) {
	c.running[slot].Store(nil)
	j.end()
}

// forget asks for the cancellation of id, whose job arrived and ended,
// to be forgotten; it never waits.
func (c *cancelsActor) forget(id string) { _ = c.met.TryPut(id) }

// cancelled settles a cancelled job: an ack, whether it ran (and its
// handler returned err once told) or not, its cancellation to be
// forgotten. A unique job lets its key go; a chain stops here.
func (r *jobRunner) cancelled(f *jobFacts, ran bool, err error) settlement {
	r.cancels.forget(f.env.JobID)
	return settlement{action: actAck, log: f.log, out: Outcome{Result: Cancelled, Ran: ran, Err: err}}
}

// jobCtx is a running job's ctx: its task's, cancelled with the cause
// ErrJobCancelled if the job is cancelled (tell). It makes a cancelCtx of
// its own only once one is needed, when its Done is asked for or it is
// told: a handler that never looks at its ctx's Done (a busy worker's
// quick jobs) then costs one allocation, where a cancelCtx for each job
// costs three and a lock of its parent, which the queue's handlers share.
type jobCtx struct {
	context.Context // the task's: its values and deadline; its end, until own is made
	id              string

	own     atomic.Pointer[ownCtx] // made once, under mu
	wasTold atomic.Bool
	mu      sync.Mutex
	ended   bool // under mu: the job is over
}

// ownCtx is a jobCtx's own cancelCtx, child of the task's.
type ownCtx struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Done is the own ctx's, made on the first call.
func (j *jobCtx) Done() <-chan struct{} { return j.made().ctx.Done() }

// Err is the own ctx's once made, else the task's.
func (j *jobCtx) Err() error {
	if o := j.own.Load(); o != nil {
		return o.ctx.Err()
	}
	return j.Context.Err()
}

// Value is the own ctx's once made (context.Cause reads its cause so),
// else the task's.
func (j *jobCtx) Value(key any) any {
	if o := j.own.Load(); o != nil {
		return o.ctx.Value(key)
	}
	return j.Context.Value(key)
}

// tell cancels the job's ctx with ErrJobCancelled, unless it is over.
func (j *jobCtx) tell() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ended {
		return
	}
	o := j.makeLocked()
	j.wasTold.Store(true)
	o.cancel(ErrJobCancelled)
}

// told reports whether tell cancelled the job's ctx.
func (j *jobCtx) told() bool { return j.wasTold.Load() }

// made is the own ctx, made now if it is not yet.
func (j *jobCtx) made() *ownCtx {
	if o := j.own.Load(); o != nil {
		return o
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.makeLocked()
}

// makeLocked makes the own ctx if it is not yet; made after the job is
// over (a goroutine the handler left behind), it is cancelled at once.
func (j *jobCtx) makeLocked() *ownCtx {
	if o := j.own.Load(); o != nil {
		return o
	}
	ctx, cancel := context.WithCancelCause(j.Context)
	o := &ownCtx{ctx: ctx, cancel: cancel}
	j.own.Store(o)
	if j.ended {
		cancel(nil)
	}
	return o
}

// end releases the own ctx, if one was made: the job is over.
func (j *jobCtx) end() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ended = true
	if o := j.own.Load(); o != nil {
		o.cancel(nil)
	}
}
