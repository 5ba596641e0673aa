package queuey

import (
	"time"

	"github.com/queuey-go/queuey/broker"
)

// The suspects' turn, a queue actor's side of PoisonAfter (poison.go has
// the handler's side): when the queue's suspects queue holds jobs, the
// actor stops its consumer (phaseIsolating), lets what it holds run, then
// hands the pool one task at a time that takes a suspect and runs it
// alone; a turn that finds none ends the isolation (phaseDraining, and so
// consuming again). A pause ends it too; the suspects are looked for each
// time the actor starts consuming, and every suspectLook while it does.

// suspectLook is how often a consuming queue actor looks for suspects no
// worker is running: those of a worker stopped before it ran them.
const suspectLook = time.Minute

// suspectWatch is the suspects' state a queue actor keeps.
type suspectWatch struct {
	nextLook time.Time // when to look for suspects again; zero without PoisonAfter
}

// isolate stops taking deliveries so that, once what the queue actor holds
// has run, the suspects run alone. A pause or a stop comes first: a
// paused actor looks for them when it consumes again.
func (l *queueLoop) isolate() {
	if l.phase != phaseConsuming {
		return
	}
	l.stopConsumer()
	l.phase = phaseIsolating
}

// lookWhenDue looks for suspects once suspectLook has passed since the
// last look, while the queue is consumed.
func (l *queueLoop) lookWhenDue() {
	if l.w.poisonAfter > 0 && l.phase == phaseConsuming && !l.suspects.nextLook.After(l.w.clock.Now()) {
		l.lookForSuspects()
	}
}

// lookForSuspects isolates if the suspects queue holds jobs: those a worker
// that died left behind, or a pause kept from running, run first.
func (l *queueLoop) lookForSuspects() {
	if l.w.poisonAfter == 0 {
		return
	}
	l.suspects.nextLook = l.w.clock.Now().Add(suspectLook)
	n, err := l.w.backend.Depth(l.ctx, broker.SuspectQueueName(l.q.broker))
	if err != nil {
		l.w.log.Warn("could not look for jobs to run alone", "queue", l.q.broker, "error", err)
	}
	if n > 0 {
		l.isolate()
	}
}

// suspectsTurn reports whether the pool is to run a suspect now: the
// actor isolates and holds nothing else, running or not.
func (l *queueLoop) suspectsTurn() bool {
	return l.phase == phaseIsolating && l.in == nil && l.held() == 0 && l.running == 0 && l.publishing == 0
}

// suspectDone takes the end of a suspect's turn: one that found none ends
// the isolation; a suspect whose settle failed is kept to be tried again.
func (l *queueLoop) suspectDone(m suspectRan) {
	if l.phase == phaseIsolating && !m.found {
		l.phase = phaseDraining
	}
	if m.retry != nil {
		l.keepRetry(m.retry)
	}
}
