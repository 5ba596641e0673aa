package queuey

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// phase is what a queue actor is doing. Every change of it is in this
// file, but for the suspects' turn (suspects.go) and the stop (stop.go).
//
//	consuming ──pause──▶ draining ──drained──▶ paused ──resumeAt──▶ consuming
//	consuming ──suspects──▶ isolating ──none left──▶ draining
//	(no consumer) ──in use, node down──▶ retrying ──resumeAt──▶ consuming
//	any ──the worker stops──▶ stopping
type phase int

const (
	// phaseConsuming: a consumer; deliveries run as they come.
	phaseConsuming phase = iota
	// phaseDraining: the consumer is stopped; what it still sends goes
	// back to the broker, the tasks handed out finish and are settled.
	// Then the consumer ends and the actor consumes again, at resumeAt
	// (paused until then).
	phaseDraining
	// phaseIsolating: the consumer is stopped for the suspects; what it
	// sent runs, then the suspects run one at a time, alone (suspects.go).
	phaseIsolating
	// phasePaused: no consumer until resumeAt (PauseQueue, Worker.Pause).
	phasePaused
	// phaseRetrying: no consumer; the last consume found the queue held
	// by an exclusive reader or its node down: tried again at resumeAt.
	phaseRetrying
	// phaseStopping: the worker stops (stop.go): nothing is taken, no
	// queue pauses, no settle is tried again.
	phaseStopping
)

// declareAgainTimeout bounds a restarted actor's declaration of its queue:
// a broker that blocks the publishing connection (an alarm) holds it up,
// and consuming need not wait for the alarm to end.
const declareAgainTimeout = 10 * time.Second

// inUseRetry is how long a queue actor waits to consume again a queue an
// exclusive reader holds, or one whose node is down.
const inUseRetry = time.Second

// consume starts a consumer (phaseConsuming). A queue deleted behind the
// worker's back is declared again; one an exclusive reader holds, or whose
// node is down, is tried again after inUseRetry (phaseRetrying); a closed
// backend fails the worker.
func (l *queueLoop) consume() error {
	c, err := l.openConsumer()
	switch {
	case err == nil:
		l.consuming(c)
		return nil
	case errors.Is(err, broker.ErrClosed):
		l.fail(fmt.Errorf("queue %q: %w", l.q.broker, err))
		return nil
	case errors.Is(err, broker.ErrInUse):
		// A dead-letter List, Show or Replay of another queue set, whose
		// dead-letter queue this is: it lets go soon; no crash.
		l.w.log.Warn("queue is held by an exclusive reader (a dead-letter List, Show or Replay); consuming again shortly",
			"queue", l.q.broker, "retry_in", inUseRetry)
		l.retryConsume()
		return nil
	case errors.Is(err, broker.ErrUnavailable):
		// A classic queue on a node a cluster lost: its jobs are with
		// the node. Said once, tried every inUseRetry, no crash (a
		// supervisor would give the worker up after a few).
		if !l.away {
			l.w.log.Warn("queue is unavailable (its node is down); consuming again once it is back", "queue", l.q.broker, "error", err)
			l.away = true
		}
		l.retryConsume()
		return nil
	case l.ended():
		return nil
	default:
		return fmt.Errorf("consume %q: %w", l.q.broker, err)
	}
}

// openConsumer consumes the queue, declaring it first if it is gone.
func (l *queueLoop) openConsumer() (broker.Consumer, error) {
	c, err := l.w.backend.Consume(l.ctx, l.q.broker, l.q.prefetch)
	if errors.Is(err, broker.ErrNoQueue) {
		l.w.log.Warn("queue is gone; declaring it again", "queue", l.q.broker)
		if err = l.declare(l.ctx); err == nil {
			c, err = l.w.backend.Consume(l.ctx, l.q.broker, l.q.prefetch)
		}
	}
	return c, err
}

// consuming takes up a new consumer c.
func (l *queueLoop) consuming(c broker.Consumer) {
	if l.away {
		l.w.log.Info("queue is back; consuming", "queue", l.q.broker)
		l.away = false
	}
	l.phase, l.resumeAt = phaseConsuming, time.Time{}
	l.consumer, l.in = c, c.Deliveries()
	l.lease = &consumerLease{c: c}
	l.holdBack = make(chan struct{})
	l.showPaused()
	l.lookForSuspects()
}

// retryConsume has the actor consume again after inUseRetry.
func (l *queueLoop) retryConsume() {
	l.phase, l.resumeAt = phaseRetrying, l.w.clock.Now().Add(inUseRetry)
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

// consumerEnded handles the end of the consumer's deliveries: expected
// once it was stopped; otherwise the consumer was lost, and with it every
// delivery this run holds (the broker has taken them back).
func (l *queueLoop) consumerEnded() error {
	l.in = nil
	why := l.consumer.Err()
	if why == nil && (l.phase == phaseDraining || l.phase == phaseIsolating) {
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
			l.w.settler.giveUpSettling(s)
		}
	}
	l.takeMailbox()
	l.retries = nil
	l.publishInFlight()
}

// pause stops taking deliveries until at least until (phaseDraining): those
// held and not started go back to the broker, running handlers finish,
// and consuming resumes once the pause is over (PauseQueue, Worker.Pause).
// A pause ends the suspects' turn; they are looked for when the actor
// consumes again.
func (l *queueLoop) pause(until time.Time) {
	if l.phase == phaseStopping {
		return
	}
	if until.After(l.resumeAt) {
		l.resumeAt = until
		if l.phase == phaseRetrying {
			l.phase = phasePaused
		}
	}
	switch l.phase {
	case phaseConsuming:
		l.stopConsumer() // first, or what is given back comes straight back
		l.phase = phaseDraining
	case phaseIsolating:
		l.phase = phaseDraining
	}
	l.holdBackTasks()
	l.giveBack(l.takeMailbox()...)
	l.showPaused()
}

// commanded takes Worker.Pause (a pause until m.until) or Worker.Resume
// (m.until zero): a resume ends a pause now, whoever asked for it; it
// does not hurry a consume that is to be tried again.
func (l *queueLoop) commanded(m pauseCommand) {
	defer close(m.done)
	if l.phase == phaseStopping {
		return
	}
	if !m.until.IsZero() {
		l.w.log.Info("queue paused by command", "queue", l.q.broker, "until", m.until)
		l.pause(m.until)
		return
	}
	switch l.phase {
	case phaseDraining, phaseIsolating:
		l.resumeAt = time.Time{} // consumes again once drained
	case phasePaused:
		l.resumeAt = time.Time{}
		l.w.log.Info("queue resumed by command", "queue", l.q.broker)
		if err := l.consume(); err != nil {
			l.w.log.Error("could not consume again after a pause", "queue", l.q.broker, "error", err)
			l.retryConsume()
		}
	}
	l.showPaused()
}

// pauseLonger makes the pause of s, a PauseQueue whose job is now held,
// last until the job is back (s.out.PausedUntil, counted from the
// confirm), if the queue is still paused or pausing.
func (l *queueLoop) pauseLonger(s *settlement) {
	if l.phase == phaseConsuming || l.phase == phaseStopping || !s.out.PausedUntil.After(l.resumeAt) {
		return
	}
	l.resumeAt = s.out.PausedUntil
	if l.phase == phaseRetrying {
		l.phase = phasePaused
	}
	l.showPaused()
}

// showPaused publishes, for Worker.Paused, until when the queue is paused.
func (l *queueLoop) showPaused() {
	var until int64
	if l.phase != phaseConsuming && l.phase != phaseRetrying && l.phase != phaseStopping && !l.resumeAt.IsZero() {
		until = l.resumeAt.UnixNano()
	}
	l.gauges.pausedUntil.Store(until)
}

// holdBackTasks tells the handler goroutines not to start the tasks of
// this consumer they have not started yet: they come back as not started.
func (l *queueLoop) holdBackTasks() {
	select {
	case <-l.holdBack:
	default:
		if l.holdBack != nil {
			close(l.holdBack)
		}
	}
}

// stopConsumer ends new deliveries of a consuming actor; the loop reads
// what was already sent until the consumer's channel closes. The caller
// sets the phase that follows.
func (l *queueLoop) stopConsumer() {
	if l.phase == phaseConsuming && l.consumer != nil {
		l.consumer.Stop()
	}
}

// afterEvent moves on once a stopped consumer has nothing left: the
// suspects' turn comes (nextTask), or the consumer ends and the actor
// consumes again, now or once the pause is over.
func (l *queueLoop) afterEvent() error {
	switch l.phase {
	case phaseConsuming:
		l.lookWhenDue()
		return nil
	case phaseDraining:
	default:
		return nil // isolating: nextTask hands the pool a task to run a suspect once drained
	}
	if l.in != nil || l.running > 0 || l.publishing > 0 || l.held() > 0 {
		return nil
	}
	if l.lease != nil { // nil when the first consume failed as the worker failed
		l.lease.retire() // ends the consumer once no settle of its waits to be tried again
	}
	l.consumer, l.lease, l.phase = nil, nil, phasePaused // until consume says otherwise
	if l.resumeAt.After(l.w.clock.Now()) {
		l.w.log.Info("queue paused", "queue", l.q.broker, "until", l.resumeAt)
		return nil
	}
	return l.consume()
}

// wakeAt is when the phase has the loop wake (zero: never): a pause's or
// a retry's end, or while consuming, the next look for suspects.
func (l *queueLoop) wakeAt(now time.Time) time.Time {
	switch {
	case (l.phase == phasePaused || l.phase == phaseRetrying) && l.resumeAt.After(now):
		return l.resumeAt
	case l.phase == phaseConsuming && l.suspects.nextLook.After(now):
		return l.suspects.nextLook
	}
	return time.Time{}
}

// woke: the timer fired: a retry's backoff, a pause or a wait to consume
// again is over, or it is time to look for suspects (afterEvent).
func (l *queueLoop) woke() {
	l.timerAt = time.Time{}
	if (l.phase != phasePaused && l.phase != phaseRetrying) || l.resumeAt.After(l.w.clock.Now()) {
		return
	}
	if l.phase == phasePaused {
		l.w.log.Info("queue resumed", "queue", l.q.broker)
	}
	if err := l.consume(); err != nil {
		l.w.log.Error("could not consume again after a pause", "queue", l.q.broker, "error", err)
		l.retryConsume()
	}
}
