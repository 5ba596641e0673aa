package inspect

import (
	"context"
	"errors"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
)

// Unknown is a count the broker cannot tell.
const Unknown = -1

// Facts are what a broker tells of one of its queues. A count it cannot
// tell is Unknown.
type Facts struct {
	Ready, Unacked, Consumers int
	// Type is the queue's type ("classic", "quorum"), when the broker
	// says; "" otherwise.
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

// Inspector looks at the broker for the queues named (broker names).
// An Inspector whose Snapshot is Complete lists every queue of the broker
// whatever the names, the hold queues and delay levels included.
type Inspector interface {
	Inspect(ctx context.Context, names []string) (Snapshot, error)
}

// For is the inspector of backend: the memory backend's own inspection;
// else m, RabbitMQ's management API, when it is not nil; else one Depth
// call per queue named.
func For(backend broker.Backend, m *Management) Inspector {
	if mb, ok := backend.(*memory.Backend); ok {
		return memoryInspector{mb}
	}
	if m != nil {
		return m
	}
	return depthInspector{backend}
}

// Names are the broker names of set's work, dead-letter and suspects
// queues, which an Inspector is asked for: three a queue.
func Names(set queuey.QueueSet) []string {
	names := make([]string, 0, 3*len(set.Queues))
	for _, q := range set.Queues {
		b := set.BrokerName(q.Name)
		names = append(names, b, broker.DeadQueueName(b), broker.SuspectQueueName(b))
	}
	return names
}

// memoryInspector reads the memory backend's own inspection helpers.
type memoryInspector struct{ b *memory.Backend }

func (m memoryInspector) Inspect(_ context.Context, _ []string) (Snapshot, error) {
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

// WithoutManagement is the limit of a look at RabbitMQ without its
// management API.
const WithoutManagement = "Without RabbitMQ's management API only how many messages are ready on each queue can be seen: not those workers hold (unacked), nor consumers, nor the hold queues and delay levels, nor the queues' types."

// depthInspector asks any backend for the ready count of each queue
// named, one request each: all a Backend can tell.
type depthInspector struct{ b broker.Backend }

func (d depthInspector) Inspect(ctx context.Context, names []string) (Snapshot, error) {
	s := Snapshot{Queues: map[string]Facts{}, Limits: []string{WithoutManagement}}
	for _, n := range names {
		s.Requests++
		c, err := d.b.Depth(ctx, n)
		if errors.Is(err, broker.ErrNoQueue) {
			continue
		}
		if err != nil {
			return s, err
		}
		s.Queues[n] = Facts{Ready: c, Unacked: Unknown, Consumers: Unknown}
	}
	return s, nil
}
