package rabbitmq

import "time"

// holdLeases is the backend's record of the hold queues it declared and
// when: a hold queue expires 2×ttl after its last declare, and is declared
// again before a publish once its last declare is ttl/2 old (see Hold).
// Backend.mu guards it.
//
// The record is bounded by what is live: a hold queue's entry is of no
// use once it is ttl/2 old (the next hold declares the queue again
// whatever it says), so those are swept out whenever the record has grown
// to twice its size after the last sweep. A worker that holds for many
// different waits (a Retry-After of any number of seconds, retries with
// jitter) would otherwise keep an entry for each wait it ever used.
type holdLeases struct {
	byQueue map[string]holdLease
	swept   int // entries left by the last sweep
}

// holdLease is when a hold queue was last declared, and its TTL.
type holdLease struct {
	declared time.Time
	ttl      time.Duration
}

// leaseSweepFloor is the least size the record grows to before a sweep.
const leaseSweepFloor = 64

func newHoldLeases() holdLeases { return holdLeases{byQueue: map[string]holdLease{}} }

// fresh reports whether hold was declared less than ttl/2 before now.
func (l *holdLeases) fresh(hold string, ttl time.Duration, now time.Time) bool {
	lease, ok := l.byQueue[hold]
	return ok && now.Sub(lease.declared) < ttl/2
}

// declared records that a declare of hold, for ttl, started at now, and
// sweeps the record if it has grown enough since the last sweep.
func (l *holdLeases) declared(hold string, ttl time.Duration, now time.Time) {
	l.byQueue[hold] = holdLease{declared: now, ttl: ttl}
	if len(l.byQueue) > 2*max(l.swept, leaseSweepFloor) {
		l.sweep(now)
	}
}

// sweep forgets the leases that no longer spare a declare.
func (l *holdLeases) sweep(now time.Time) {
	for hold, lease := range l.byQueue {
		if now.Sub(lease.declared) >= lease.ttl/2 {
			delete(l.byQueue, hold)
		}
	}
	l.swept = len(l.byQueue)
}

// forget drops hold's lease: the queue went away, declare it again.
func (l *holdLeases) forget(hold string) { delete(l.byQueue, hold) }

// reset forgets every lease: after a reconnect, the broker may have lost
// the queues.
func (l *holdLeases) reset() {
	clear(l.byQueue)
	l.swept = 0
}
