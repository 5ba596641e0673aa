package queuey

import (
	"time"

	"github.com/queuey-go/queuey/broker"
)

// holdLeases is a record of the hold queues one keeper declared, and when:
// a hold queue expires 2×ttl after its last declare (x-expires; publishes
// do not count), so a hold declares its queue first once the last declare
// is ttl/2 old, and not before (a declare is a round trip to the broker).
// Its keeper is the worker's hold actor, whose state it is, or a producer,
// under the producer's lock. A hold decides with plan and reports what it
// did with learn.
//
// The record is bounded by what is live: a hold queue's entry is of no
// use once it is ttl/2 old (the next hold declares the queue again
// whatever it says), so those are swept out whenever the record has grown
// to twice its size after the last sweep. A worker that holds for many
// different waits (a Retry-After of any number of seconds, retries with
// jitter) would otherwise keep an entry for each wait it ever used.
type holdLeases struct {
	byQueue map[holdKey]time.Time // when each hold queue was last declared
	swept   int                   // entries left by the last sweep
}

// holdKey names a hold queue by its work queue and ttl, without the
// string HoldQueueName makes of them (a hold each, on the hot path).
type holdKey struct {
	queue string
	ttl   time.Duration
}

// String is the hold queue's broker name.
func (k holdKey) String() string { return broker.HoldQueueName(k.queue, k.ttl) }

// leaseSweepFloor is the least size the record grows to before a sweep.
const leaseSweepFloor = 64

func newHoldLeases() holdLeases { return holdLeases{byQueue: map[holdKey]time.Time{}} }

// holdPlan is one hold as the keeper of the record decided it: where the
// job waits, and whether that hold queue is declared before the publish.
type holdPlan struct {
	spec    broker.QueueSpec // the work queue's: as the set declares it, or its name alone
	inSet   bool             // the set declares spec's queue
	ttl     time.Duration    // the wait, rounded (broker.HoldTTL)
	hold    holdKey          // the hold queue; zero for the delay levels (a quorum queue's)
	declare bool             // declare the hold queue first
	since   time.Time        // when the declare the publish relies on was made
	err     error            // the wait cannot be held (a delay HoldTTL refuses)
	// For the log line of the hold: why the job waits, and the delay asked.
	kind  holdKind
	delay time.Duration
}

// due is how long the job waits: the ttl, or on the delay levels the whole
// seconds they wait.
func (p holdPlan) due() time.Duration {
	if p.levels() {
		return broker.LevelsTTL(p.ttl)
	}
	return p.ttl
}

// staleAt reports whether p's hold queue's declare is ttl/2 old or more at
// now: a hold into it declares it first.
func (p holdPlan) staleAt(now time.Time) bool {
	return !p.levels() && now.Sub(p.since) >= p.ttl/2
}

// levels reports a hold into the delay levels, which has no hold queue.
func (p holdPlan) levels() bool { return p.hold == holdKey{} }

// leaseNews is what a hold learned of its hold queue's lease, for the
// record's keeper: hold was declared at at, or its lease is to be
// forgotten (a declare of it failed). A zero leaseNews says nothing.
type leaseNews struct {
	hold   holdKey
	at     time.Time
	forget bool
}

// plan decides a hold of ttl for spec's queue at now: a hold queue whose
// lease is not fresh is declared first (and one whose lease is fresh now
// but no longer when its hold is made is declared then: holder.carry).
// The record takes a lease only from a declare that succeeded (learn):
// until one has, every hold declares, since a hold that skipped its
// declare on the strength of one still under way (or failed) could
// publish into a queue of that name declared otherwise, by hand, with no
// way back to its work queue.
func (l *holdLeases) plan(spec broker.QueueSpec, ttl time.Duration, now time.Time) holdPlan {
	p := holdPlan{spec: spec, ttl: ttl}
	if spec.Type == broker.Quorum {
		return p // the delay levels are declared with the queue
	}
	p.hold = holdKey{spec.Name, ttl}
	if l.fresh(p.hold, now) {
		p.since = l.byQueue[p.hold]
		return p
	}
	p.declare, p.since = true, now
	return p
}

// learn records what a hold learned: a declare newer than the record's,
// or a lease to forget.
func (l *holdLeases) learn(n leaseNews) {
	if n.hold == (holdKey{}) {
		return
	}
	switch declared, ok := l.byQueue[n.hold]; {
	case n.forget:
		l.forget(n.hold)
	case !ok || n.at.After(declared):
		l.record(n.hold, n.at)
	}
}

// fresh reports whether hold was declared less than its ttl/2 before now.
func (l *holdLeases) fresh(hold holdKey, now time.Time) bool {
	declared, ok := l.byQueue[hold]
	return ok && now.Sub(declared) < hold.ttl/2
}

// record records that a declare of hold started at now, and sweeps the
// record if it has grown enough since the last sweep.
func (l *holdLeases) record(hold holdKey, now time.Time) {
	l.byQueue[hold] = now
	if len(l.byQueue) > 2*max(l.swept, leaseSweepFloor) {
		l.sweep(now)
	}
}

// sweep forgets the leases that no longer spare a declare.
func (l *holdLeases) sweep(now time.Time) {
	for hold, declared := range l.byQueue {
		if now.Sub(declared) >= hold.ttl/2 {
			delete(l.byQueue, hold)
		}
	}
	l.swept = len(l.byQueue)
}

// forget drops hold's lease: the queue went away, declare it again.
func (l *holdLeases) forget(hold holdKey) { delete(l.byQueue, hold) }
