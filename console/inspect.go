package console

import (
	"context"
	"errors"
	"time"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
)

// Facts are what a broker tells of one of its queues. A count the broker
// cannot tell is -1.
type Facts struct {
	Ready, Unacked, Consumers int
	// Type is the queue's type, when the broker says.
	Type string
	// OldestDue is when the first message of a hold queue is due, when
	// the broker can tell; zero otherwise.
	OldestDue time.Time
}

// Snapshot is one look at the broker: the facts of the queues it could
// see, by broker name, and what it could not show.
type Snapshot struct {
	Queues map[string]Facts
	// Complete says that Queues lists every queue of the broker, so a
	// queue it lacks does not exist (hold queues are found so).
	Complete bool
	// Limits says, in a sentence each, what this look could not show.
	Limits []string
	// Requests is how many requests to the broker the look cost.
	Requests int
}

// Inspector looks at the broker for the queues named (broker names: work,
// dead-letter and suspects queues; hold queues are found by a complete
// Snapshot, or asked for by the work queue's name).
type Inspector interface {
	Inspect(ctx context.Context, names []string) (Snapshot, error)
}

// unknown is a count a broker cannot tell.
const unknown = -1

// memoryInspector reads the memory backend's own inspection helpers.
type memoryInspector struct{ b *memory.Backend }

func (m memoryInspector) Inspect(_ context.Context, names []string) (Snapshot, error) {
	s := Snapshot{Queues: map[string]Facts{}, Complete: true}
	for _, n := range m.b.Queues() {
		spec, _ := m.b.QueueSpec(n)
		s.Queues[n] = Facts{Ready: m.b.Pending(n), Unacked: m.b.InFlight(n), Consumers: m.b.Consumers(n), Type: spec.Type.String()}
		due := m.b.HoldDue(n)
		for h, c := range m.b.HoldQueues(n) {
			s.Queues[h] = Facts{Ready: c, Unacked: 0, Consumers: 0, Type: "classic", OldestDue: due[h]}
		}
	}
	return s, nil
}

// depthInspector asks any backend for the ready count of each queue
// named, one request each: all a Backend can tell.
type depthInspector struct{ b broker.Backend }

func (d depthInspector) Inspect(ctx context.Context, names []string) (Snapshot, error) {
	s := Snapshot{Queues: map[string]Facts{}, Limits: []string{
		"Without RabbitMQ's management API (Options.Management) the console sees only how many messages are ready on each queue: not those workers hold (unacked), nor consumers, nor the hold queues and delay levels, nor the queues' types.",
	}}
	for _, n := range names {
		s.Requests++
		c, err := d.b.Depth(ctx, n)
		if errors.Is(err, broker.ErrNoQueue) {
			continue
		}
		if err != nil {
			return s, err
		}
		s.Queues[n] = Facts{Ready: c, Unacked: unknown, Consumers: unknown}
	}
	return s, nil
}

// inspectorFor is the inspector a backend allows without options.
func inspectorFor(b broker.Backend) Inspector {
	if m, ok := b.(*memory.Backend); ok {
		return memoryInspector{m}
	}
	return depthInspector{b}
}
