package queuey

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/mailbox"
)

// queueActor consumes one queue. Its loop (queueLoop) is the one goroutine
// that owns the queue's state; the worker's handler goroutines run what it
// hands them and report back by message to its inbox, as the hold actor
// does about the publishes it makes and Worker.Pause and Resume do with
// their commands. It is a supervisor child: a crash (its consumer lost)
// ends Run with an error, the supervisor starts it again, and the broker
// hands the unsettled deliveries out again.
//
// Its files: this one (its state, its loop, consuming), queue_phase.go
// (pausing, draining, consuming again), queue_settle.go (what becomes of
// a delivery once its handler returned), suspects.go (the suspects' turn,
// PoisonAfter) and stop.go (the worker's stop).
type queueActor struct {
	w        *Worker
	q        *queueConfig
	inbox    *mailbox.Mailbox[queueMsg] // every run's: a message outlives a crash
	gauges   queueGauges
	pool     chan task               // the worker's handlers: a send waits for room
	fail     context.CancelCauseFunc // stops the whole worker, for a closed backend
	stopping context.Context         // ends when the worker starts to stop
	ran      bool                    // a run before this one, which crashed: its consumer lost, most often (declareAgain)
	away     bool                    // the queue's node was down at the last consume (ErrUnavailable)
	run      int                     // the current run, counted from 1; a report of an earlier one is stale
	stale    int                     // tasks and publishes of earlier runs not reported yet
	gated    bool                    // hand nothing out: the ledger of cancellations is not read yet (cancelGate)
}

// queueGauges is what a queue actor shows of its state outside, for
// Worker.InFlight and Worker.Paused: written by the actor only, read by
// anyone, never read back by the actor.
type queueGauges struct {
	inFlight    atomic.Int32 // deliveries held unsettled
	pausedUntil atomic.Int64 // Unix nanoseconds; 0 when not paused
}

// newQueueActor returns the actor of q, its inbox sized for every report
// the deliveries it may hold can send at once (a task's and a publish's,
// for this run and the one before), so that a report never waits.
func newQueueActor(w *Worker, q *queueConfig) *queueActor {
	return &queueActor{w: w, q: q, inbox: mailbox.New[queueMsg](4 * q.prefetch)}
}

// tell puts m in the actor's inbox. It does not wait: the inbox has room
// for every report of what the actor handed out; a command (Pause,
// Resume) that finds it full waits for room, until ctx ends.
func (a *queueActor) tell(ctx context.Context, m queueMsg) error {
	if err := a.inbox.TryPut(m); !errors.Is(err, mailbox.ErrFull) {
		return err
	}
	return a.inbox.Put(ctx, m)
}

// errConsumerLost reports a consumer that ended on its own.
var errConsumerLost = errors.New("consumer ended unexpectedly")

// errStopTimedOut is why running handlers are cancelled when a stop has
// waited ShutdownTimeout for them.
var errStopTimedOut = errors.New("the worker's stop ran out of time (ShutdownTimeout)")

// queueLoop is the state of one run of a queue actor. Only its goroutine
// touches it.
type queueLoop struct {
	*queueActor
	ctx            context.Context
	done           <-chan struct{} // closed when the worker stops or ctx ends
	handlerCtx     context.Context // outlives ctx: a graceful stop lets handlers finish
	cancelHandlers context.CancelCauseFunc

	phase    phase                             // what the loop is doing (queue_phase.go)
	resumeAt time.Time                         // paused, retrying or draining: when to consume (again)
	consumer broker.Consumer                   // nil when paused or retrying
	lease    *consumerLease                    // the consumer's: it ends once no settle of its waits
	in       <-chan broker.Delivery            // the consumer's deliveries; nil once drained
	mailbox  *mailbox.Mailbox[broker.Delivery] // received, not started: at most prefetch
	next     broker.Delivery                   // taken from the mailbox, offered to the pool
	holdBack chan struct{}                     // closed when a pause or a stop starts: tasks handed out and not started stay so

	running    int           // tasks handed to the pool, not yet reported
	publishing int           // settlements whose publish the hold actor makes
	retries    []*settlement // settles that failed, each waiting its backoff
	suspects   suspectWatch  // when to look for suspects (suspects.go)

	timer   *clock.Timer
	timerAt time.Time
}

// Run is the actor: it consumes until the worker stops (nil), the
// consumer is lost (an error), or the backend is closed (the worker fails).
func (a *queueActor) Run(ctx context.Context) error {
	handlerCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stopCtx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(a.stopping, stop)()
	a.run++
	l := &queueLoop{queueActor: a, ctx: ctx, done: stopCtx.Done(), handlerCtx: handlerCtx, cancelHandlers: cancel,
		mailbox: mailbox.New[broker.Delivery](a.q.prefetch)}
	defer l.stopTimer()
	defer func() { a.stale += l.running + l.publishing }() // their reports come to the next run
	if a.ran {
		l.declareAgain(stopCtx)
	}
	a.ran = true
	if err := l.consume(); err != nil || l.ended() {
		return err
	}
	for {
		done, err := l.step()
		if done || err != nil {
			return err
		}
	}
}

// ended reports whether the worker is stopping or Run's ctx ended.
func (l *queueLoop) ended() bool { return l.stopping.Err() != nil || l.ctx.Err() != nil }

// step reacts to what is ready, or else waits for one message. A stop
// comes first: under a flood something is always ready.
func (l *queueLoop) step() (done bool, _ error) {
	select {
	case <-l.done:
		return true, l.stop()
	default:
	}
	did, err := l.doReady()
	if err != nil {
		return true, err
	}
	if did {
		return false, l.afterEvent()
	}
	next, pool := l.nextTask()
	select {
	case d, ok := <-l.in:
		if err := l.received(d, ok); err != nil {
			return true, err
		}
	case m := <-l.inbox.Receive():
		l.reported(m)
	case pool <- next:
		l.started()
	case <-l.timerC():
		l.woke()
	case <-l.done:
		return true, l.stop()
	}
	return false, l.afterEvent()
}

// doReady takes every message already waiting, the inbox first (a pause
// must stop the dispatch of what is already here), then deliveries, and
// hands the pool what it takes at once, without the select over every
// channel, which costs a lock of each. It reports whether it did anything.
func (l *queueLoop) doReady() (did bool, _ error) {
	for m, ok := l.inbox.TryGet(); ok; m, ok = l.inbox.TryGet() {
		l.reported(m)
		did = true
	}
	for d, ok := tryRecv(l.in); ok; d, ok = tryRecv(l.in) {
		did = true
		if err := l.received(d, true); err != nil {
			return did, err
		}
	}
	if l.resettleDue() {
		did = true
	}
	for next, pool := l.nextTask(); pool != nil; next, pool = l.nextTask() {
		select {
		case pool <- next:
			l.started()
			did = true
			continue
		default:
		}
		break
	}
	return did, nil
}

// tryRecv receives from ch if a value is there (ok false when none is, or
// ch is closed: a closed channel is read by the select of step).
func tryRecv[T any](ch <-chan T) (v T, ok bool) {
	select {
	case v, ok = <-ch:
		return v, ok
	default:
		return v, false
	}
}

// received takes a delivery from the consumer, or its end.
func (l *queueLoop) received(d broker.Delivery, ok bool) error {
	if !ok {
		return l.consumerEnded()
	}
	if l.phase == phaseDraining { // a pause: it is not run now
		l.giveBack(d)
		return nil
	}
	// Run before the suspects, if isolating. The broker sends at most
	// prefetch; one that sends more has the surplus back.
	if err := l.mailbox.TryPut(d); err != nil {
		l.w.log.Error("the broker sent more deliveries than the queue's prefetch; giving the surplus back", "queue", l.q.broker, "prefetch", l.q.prefetch)
		l.giveBack(d)
	}
	l.publishInFlight()
	return nil
}

// reported takes a message: from a handler goroutine about its task, from
// the hold actor about a settlement's publish, or a command. A message
// about a task of an earlier run is stale: its consumer was lost.
func (l *queueLoop) reported(m queueMsg) {
	if run := m.runOf(); run != anyRun && run != l.run {
		l.reportedStale(m)
		return
	}
	switch m := m.(type) {
	case taskSettled:
		l.running--
	case taskToSettle:
		l.ranToSettle(m)
	case publishDone:
		l.publishing--
		l.published(m.s, m.err)
	case taskNotStarted:
		l.running--
		l.notStarted(m)
	case suspectRan:
		l.running--
		l.suspectDone(m)
	case pauseNotice:
		l.pause(m.until)
		close(m.paused)
	case pauseCommand:
		l.commanded(m)
	case cancelGate:
		l.gated = !m.open
	}
	l.publishInFlight()
}

// notStarted takes back a task the handler goroutine did not start (the
// loop held it back): its delivery goes back to the broker; a suspect's
// turn that did not start ends the suspects' turn.
func (l *queueLoop) notStarted(m taskNotStarted) {
	if m.d != nil {
		l.giveBack(m.d)
	}
	if m.alone {
		l.suspectDone(suspectRan{run: m.run})
	}
}

// timerC arms the loop's one timer for the earliest of the pause's end,
// the next look for suspects and the retries' backoffs still ahead, and
// returns its channel (nil: nothing to wait for). A retry already due is
// offered by doReady; no timer is set in the past, which a mock clock
// fires only after a pause of its own.
func (l *queueLoop) timerC() <-chan time.Time {
	if l.phase == phaseConsuming && len(l.retries) == 0 && l.suspects.nextLook.IsZero() {
		return nil // consuming, nothing to wait for: the common case, without reading the clock
	}
	now := l.w.clock.Now()
	at := l.wakeAt(now)
	for _, s := range l.retries {
		if s.due.After(now) && (at.IsZero() || s.due.Before(at)) {
			at = s.due
		}
	}
	if at.IsZero() {
		return nil
	}
	if !at.Equal(l.timerAt) {
		l.stopTimer()
		l.timer, l.timerAt = l.w.clock.Timer(at.Sub(now)), at
	}
	return l.timer.C
}

func (l *queueLoop) stopTimer() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer, l.timerAt = nil, time.Time{}
	}
}

// nextTask is what the loop would hand the pool now, and the pool's
// channel, or a nil channel when nothing is ready: the oldest delivery
// not started, else a suspect whose turn to run alone has come; nothing
// while the gate is closed. started takes it off.
func (l *queueLoop) nextTask() (task, chan<- task) {
	t := task{ctx: l.handlerCtx, holdBack: l.holdBack, q: l.q, inbox: l.inbox, run: l.run}
	if l.gated {
		return t, nil
	}
	if l.next == nil {
		l.next, _ = l.mailbox.TryGet()
	}
	if l.next != nil {
		t.d = l.next
		return t, l.pool
	}
	if l.suspectsTurn() {
		t.alone = true
		return t, l.pool
	}
	return t, nil
}

// started records that the pool took the task nextTask offered.
func (l *queueLoop) started() {
	l.running++
	l.next = nil
	l.publishInFlight()
}

// giveBack returns deliveries that were not started to the broker (see
// Worker.giveBack).
func (l *queueLoop) giveBack(ds ...broker.Delivery) {
	for _, d := range ds {
		l.w.jobs.giveBack(l.handlerCtx, l.q, d)
	}
}

// publishInFlight publishes, for Worker.InFlight, how many deliveries the
// actor holds unsettled: in its mailbox, with the pool, waiting for their
// publish, or for a settle to be tried again.
func (l *queueLoop) publishInFlight() {
	l.gauges.inFlight.Store(int32(l.held() + l.running + l.publishing + len(l.retries)))
}

// held is how many deliveries the mailbox holds, with the one offered.
func (l *queueLoop) held() int {
	if l.next != nil {
		return l.mailbox.Len() + 1
	}
	return l.mailbox.Len()
}

// takeMailbox empties the mailbox and returns what it held.
func (l *queueLoop) takeMailbox() []broker.Delivery {
	var ds []broker.Delivery
	if l.next != nil {
		ds, l.next = append(ds, l.next), nil
	}
	for d, ok := l.mailbox.TryGet(); ok; d, ok = l.mailbox.TryGet() {
		ds = append(ds, d)
	}
	l.publishInFlight()
	return ds
}
