package inspect

import (
	"sort"
	"strings"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
)

// Depth is what a Snapshot tells of one queue of a set. A count it cannot
// tell is Unknown.
type Depth struct {
	// Queue is the queue's name in its set; BrokerName its name on the
	// broker.
	Queue, BrokerName string
	// Type is the work queue's type, as the broker says; "" when it does
	// not.
	Type string
	// Missing says that the broker has no such work queue.
	Missing bool
	// Ready and Unacked count the work queue's messages waiting for a
	// consumer and held by one; Consumers counts its consumers.
	Ready, Unacked, Consumers int
	// Held counts the messages waiting in the queue's hold queues. A
	// quorum queue's waits are in delay levels that every quorum queue of
	// the broker shares, so its count is Unknown.
	Held int
	// Dead and Suspects count the messages of its dead-letter and
	// suspects queues.
	Dead, Suspects int
}

// Depths are the depths of set's queues, in the set's order.
func (s Snapshot) Depths(set queuey.QueueSet) []Depth {
	out := make([]Depth, 0, len(set.Queues))
	for _, q := range set.Queues {
		out = append(out, s.depth(q.Name, set.BrokerName(q.Name)))
	}
	return out
}

func (s Snapshot) depth(name, b string) Depth {
	f, ok := s.Queues[b]
	d := Depth{Queue: name, BrokerName: b, Type: f.Type, Missing: !ok, Ready: f.Ready, Unacked: f.Unacked, Consumers: f.Consumers,
		Dead: s.ready(broker.DeadQueueName(b)), Suspects: s.ready(broker.SuspectQueueName(b)), Held: Unknown}
	if !ok {
		d.Ready, d.Unacked, d.Consumers = Unknown, Unknown, Unknown
	}
	if s.Complete && d.Type != broker.Quorum.String() {
		d.Held = 0
		for _, h := range s.Holds(b) {
			d.Held += h.Count
		}
	}
	return d
}

// ready is the ready count of the queue, or 0 for one the broker does not
// have (a dead-letter queue nothing was dead-lettered to is declared, a
// suspects queue only once needed) when the look was complete or the
// queue is a dead-letter queue, else Unknown.
func (s Snapshot) ready(name string) int {
	if f, ok := s.Queues[name]; ok {
		return f.Ready
	}
	if s.Complete || strings.HasSuffix(name, broker.DeadSuffix) {
		return 0
	}
	return Unknown
}

// Hold is one hold queue of a work queue.
type Hold struct {
	Name      string
	Delay     time.Duration
	Count     int
	OldestDue time.Time
}

// Holds lists the hold queues of the work queue named b (its broker name)
// that the snapshot has, shortest delay first. Only a Complete snapshot
// has them all.
func (s Snapshot) Holds(b string) []Hold {
	var out []Hold
	for n, f := range s.Queues {
		if q, ttl, ok := broker.ParseHoldQueueName(n); ok && q == b {
			out = append(out, Hold{Name: n, Delay: ttl, Count: f.Ready + max(0, f.Unacked), OldestDue: f.OldestDue})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Delay < out[j].Delay })
	return out
}
