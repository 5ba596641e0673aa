package queuey

import (
	"context"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// stop ends the run as the worker stops: no delivery is taken any more,
// those not started go back to the broker, and running handlers have
// ShutdownTimeout to finish (waitOut).
func (l *queueLoop) stop() error {
	l.stopConsumer()
	l.phase = phaseStopping
	l.showPaused()
	l.stopTimer()
	l.holdBackTasks()
	giveBackTasks(l.pool)
	l.giveBack(l.takeMailbox()...)
	for _, s := range l.retries {
		l.w.settler.giveUpSettling(s)
	}
	l.retries = nil
	l.waitOut()
	if l.lease != nil {
		l.lease.retire()
	}
	l.running, l.publishing = 0, 0 // what is left was abandoned: the broker has it back
	l.publishInFlight()
	return nil
}

// waitOut gives back what the stopped consumer still sends, and waits for
// the running handlers: ShutdownTimeout, then their ctx is cancelled and
// they have as long again to return and settle (with PoisonAfter,
// giveBackTimeout more: a job cut short is published again). Handlers
// still running then ignore their ctx, and no one can stop a goroutine
// from outside: they are abandoned (logged, and counted for Run's
// ErrHandlersStillRunning), their jobs left unsettled for the broker to
// hand out again.
func (l *queueLoop) waitOut() {
	timer := l.w.clock.Timer(l.w.shutdownTimeout)
	defer timer.Stop()
	cancelled := false
	for l.in != nil || l.running > 0 || l.publishing > 0 || l.stale > 0 {
		select {
		case d, ok := <-l.in:
			if !ok {
				l.in = nil
				continue
			}
			l.giveBack(d)
		case m := <-l.inbox.Receive():
			l.reported(m) // phaseStopping: no pause, no settle tried again
		case <-timer.C:
			if cancelled {
				l.abandon()
				return
			}
			cancelled = true
			l.w.log.Warn("shutdown timeout: cancelling running handlers", "queue", l.q.broker, "timeout", l.w.shutdownTimeout)
			l.cancelHandlers(errStopTimedOut)
			timer.Reset(l.stopGrace())
		}
	}
}

// stopGrace is how long handlers have to return once a stop cancelled them.
func (l *queueLoop) stopGrace() time.Duration {
	if l.w.poisonAfter > 0 {
		return l.w.shutdownTimeout + giveBackTimeout
	}
	return l.w.shutdownTimeout
}

func (l *queueLoop) abandon() {
	l.w.log.Error("handlers ignored their cancelled ctx; abandoning them, their jobs unsettled (the broker hands them out again)",
		"queue", l.q.broker, "running", l.running, "waited_after_cancel", l.stopGrace())
	l.w.abandoned.Add(1)
}

// giveBackTimeout bounds the publish of a delivery given back as a copy;
// past it, the delivery is requeued.
const giveBackTimeout = 10 * time.Second

// giveBack returns a delivery that was not started to the broker: requeued,
// or, with PoisonAfter on, published again unchanged and acked (setAside):
// a requeued delivery comes back flagged as redelivered, and would be
// counted as if it had been in flight at a crash; a copy goes to the back
// of its queue instead. ctx's values (not its end) go with the publish.
func (r *jobRunner) giveBack(ctx context.Context, q *queueConfig, d broker.Delivery) {
	if r.poisonAfter == 0 {
		requeue(d, jobLog{l: r.log, queue: q.broker})
		return
	}
	ctx, cancel := r.clock.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	defer cancel()
	_ = r.setAside(ctx, q, d) // counted and logged
}

func requeue(d broker.Delivery, log jobLog) {
	if err := d.Requeue(context.Background()); err != nil {
		log.Debug("could not requeue a delivery; the broker takes it back when the consumer ends", "error", err)
	}
}
