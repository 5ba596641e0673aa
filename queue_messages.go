package queuey

import (
	"time"

	"github.com/queuey-go/queuey/broker"
)

// queueMsg is a message to a queue actor's inbox, one type per meaning:
// from a handler goroutine about the task it was handed, from the hold
// actor about a settlement's publish, or a command from Worker.Pause and
// Resume. A message about a task names the run that handed it out; the
// actor treats one of an earlier run, whose consumer was lost, as stale.
type queueMsg interface {
	runOf() int // the run it is about, or anyRun
}

// anyRun is the run of a command: it is about the queue, not a delivery.
const anyRun = -1

// taskSettled: a task ran and its handler goroutine settled the delivery
// itself (an ack, or a requeue), by a write the broker does not answer.
// It is the message of most jobs, and it fits an interface without an
// allocation.
type taskSettled struct{ run int }

// taskToSettle: a task ran and its delivery needs a publish first (a
// retry's or a deferral's hold, a dead letter, a copy), which the actor
// has the hold actor make. paused, for a PauseQueue, is closed once the
// actor has paused: the handler goroutine waits for it before it takes
// another task, which may be the queue's.
type taskToSettle struct {
	run    int
	s      *settlement
	paused chan struct{}
}

// taskNotStarted: the handler goroutine did not start the task, because
// the actor paused or stopped since it handed it out; d (nil for a
// suspect's turn) goes back to the broker.
type taskNotStarted struct {
	run   int
	d     broker.Delivery
	alone bool
}

// suspectRan: a suspect's turn is over (suspects.go). found says it found
// one and ran it; retry is its settlement if settling it failed, to be
// tried again after a backoff on the consumer it came from (retry.lease).
type suspectRan struct {
	run   int
	found bool
	retry *settlement
}

// pauseNotice: a suspect's handler asked for PauseQueue and its job is
// held; the actor pauses until then and closes paused.
type pauseNotice struct {
	run    int
	until  time.Time
	paused chan struct{}
}

// publishDone: the hold actor made (err nil) or failed the publish s
// needed; when made, the delivery is acked.
type publishDone struct {
	run int
	s   *settlement
	err error
}

// pauseCommand: Worker.Pause (until in the future) or Worker.Resume
// (until zero). done is closed once the actor has taken it.
type pauseCommand struct {
	until time.Time
	done  chan struct{}
}

// cancelGate: the worker's cancellations actor has read the ledger of
// cancellations to its end (open), or lost it (closed): a queue actor
// whose gate is closed hands nothing out, for it cannot tell which jobs
// are cancelled.
type cancelGate struct{ open bool }

func (m taskSettled) runOf() int    { return m.run }
func (m taskToSettle) runOf() int   { return m.run }
func (m taskNotStarted) runOf() int { return m.run }
func (m suspectRan) runOf() int     { return m.run }
func (m pauseNotice) runOf() int    { return m.run }
func (m publishDone) runOf() int    { return m.run }
func (m pauseCommand) runOf() int   { return anyRun }
func (m cancelGate) runOf() int     { return anyRun }
