package memory

import "time"

// HoldDue maps each of queue's hold queues that holds messages to when the
// first of them is due to land on queue.
func (b *Backend) HoldDue(queue string) map[string]time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseDueLocked()
	out := map[string]time.Time{}
	for _, h := range b.held {
		if h.msg.Queue != queue {
			continue
		}
		if t, ok := out[h.hold]; !ok || h.due.Before(t) {
			out[h.hold] = h.due
		}
	}
	return out
}
