// Package fleet lets a queue set's workers report themselves through the
// broker and take commands from it: an Agent beside each worker sends a
// heartbeat (who it is, what it consumes, runs and has paused) every
// Interval to every listener of the set's heartbeat topic, and pauses
// and resumes queues when a command (package console's) says so. It
// needs a backend that is a broker.Broadcaster (both of queuey's are).
//
// Nothing polls a worker: heartbeats and commands are messages. A worker
// whose heartbeats stop is gone after DropAfter (three intervals).
package fleet

import (
	"time"
)

// DefaultInterval is how often an Agent sends its heartbeat by default.
const DefaultInterval = 5 * time.Second

// DropAfter is how many intervals a worker may go unheard before a
// listener takes it for gone.
const DropAfter = 3

// HeartbeatTopic is the topic a set's heartbeats go to (prefix is the
// QueueSet's).
func HeartbeatTopic(prefix string) string { return "queuey.fleet." + prefix + ".heartbeat" }

// CommandTopic is the topic a set's commands go to.
func CommandTopic(prefix string) string { return "queuey.fleet." + prefix + ".command" }

// Heartbeat is what a worker says of itself.
type Heartbeat struct {
	ID          string           `json:"id"`
	Host        string           `json:"host"`
	PID         int              `json:"pid"`
	Version     string           `json:"version"`
	Started     time.Time        `json:"started"`
	Sent        time.Time        `json:"sent"`
	IntervalMs  int64            `json:"interval_ms"`
	Concurrency int              `json:"concurrency"`
	Queues      []QueueReport    `json:"queues"`
	Schedules   []ScheduleReport `json:"schedules,omitempty"`
}

// Interval is the heartbeat's interval.
func (h Heartbeat) Interval() time.Duration { return time.Duration(h.IntervalMs) * time.Millisecond }

// QueueReport is what a worker says of one queue it consumes.
type QueueReport struct {
	Name     string `json:"name"`
	InFlight int    `json:"in_flight"`
	// Done counts the deliveries the worker settled since it started.
	Done uint64 `json:"done"`
	// P50Ms and P99Ms are how late jobs started over the last interval,
	// when any started (Late is then true).
	Late  bool  `json:"late"`
	P50Ms int64 `json:"p50_ms"`
	P99Ms int64 `json:"p99_ms"`
	// PausedUntil is set while the queue is paused; PausedBy says who
	// paused it ("console", or "handler" for a PauseQueue).
	PausedUntil time.Time `json:"paused_until,omitzero"`
	PausedBy    string    `json:"paused_by,omitempty"`
}

// ScheduleReport is what a worker says of one schedule it runs.
type ScheduleReport struct {
	Name     string    `json:"name"`
	Spec     string    `json:"spec"`
	Location string    `json:"location"`
	Missed   string    `json:"missed"`
	Leads    bool      `json:"leads"`
	LastTick time.Time `json:"last_tick,omitzero"`
	NextTick time.Time `json:"next_tick,omitzero"`
}

// Command asks the workers to pause or resume a queue.
type Command struct {
	Op    string    `json:"op"` // OpPause or OpResume
	Queue string    `json:"queue"`
	Until time.Time `json:"until,omitzero"`
}

// The commands.
const (
	OpPause  = "pause"
	OpResume = "resume"
)
