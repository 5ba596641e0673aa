package queuey

import (
	"fmt"

	"github.com/queuey-go/queuey/broker"
	"log/slog"
	"time"
)

// republishTries is how many times a retry's or deferral's hold, or a copy,
// is published before the worker stops trying: a hold then goes to the
// dead letters, a copy back to the queue. A dead letter is tried for as
// long as the worker runs, every maxRepublishDelay after that.
const republishTries = 5

// maxRepublishDelay caps the backoff between tries of a failed publish.
const maxRepublishDelay = 30 * time.Second

// afterFailure is what comes of a settlement whose publish failed.
type afterFailure int

const (
	tryAgain      afterFailure = iota // after a backoff: the queue actor keeps it, the delivery unacked
	nowDeadLetter                     // a hold tried too often: s is now its dead letter, to publish
	nowRequeue                        // a copy tried too often: s now requeues the delivery
)

// failedTry counts a failed publish of s and says what comes next: another
// try after a backoff (the handler does not run again), or, past
// republishTries, the dead letters for a hold, the queue for a copy. A
// dead letter is tried for as long as the worker runs.
func (st *settler) failedTry(s *settlement, err error) afterFailure {
	s.tries++
	s.lastErr = err
	st.settleFailed(s.log, slog.LevelWarn, s.opName(), err)
	if s.tries < republishTries {
		return tryAgain
	}
	switch s.action {
	case actHold:
		s.log.Error("the broker refused the job's hold; dead-lettering it", "hold", s.kind.String(), "tries", s.tries, "error", err)
		s.toDeadLetter(fmt.Sprintf("could not be held for its %s (%v) after %d tries: %v", s.kind, s.delay, s.tries, err))
		return nowDeadLetter
	case actCopy:
		s.log.Error("could not publish the job again; requeueing it", "tries", s.tries, "error", err)
		st.givenBack.add(s.d.Message().ID) // it comes back redelivered: no crash to count
		s.action, s.suspected = actRequeue, false
		return nowRequeue
	}
	if !s.stuck {
		s.stuck = true
		s.log.Error("could not dead-letter the job; it stays unacked, and its dead letter is tried again for as long as the worker runs",
			"every", maxRepublishDelay, "tries", s.tries, "error", err)
	}
	return tryAgain
}

// kept is s for the queue actor to keep until its next try: a copy on
// the heap, so that a settlement that goes through the first time (most
// do) stays on its handler goroutine's stack.
func (s *settlement) kept() *settlement {
	c := *s
	return &c
}

// republishBackoff is the wait before try tries+1 of a failed publish:
// RepublishDelay doubled at each try, capped at maxRepublishDelay, and
// jittered to between half of that and all of it, so that a fleet whose
// publishes failed together does not try again together.
func (st *settler) republishBackoff(tries int) time.Duration {
	d := st.republishDelay
	for i := 1; i < tries && d < maxRepublishDelay; i++ {
		d *= 2
	}
	d = min(d, maxRepublishDelay)
	return d/2 + time.Duration(st.republishJitter.Int64N(int64(d/2+1)))
}

// giveUpSettling returns s's delivery to the broker unsettled: the worker
// is stopping. With PoisonAfter, it is remembered as given back, so that
// its redelivery is not counted as a crash.
func (st *settler) giveUpSettling(s *settlement) {
	if st.poisonAfter > 0 {
		st.givenBack.add(s.d.Message().ID)
	}
	requeue(s.d, s.log)
	s.finishAs(Requeued)
	if s.leased {
		s.lease.release()
	}
}

// consumerLease keeps a consumer open while settles of its deliveries wait
// to be tried again: a delivery is acked on its own consumer's channel
// only. The queue actor owns it (runSuspect makes one and hands it over
// in its report).
type consumerLease struct {
	c       broker.Consumer
	retired bool // nothing more is taken through it
	pending int  // its deliveries whose settle waits to be tried again
	ended   bool
}

// retire takes nothing more through the consumer, and ends it once no
// settle of its waits.
func (c *consumerLease) retire() {
	c.retired = true
	c.endIfDone()
}

// release says a settle of the consumer's is over.
func (c *consumerLease) release() {
	c.pending--
	c.endIfDone()
}

func (c *consumerLease) endIfDone() {
	if c.retired && c.pending == 0 && !c.ended {
		c.ended = true
		c.c.Cancel()
	}
}

func (s *settlement) opName() string {
	switch s.action {
	case actHold:
		return s.kind.String()
	case actDeadLetter:
		return "dead letter"
	case actCopy:
		return "publish again"
	}
	return "ack"
}

// toDeadLetter turns a hold the broker keeps refusing into a dead letter of
// the job as it was delivered, with reason.
func (s *settlement) toDeadLetter(reason string) {
	s.action, s.msg, s.reason = actDeadLetter, original(s.held.env), reason
	s.event = &DeadLetterEvent{Job: s.held.jc, Cause: CauseHoldRefused, Reason: reason, Err: s.out.Err}
	o := s.out
	o.Result, o.Cause, o.Reason, o.Delay, o.NextAttempt, o.PausedUntil = DeadLettered, CauseHoldRefused, reason, 0, 0, time.Time{}
	s.out = o
	s.tries, s.lastErr = 0, nil
}
