package queuey

// The queue actor's part in settling (ARCHITECTURE.md, "One delivery's
// way"): a handler goroutine acks a success itself (taskSettled); a
// delivery that needs a publish first comes here (taskToSettle), goes to
// the hold actor, which publishes and acks on the confirm (publishDone),
// and a publish that failed is tried again after a backoff, never by
// running the handler again.

// ranToSettle takes a handler's run that is over: a PauseQueue pauses the
// queue before its handler goroutine takes another task (but not in a
// stop), then the delivery is settled.
func (l *queueLoop) ranToSettle(m taskToSettle) {
	l.running--
	s := m.s
	if s.pausing && l.phase == phaseStopping {
		s.pausing = false
	}
	if s.pausing {
		l.pause(l.w.settler.pauseOn(s))
	}
	if m.paused != nil {
		close(m.paused)
	}
	l.settle(s)
}

// settle has the hold actor make the publish s needs (a hold, a dead
// letter, a copy) and ack the delivery on its confirm; its answer comes
// back as publishDone.
func (l *queueLoop) settle(s *settlement) {
	l.publishing++
	s.run = l.run
	if err := l.w.hold.tell(s); err != nil {
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
		if l.failedPublish(s, err) {
			return
		}
	} else if s.pausing {
		l.pauseLonger(s)
	}
	l.settledOne(s)
}

// failedPublish takes a failed publish of s: kept to be tried again, or
// published as the dead letter it now is (both report true: not over), or
// given back to the broker unsettled (false: over).
func (l *queueLoop) failedPublish(s *settlement, err error) (pending bool) {
	switch l.w.settler.failedTry(s, err) {
	case tryAgain:
		l.keepRetry(s)
		return true
	case nowDeadLetter:
		l.settle(s)
		return true
	}
	l.w.settler.settled(s) // nowRequeue: s now gives the delivery back
	return false
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

// keepRetry keeps a settle that failed until its backoff is over (or, in
// a stop, gives its delivery back). Its delivery can only be settled on
// its own consumer, which is leased open until then.
func (l *queueLoop) keepRetry(s *settlement) {
	if l.phase == phaseStopping {
		l.w.settler.giveUpSettling(s)
		return
	}
	s.due = l.w.clock.Now().Add(l.w.settler.republishBackoff(s.tries))
	if !s.leased {
		if s.lease == nil {
			s.lease = l.lease
		}
		s.leased = true
		s.lease.pending++
	}
	l.retries = append(l.retries, s)
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

// reportedStale takes a message of an earlier run, whose consumer was lost
// with its deliveries: the broker has them back, to hand out again as
// redelivered, so a settlement ends as requeued, unsettled (and, with
// PoisonAfter, its job comes back a suspect, as from a crash).
func (l *queueLoop) reportedStale(m queueMsg) {
	switch m := m.(type) {
	case pauseNotice:
		close(m.paused)
		return // the suspect's own message follows
	case taskToSettle:
		if m.paused != nil {
			close(m.paused)
		}
		requeuedStale(m.s)
	case publishDone:
		requeuedStale(m.s)
	case suspectRan:
		requeuedStale(m.retry)
	}
	l.stale--
}

// requeuedStale ends s (if any), whose delivery the broker has back.
func requeuedStale(s *settlement) {
	if s == nil {
		return
	}
	s.finishAs(Requeued)
	if s.leased {
		s.leased = false
		s.lease.release()
	}
}
