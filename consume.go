package queuey

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
)

// queueActor consumes one queue. Its loop (queueLoop) is the one goroutine
// that owns the queue's state; the worker's handler goroutines run what it
// hands them and report back by message. It is a supervisor child: a crash
// (its consumer lost) ends Run with an error, the supervisor starts it
// again, and the broker hands the unsettled deliveries out again.
type queueActor struct {
	w        *Worker
	q        *queueConfig
	pool     chan task               // the worker's handlers: a send waits for room
	fail     context.CancelCauseFunc // stops the whole worker, for a closed backend
	stopping context.Context         // ends when the worker starts to stop
	inFlight *atomic.Int32           // the deliveries it holds, for Worker.InFlight
	reports  chan report             // from its handlers and the hold actor, for every run
	ran      bool                    // a run before this one, which crashed: its consumer lost, most often (declareAgain)
	away     bool                    // the queue's node was down at the last consume (ErrUnavailable)
	run      int                     // the current run, counted from 1; a report of an earlier one is stale
	stale    int                     // tasks and publishes of earlier runs not reported yet
}

// errConsumerLost reports a consumer that ended on its own.
var errConsumerLost = errors.New("consumer ended unexpectedly")

// errStopTimedOut is why running handlers are cancelled when a stop has
// waited ShutdownTimeout for them.
var errStopTimedOut = errors.New("the worker's stop ran out of time (ShutdownTimeout)")

// declareAgainTimeout bounds a restarted actor's declaration of its queue:
// a broker that blocks the publishing connection (an alarm) holds it up,
// and consuming need not wait for the alarm to end.
const declareAgainTimeout = 10 * time.Second

// inUseRetry is how long a queue actor waits to consume again a queue an
// exclusive reader holds, or one whose node is down.
const inUseRetry = time.Second

// queueLoop is the state of one run of a queue actor. Only its goroutine
// touches it.
type queueLoop struct {
	*queueActor
	ctx            context.Context
	done           <-chan struct{} // closed when the worker stops or ctx ends
	handlerCtx     context.Context // outlives ctx: a graceful stop lets handlers finish
	cancelHandlers context.CancelCauseFunc

	consumer     broker.Consumer        // nil between consumers (paused)
	lease        *consumerLease         // the consumer's: it ends once no settle of its waits
	in           <-chan broker.Delivery // the consumer's deliveries; nil once drained
	reports      chan report            // the actor's: from its handlers and the hold actor
	mailbox      []broker.Delivery      // received, not started (from head on): at most prefetch
	head         int                    // the oldest in mailbox
	running      int                    // tasks handed to the pool, not yet reported
	publishing   int                    // settlements whose publish the hold actor makes
	retries      []*settlement          // settles that failed, each waiting its backoff
	draining     bool                   // the consumer was stopped: for a pause or a suspect
	holdBack     chan struct{}          // closed when a pause or a stop starts: tasks handed out and not started stay so
	resumeAt     time.Time              // paused: when to consume again
	retrying     bool                   // resumeAt is a consume to try again (ErrInUse, ErrUnavailable), not a pause's end
	isolating    bool                   // suspects to run alone once drained (poison.go)
	aloneRunning bool                   // the pool is running one
	nextLook     time.Time              // when to look for suspects again (PoisonAfter)
	stopped      bool                   // the worker is stopping: no pause, no settle tried again

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
	l := &queueLoop{queueActor: a, ctx: ctx, done: stopCtx.Done(), handlerCtx: handlerCtx, cancelHandlers: cancel, reports: a.reports}
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
	case r := <-l.reports:
		l.reported(r)
	case pool <- next:
		l.started()
	case <-l.timerC():
		l.woke()
	case <-l.done:
		return true, l.stop()
	}
	return false, l.afterEvent()
}

// doReady takes every message already waiting, handlers' reports first (a
// pause must stop the dispatch of what is already here), then deliveries,
// and hands the pool what it takes at once, without the select over every
// channel, which costs a lock of each. It reports whether it did anything.
func (l *queueLoop) doReady() (did bool, _ error) {
	for r, ok := tryRecv(l.reports); ok; r, ok = tryRecv(l.reports) {
		l.reported(r)
		did = true
	}
	for l.in != nil {
		select {
		case d, ok := <-l.in:
			did = true
			if err := l.received(d, ok); err != nil {
				return did, err
			}
			continue
		default:
		}
		break
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
// ch is closed).
func tryRecv[T any](ch <-chan T) (v T, ok bool) {
	select {
	case v, ok = <-ch:
		return v, ok
	default:
		return v, false
	}
}

// consume starts a consumer. A queue deleted behind the worker's back is
// declared again; one an exclusive reader holds is tried again after
// inUseRetry; a closed backend fails the worker.
func (l *queueLoop) consume() error {
	a := l.queueActor
	c, err := a.w.backend.Consume(l.ctx, a.q.broker, a.q.prefetch)
	if errors.Is(err, broker.ErrNoQueue) {
		a.w.log.Warn("queue is gone; declaring it again", "queue", a.q.broker)
		if err = l.declare(l.ctx); err == nil {
			c, err = a.w.backend.Consume(l.ctx, a.q.broker, a.q.prefetch)
		}
	}
	switch {
	case err == nil:
		if a.away {
			a.w.log.Info("queue is back; consuming", "queue", a.q.broker)
			a.away = false
		}
		l.consumer, l.in, l.draining, l.resumeAt, l.retrying = c, c.Deliveries(), false, time.Time{}, false
		l.lease = &consumerLease{c: c}
		l.holdBack = make(chan struct{})
		l.lookForSuspects()
		return nil
	case errors.Is(err, broker.ErrClosed):
		a.fail(fmt.Errorf("queue %q: %w", a.q.broker, err))
		return nil
	case errors.Is(err, broker.ErrInUse):
		// A dead-letter List, Show or Replay of another queue set, whose
		// dead-letter queue this is: it lets go soon; no crash.
		a.w.log.Warn("queue is held by an exclusive reader (a dead-letter List, Show or Replay); consuming again shortly",
			"queue", a.q.broker, "retry_in", inUseRetry)
		l.resumeAt, l.retrying = a.w.clock.Now().Add(inUseRetry), true
		return nil
	case errors.Is(err, broker.ErrUnavailable):
		// A classic queue on a node a cluster lost: its jobs are with
		// the node. Said once, tried every inUseRetry, no crash (a
		// supervisor would give the worker up after a few).
		if !a.away {
			a.w.log.Warn("queue is unavailable (its node is down); consuming again once it is back", "queue", a.q.broker, "error", err)
			a.away = true
		}
		l.resumeAt, l.retrying = a.w.clock.Now().Add(inUseRetry), true
		return nil
	case l.ended():
		return nil
	default:
		return fmt.Errorf("consume %q: %w", a.q.broker, err)
	}
}

// declareAgain declares the queue before a restarted actor consumes it:
// its consumer was lost, or the broker cancelled it because the queue was
// deleted. A queue that is gone is declared anew; one that someone else
// declared again with other arguments is said at ERROR (declare), once per
// restart, and consumed as it is. A declaration that does not get through
// in declareAgainTimeout is left for consume to find out about.
func (l *queueLoop) declareAgain(stopCtx context.Context) {
	ctx, cancel := l.w.clock.WithTimeout(stopCtx, declareAgainTimeout)
	defer cancel()
	if _, err := l.w.backend.Depth(ctx, l.q.broker); errors.Is(err, broker.ErrNoQueue) {
		l.w.log.Warn("queue is gone; declaring it again", "queue", l.q.broker)
	}
	if err := l.declare(ctx); err != nil && !l.ended() && !errors.Is(err, broker.ErrClosed) { // consume says those
		l.w.log.Warn("could not declare the queue again before consuming it", "queue", l.q.broker, "error", err)
	}
}

// declare declares the queue as the QueueSet says. A queue that exists with
// other arguments (deleted and declared again by someone else, without
// x-max-priority say) is consumed as it is rather than not at all: its
// jobs run, but what those arguments promise does not hold (without
// priorities, a deferred or paused job comes back behind the backlog
// instead of ahead of it). That is said at ERROR, with the backend's
// account of the argument that differs and what to do, and is no error.
func (l *queueLoop) declare(ctx context.Context) error {
	err := l.w.backend.Declare(ctx, l.q.spec())
	if !errors.Is(err, broker.ErrPreconditionFailed) {
		return err
	}
	l.w.log.Error("queue exists with other arguments than the worker declares (declared again by someone else?); "+
		"consuming it as it is, without what those arguments promise: without x-max-priority, deferred and paused jobs "+
		"come back behind the backlog. Delete the queue so that the worker declares it again, or make its Queue in the QueueSet match it",
		"queue", l.q.broker, "max_priority", l.q.maxPriority, "durable", !l.q.Transient, "message_ttl", l.q.MessageTTL, "error", err)
	return nil
}

// received takes a delivery from the consumer, or its end.
func (l *queueLoop) received(d broker.Delivery, ok bool) error {
	if !ok {
		return l.consumerEnded()
	}
	if l.draining && !l.isolating { // a pause: it is not run now
		l.giveBack(d)
		return nil
	}
	l.mailbox = append(l.mailbox, d) // run before the suspects, if isolating
	l.publishInFlight()
	return nil
}

// consumerEnded handles the end of the consumer's deliveries: expected
// once it was stopped; otherwise the consumer was lost, and with it every
// delivery this run holds (the broker has taken them back).
func (l *queueLoop) consumerEnded() error {
	l.in = nil
	why := l.consumer.Err()
	if why == nil && l.draining {
		return nil
	}
	why = fmt.Errorf("%w: %w", errConsumerLost, cmp.Or(why, broker.ErrClosed))
	l.dropStale()
	if errors.Is(why, broker.ErrClosed) {
		l.fail(fmt.Errorf("queue %q: %w", l.q.broker, why))
		return nil
	}
	return fmt.Errorf("queue %q: %w", l.q.broker, why)
}

// dropStale forgets what the lost consumer held, and cancels the running
// handlers, whose deliveries can no longer be settled. The supervisor
// starts consuming again at once rather than after the longest of them;
// the worker waits for them when it stops.
func (l *queueLoop) dropStale() {
	l.cancelHandlers(errConsumerLost)
	l.holdBackTasks()
	for _, s := range l.retries {
		if s.lease == l.lease { // lost with the consumer: the broker has it back
			s.finishAs(Requeued)
		} else { // a consumer retired alive, which may well be lost too
			l.w.giveUpSettling(s)
		}
	}
	l.takeMailbox()
	l.retries, l.isolating = nil, false
	l.publishInFlight()
}

// reported takes a message about a task or a settlement: from a handler
// goroutine, or from the hold actor.
func (l *queueLoop) reported(r report) {
	switch {
	case r.run != l.run:
		l.reportedStale(r)
		return
	case r.settle != nil:
		l.ranToSettle(r)
		return
	case r.published != nil:
		l.publishing--
		l.published(r.published, r.err)
		return
	}
	if !r.pauseUntil.IsZero() {
		l.pause(r.pauseUntil)
	}
	if !l.taskDone(r) {
		return
	}
	if r.alone {
		l.aloneRunning = false
		l.isolating = l.isolating && r.ranSuspect // none found: isolation over
	}
	if r.suspected && l.w.poisonAfter > 0 {
		l.isolate()
	}
	if r.retry != nil {
		l.keepRetry(r.retry)
	}
	l.publishInFlight()
}

// ranToSettle takes a handler's run that is over: a PauseQueue pauses the
// queue before its handler goroutine takes another task (but not in a
// stop), then the delivery is settled.
func (l *queueLoop) ranToSettle(r report) {
	l.running--
	s := r.settle
	if s.pausing && l.stopped {
		s.pausing = false
	}
	if s.pausing {
		l.pause(l.w.pauseOn(s))
	}
	if r.paused != nil {
		close(r.paused)
	}
	l.settle(s)
}

// settle has the hold actor make the publish s needs (a hold, a dead
// letter, a copy) and ack the delivery on its confirm; its answer comes
// back as published. An ack alone is made by the handler goroutine
// (perform).
func (l *queueLoop) settle(s *settlement) {
	l.publishing++
	s.run = l.run
	if err := l.w.hold.tell(s, l.reports); err != nil {
		l.publishing--
		l.published(s, err)
	}
	l.publishInFlight()
}

// published takes the hold actor's answer about s's publish: confirmed,
// and the delivery acked (a PauseQueue's pause, taken when its handler
// returned, lasts until its job is back, counted from the confirm); or
// failed, to be tried again after a backoff, or to end as failedTry says.
func (l *queueLoop) published(s *settlement, err error) {
	if err != nil {
		switch l.w.failedTry(s, err) {
		case tryAgain:
			if l.stopped { // not tried again: the delivery goes back to the broker
				l.w.giveUpSettling(s)
				return
			}
			l.keepRetry(s)
			l.publishInFlight()
			return
		case nowDeadLetter:
			l.settle(s)
			return
		}
		// nowRequeue: s now gives the delivery back
		l.w.settled(s)
	} else if s.pausing && !l.stopped {
		l.pauseLonger(s)
	}
	l.settledOne(s)
}

// pauseLonger makes the pause of s, a PauseQueue whose job is now held,
// last until the job is back (s.out.PausedUntil, counted from the
// confirm), if the queue is still paused.
func (l *queueLoop) pauseLonger(s *settlement) {
	if (l.consumer == nil || l.draining) && s.out.PausedUntil.After(l.resumeAt) {
		l.resumeAt, l.retrying = s.out.PausedUntil, false
	}
}

// settledOne takes what a settlement that is over leaves: its consumer's
// lease, the suspects' turn for a job moved to them.
func (l *queueLoop) settledOne(s *settlement) {
	if s.leased {
		s.leased = false
		s.lease.release()
	}
	if s.suspected && l.w.poisonAfter > 0 {
		l.isolate()
	}
	l.publishInFlight()
}

// resettleDue has the hold actor try again each settle whose backoff is
// over. It reports whether there was one.
func (l *queueLoop) resettleDue() bool {
	if len(l.retries) == 0 {
		return false
	}
	now := l.w.clock.Now()
	var due []*settlement
	kept := l.retries[:0]
	for _, s := range l.retries {
		if s.due.After(now) {
			kept = append(kept, s)
		} else {
			due = append(due, s)
		}
	}
	clear(l.retries[len(kept):])
	l.retries = kept
	for _, s := range due {
		l.settle(s)
	}
	return len(due) > 0
}

// reportedStale takes a report of an earlier run, whose consumer was lost
// with its deliveries: the broker has them back, to hand out again as
// redelivered, so a settlement ends as requeued, unsettled (and, with
// PoisonAfter, its job comes back a suspect, as from a crash).
func (l *queueLoop) reportedStale(r report) {
	if r.paused != nil {
		close(r.paused)
	}
	if r.notice {
		return
	}
	l.stale--
	for _, s := range []*settlement{r.settle, r.published, r.retry} {
		if s != nil {
			s.finishAs(Requeued)
			if s.leased {
				s.leased = false
				s.lease.release()
			}
		}
	}
}

// keepRetry keeps a settle that failed until its backoff is over. Its
// delivery can only be settled on its own consumer, which is leased open
// until then.
func (l *queueLoop) keepRetry(s *settlement) {
	s.due = l.w.clock.Now().Add(l.w.republishBackoff(s.tries))
	if !s.leased {
		if s.lease == nil {
			s.lease = l.lease
		}
		s.leased = true
		s.lease.pending++
	}
	l.retries = append(l.retries, s)
}

// taskDone takes what every report says, whatever the loop's state: a
// pause notice is answered (the pause is taken first); a task's end is
// counted, and a task that was not started goes back to the broker. It
// reports whether a task ended.
func (l *queueLoop) taskDone(r report) bool {
	if r.notice {
		close(r.paused)
		return false
	}
	l.running--
	if r.unstarted != nil {
		l.giveBack(r.unstarted)
	}
	return true
}

// pause stops taking deliveries until at least until: those held and not
// started go back to the broker, running handlers finish, and consuming
// resumes once the pause is over (PauseQueue).
func (l *queueLoop) pause(until time.Time) {
	if until.After(l.resumeAt) {
		l.resumeAt, l.retrying = until, false
	}
	l.isolating = false // the suspects are looked for when it consumes again
	l.stopConsumer()    // first, or what is given back comes straight back
	l.holdBackTasks()
	l.giveBack(l.takeMailbox()...)
}

// holdBackTasks tells the handler goroutines not to start the tasks of
// this consumer they have not started yet: they come back as unstarted.
func (l *queueLoop) holdBackTasks() {
	select {
	case <-l.holdBack:
	default:
		if l.holdBack != nil {
			close(l.holdBack)
		}
	}
}

// stopConsumer ends new deliveries; the loop reads what was already sent
// until the consumer's channel closes.
func (l *queueLoop) stopConsumer() {
	if l.consumer != nil && !l.draining {
		l.draining = true
		l.consumer.Stop()
	}
}

// afterEvent moves on once a stopped consumer has nothing left: it runs
// the suspect alone, then ends the consumer and consumes again, now or
// once the pause is over.
func (l *queueLoop) afterEvent() error {
	if !l.draining {
		l.lookWhenDue()
		return nil
	}
	if l.in != nil || l.running > 0 || l.publishing > 0 || l.held() > 0 {
		return nil
	}
	if l.isolating || l.aloneRunning {
		return nil // the suspects' turn: nextTask hands the pool a task to run one
	}
	l.lease.retire() // ends the consumer once no settle of its waits to be tried again
	l.consumer, l.lease, l.draining = nil, nil, false
	if l.resumeAt.After(l.w.clock.Now()) {
		l.w.log.Info("queue paused", "queue", l.q.broker, "until", l.resumeAt)
		return nil
	}
	return l.consume()
}

// woke: a retry's backoff or a pause is over.
func (l *queueLoop) woke() {
	l.timerAt = time.Time{}
	if l.consumer == nil && !l.resumeAt.IsZero() && !l.resumeAt.After(l.w.clock.Now()) {
		if !l.retrying {
			l.w.log.Info("queue resumed", "queue", l.q.broker)
		}
		if err := l.consume(); err != nil {
			l.w.log.Error("could not consume again after a pause", "queue", l.q.broker, "error", err)
			l.resumeAt = l.w.clock.Now().Add(inUseRetry)
		}
	}
}

// timerC arms the loop's one timer for the earliest of the pause's end
// and the retries' backoffs still ahead, and returns its channel (nil:
// nothing to wait for). A retry already due is offered by nextTask; no
// timer is set in the past, which a mock clock fires only after a pause
// of its own.
func (l *queueLoop) timerC() <-chan time.Time {
	if l.consumer != nil && len(l.retries) == 0 && l.nextLook.IsZero() {
		return nil // consuming, nothing to wait for: the common case, without reading the clock
	}
	now := l.w.clock.Now()
	var at time.Time
	if l.consumer == nil && l.resumeAt.After(now) {
		at = l.resumeAt
	}
	if l.consumer != nil && !l.draining && l.nextLook.After(now) && (at.IsZero() || l.nextLook.Before(at)) {
		at = l.nextLook
	}
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
// not started, else a suspect whose turn to run alone has come. started
// takes it off.
func (l *queueLoop) nextTask() (task, chan<- task) {
	t := task{ctx: l.handlerCtx, holdBack: l.holdBack, q: l.q, reports: l.reports, run: l.run}
	if l.held() > 0 {
		t.d = l.mailbox[l.head]
		return t, l.pool
	}
	if l.isolating && !l.aloneRunning && l.in == nil && l.running == 0 && l.publishing == 0 {
		t.alone = true
		return t, l.pool
	}
	return t, nil
}

// started records that the pool took the task nextTask offered.
func (l *queueLoop) started() {
	l.running++
	if l.held() > 0 {
		l.mailbox[l.head] = nil
		l.head++
		if l.head == len(l.mailbox) {
			l.mailbox, l.head = l.mailbox[:0], 0
		}
	} else {
		l.aloneRunning = true
	}
	l.publishInFlight()
}

// giveBack returns deliveries that were not started to the broker (see
// Worker.giveBack).
func (l *queueLoop) giveBack(ds ...broker.Delivery) {
	for _, d := range ds {
		l.w.giveBack(l.handlerCtx, l.q, d)
	}
}

// publishInFlight publishes, for Worker.InFlight, how many deliveries the
// actor holds unsettled: in its mailbox, with the pool, waiting for their
// publish, or for a settle to be tried again.
func (l *queueLoop) publishInFlight() {
	l.inFlight.Store(int32(l.held() + l.running + l.publishing + len(l.retries)))
}

// held is how many deliveries the mailbox holds.
func (l *queueLoop) held() int { return len(l.mailbox) - l.head }

// takeMailbox empties the mailbox and returns what it held.
func (l *queueLoop) takeMailbox() []broker.Delivery {
	ds := l.mailbox[l.head:]
	l.mailbox, l.head = nil, 0
	l.publishInFlight()
	return ds
}
