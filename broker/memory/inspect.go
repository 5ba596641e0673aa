package memory

import (
	"maps"
	"slices"

	"github.com/queuey-go/queuey/broker"
)

// The inspection helpers below read the backend's state as of the clock's
// current time: held messages that are due are released first.

// Pending counts the messages waiting on queue: not handed to a consumer,
// not held. 0 for a queue that does not exist.
func (b *Backend) Pending(queue string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseDueLocked()
	if q, ok := b.queues[queue]; ok {
		b.expireLocked(q)
		return q.pending()
	}
	return 0
}

// Held counts the messages waiting in queue's hold queues. A message is
// never counted both here and in Pending.
func (b *Backend) Held(queue string) int {
	return sumValues(b.HoldQueues(queue))
}

// HoldQueues maps each of queue's hold queues that holds messages to how
// many it holds.
func (b *Backend) HoldQueues(queue string) map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseDueLocked()
	out := map[string]int{}
	for _, h := range b.held {
		if h.msg.Queue == queue {
			out[h.hold]++
		}
	}
	return out
}

// InFlight counts queue's deliveries handed to consumers and not yet settled.
func (b *Backend) InFlight(queue string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseDueLocked()
	n := 0
	if q, ok := b.queues[queue]; ok {
		for _, c := range append(slices.Clone(q.consumers), q.stopped...) {
			n += len(c.unacked)
		}
	}
	return n
}

// Acked lists the messages acked on queue, in ack order, that are among
// the newest Options.KeepAcked acked on any queue (AckedCount counts them
// all). A retry or a deferral acks the original after its next run was
// scheduled, so this counts runs, not jobs.
func (b *Backend) Acked(queue string) []broker.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q, ok := b.queues[queue]; ok {
		return b.ackedLocked(q)
	}
	return nil
}

// AckedCount is how many messages were acked on queue, all of them,
// whether Acked still lists them or not.
func (b *Backend) AckedCount(queue string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q, ok := b.queues[queue]; ok {
		return q.ackCount
	}
	return 0
}

// DeadLetters lists what waits in queue's dead-letter queue, oldest first,
// with the reason each was dead-lettered.
func (b *Backend) DeadLetters(queue string) []broker.DeadLetter {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, ok := b.queues[broker.DeadQueueName(queue)]
	if !ok {
		return nil
	}
	var out []broker.DeadLetter
	for _, l := range q.levels {
		for _, s := range l {
			out = append(out, broker.DeadLetter{Message: s.msg, Reason: s.msg.Headers[broker.HeaderDeathReason]})
		}
	}
	return out
}

// Queues lists the names of every queue, dead-letter queues included, sorted.
func (b *Backend) Queues() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.queues))
}

// QueueSpec returns how queue was declared.
func (b *Backend) QueueSpec(queue string) (broker.QueueSpec, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, ok := b.queues[queue]
	if !ok {
		return broker.QueueSpec{}, false
	}
	return q.spec, true
}

// Consumers counts queue's live consumers.
func (b *Backend) Consumers(queue string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q, ok := b.queues[queue]; ok {
		return len(q.consumers)
	}
	return 0
}

// Closed reports whether Close was called.
func (b *Backend) Closed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
