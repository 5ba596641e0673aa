package queuey

import (
	"context"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
)

// settler carries out a worker's settlements: the publish a settlement
// needs (a hold, a dead letter, a copy), then the ack; after a failed
// publish, when to try again and what comes after the tries
// (settleretry.go). Handler goroutines settle through it the jobs they
// settle themselves, the hold actor the publishes it makes, the queue
// actors what they keep to try again. Its fields are set before the
// goroutines that use it start and are not changed after, but failures,
// a count.
type settler struct {
	backend         broker.Backend
	set             *queueSet
	clock           clock.Clock
	hooks           hookCaller
	hold            *holdActor // set by Worker.Run before its queue actors start
	onDeadLetter    func(context.Context, DeadLetterEvent)
	unknownKindWait time.Duration // said in the log line of a job held back for want of a handler
	republishDelay  time.Duration
	republishJitter *rand.Rand // safe for concurrent use: the queue actors draw from it
	poisonAfter     int
	givenBack       *givenBack    // the worker's (PoisonAfter)
	failures        atomic.Uint64 // Worker.SettleFailures
}

// settle carries s out on the calling goroutine: its publish, then the
// ack. A failed publish comes back, to be tried again after a backoff by
// the queue actor. Only a suspect run alone is settled so (runSuspect);
// every other delivery is settled by its queue actor.
func (st *settler) settle(s *settlement) (retry *settlement) {
	if err := st.publishOf(s, st.holdNext); err != nil {
		switch st.failedTry(s, err) {
		case tryAgain:
			return s.kept()
		case nowDeadLetter:
			return st.settle(s)
		}
	}
	st.settled(s)
	return nil
}

// publishAndAck makes the publish s needs and, once it is confirmed, acks
// the delivery, on a goroutine of the hold actor's: the ack follows the
// confirm at once, so that a connection lost in between (the job held, and
// redelivered as well) is as unlikely as it can be. The queue actor is
// told after.
//
// A hold is made as p, the hold actor's plan of it, says; what the hold
// learned of its hold queue's lease goes back to the hold actor.
func (st *settler) publishAndAck(s *settlement, p holdPlan) (news leaseNews, err error) {
	if s.action == actHold {
		err = st.holdPublish(s, func(ctx context.Context, msg broker.Message) error {
			news, err = st.hold.carry(ctx, msg, p)
			return err
		})
	} else {
		err = st.publishOther(s)
	}
	if err != nil {
		return news, err
	}
	if s.pausing {
		s.out.PausedUntil = st.pausedUntil(s) // its job is back then
	}
	st.settled(s)
	return news, nil
}

// publishOf makes the publish s needs, if it has one: a hold with hold.
func (st *settler) publishOf(s *settlement, hold func(*settlement) error) error {
	if s.action == actHold {
		return hold(s)
	}
	return st.publishOther(s)
}

// publishOther makes the publish of a settlement that is not a hold: a
// dead letter or a copy; an ack needs none.
func (st *settler) publishOther(s *settlement) error {
	switch s.action {
	case actDeadLetter:
		return st.deadLetter(s)
	case actCopy:
		return st.publishCopy(s)
	}
	return nil
}

// holdPublish holds s's next envelope with hold, telling the publish hook.
func (st *settler) holdPublish(s *settlement, hold func(context.Context, broker.Message) error) error {
	msg := s.msg
	done := st.hooks.publish(s.ctx, &msg, publishIntent{op: s.op, delay: s.delay})
	err := hold(s.ctx, msg)
	done(err)
	return err
}

// pauseOn is when the pause a PauseQueue settlement asks for ends, if its
// job is held from now: once the job is back. It logs the pause.
func (st *settler) pauseOn(s *settlement) time.Time {
	s.out.PausedUntil = st.pausedUntil(s)
	s.log.Info("queue rate limited; pausing it", "until", s.out.PausedUntil, "reason", s.out.Reason)
	return s.out.PausedUntil
}

// pausedUntil is when a PauseQueue's pause ends if its job is held from
// now.
func (st *settler) pausedUntil(s *settlement) time.Time {
	return st.clock.Now().Add(st.set.pauseFor(s.msg.Queue, s.delay))
}

// holdNext holds s's next envelope through the hold actor and waits for
// the confirm (a suspect's settle). A PauseQueue pauses the queue once the
// job is held, before the ack (which frees a prefetch slot the broker
// would fill at once), until the job is back.
func (st *settler) holdNext(s *settlement) error {
	ask := func(ctx context.Context, msg broker.Message) error { return st.hold.ask(ctx, msg, s.delay, s.kind) }
	if err := st.holdPublish(s, ask); err != nil || !s.pausing {
		return err
	}
	until := st.pauseOn(s)
	// Wait for the queue actor to have paused, so that this goroutine's
	// next task, if it is the queue's, is held back.
	paused := make(chan struct{})
	_ = s.inbox.Put(context.Background(), pauseNotice{run: s.run, until: until, paused: paused})
	waitPaused(s.ctx, paused)
	return nil
}

// deadLetter tells the dead-letter hook (the first time), then moves s's
// message to the dead letters with its reason.
func (st *settler) deadLetter(s *settlement) error {
	if st.onDeadLetter != nil && s.event != nil {
		ev := *s.event
		s.event = nil
		st.hooks.guard("OnDeadLetter", func() { st.onDeadLetter(s.ctx, ev) })
	}
	msg := s.msg
	if s.out.Cause != "" {
		msg.Headers = maps.Clone(msg.Headers)
		if msg.Headers == nil {
			msg.Headers = make(map[string]string, 1)
		}
		msg.Headers[headerDeadLetterCause] = string(s.out.Cause)
	}
	done := st.hooks.publish(s.ctx, &msg, publishIntent{op: OpDeadLetter, reason: s.reason})
	err := st.backend.DeadLetter(s.ctx, broker.DeadLetter{Message: msg, Reason: s.reason})
	done(err)
	return err
}

// publishCopy publishes s's message to the back of its queue, within
// giveBackTimeout: the job may be one a stopping worker gives back.
func (st *settler) publishCopy(s *settlement) error {
	ctx, cancel := st.clock.WithTimeout(context.WithoutCancel(s.ctx), giveBackTimeout)
	defer cancel()
	msg := s.msg
	done := st.hooks.publish(ctx, &msg, publishIntent{op: s.op})
	err := st.backend.Publish(ctx, msg)
	done(err)
	return err
}

// settled acks s's delivery (or requeues it, for actRequeue) and tells the
// Deliver hook how it ended.
func (st *settler) settled(s *settlement) {
	if s.action == actRequeue {
		requeue(s.d, s.log)
		s.finishWith(s.out)
		return
	}
	if err := s.d.Ack(context.Background()); err != nil {
		st.settleFailed(s.log, slog.LevelError, "ack", err)
		s.lastErr = err
		s.finishAs(Requeued)
		return
	}
	s.logSettled(st)
	st.releaseKey(s) // a unique job that succeeded or was dead-lettered lets its key go
	s.finishWith(s.out)
}

// logSettled writes the line that says how a job ended, once it has: a
// success at DEBUG, so that a busy worker logs nothing per job that goes
// well; a deferral (Defer or PauseQueue) at INFO, one line with its delay
// and reason, for it is not a failure but says why a job is late; a retry
// and a job held back for want of a handler at WARN.
func (s *settlement) logSettled(st *settler) {
	switch s.out.Result {
	case Succeeded:
		s.log.Debug("job succeeded")
	case Deferred:
		wait, _ := broker.HoldTTL(s.delay, st.set.deferGranularity)
		s.log.Info("job deferred", "delay", s.delay, "waits", wait, "reason", s.out.Reason, "deferrals", s.msg.Deferrals)
	case Retried:
		wait, _ := broker.HoldTTL(s.delay, st.set.retryGranularity)
		s.log.Warn("job failed; retrying", "error", s.out.Err, "delay", s.delay, "waits", wait, "next_attempt", s.out.NextAttempt)
	case Cancelled:
		s.log.Info("job cancelled; it ends here", "ran", s.out.Ran, "error", s.out.Err)
	case Unhandled:
		wait, _ := broker.HoldTTL(s.delay, st.set.retryGranularity)
		s.log.Warn("no handler registered for the job's kind; holding it back to offer it again",
			"waits", wait, "waited", s.waited, "dead_letter_after", st.unknownKindWait)
	}
}

func (s *settlement) finishWith(out Outcome) {
	if s.hook != nil {
		s.hook.outcome(out)
		s.hook = nil
	}
}

// finishAs ends s as r (Requeued: its delivery goes back unsettled), with
// the last settle error.
func (s *settlement) finishAs(r Result) {
	s.finishWith(Outcome{Result: r, Err: s.out.Err, SettleErr: s.lastErr, Ran: s.out.Ran, HandlerDuration: s.out.HandlerDuration})
}

func (st *settler) settleFailed(log jobLog, level slog.Level, op string, err error) {
	st.failures.Add(1)
	log.log(level, "failed to settle delivery", []any{"operation", op, "error", err})
}
