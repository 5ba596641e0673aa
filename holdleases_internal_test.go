package queuey

import (
	"fmt"
	"testing"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// A lease spares the declare of its hold queue for ttl/2, and no longer.
func TestAHoldLeaseIsFreshForHalfItsTTL(t *testing.T) {
	l := newHoldLeases()
	t0 := time.Unix(1_700_000_000, 0)
	if l.fresh(holdKey{"q", time.Minute}, t0) {
		t.Fatal("a hold queue never declared is fresh; want it declared")
	}
	l.record(holdKey{"q", time.Minute}, t0)
	for _, c := range []struct {
		after time.Duration
		fresh bool
	}{{0, true}, {29 * time.Second, true}, {30 * time.Second, false}, {time.Hour, false}} {
		if got := l.fresh(holdKey{"q", time.Minute}, t0.Add(c.after)); got != c.fresh {
			t.Errorf("%v after its declare: fresh = %v, want %v", c.after, got, c.fresh)
		}
	}
	l.forget(holdKey{"q", time.Minute})
	if l.fresh(holdKey{"q", time.Minute}, t0) {
		t.Error("a lease forgotten is fresh; want the queue declared again")
	}
}

// The record keeps what is live and no more than about twice that: a
// worker that holds for a new wait every hour, for ever, keeps the leases
// of the last hour's, not one for every wait it ever used.
func TestTheHoldLeasesAreSweptOfWhatNoLongerSparesADeclare(t *testing.T) {
	l := newHoldLeases()
	t0 := time.Unix(1_700_000_000, 0)
	const perHour, hours = 100, 10
	for h := range hours {
		now := t0.Add(time.Duration(h) * time.Hour)
		for i := range perHour {
			l.record(holdKey{fmt.Sprint("q", h*perHour+i+1), time.Minute}, now)
		}
	}
	if got, most := len(l.byQueue), 2*perHour+1; got > most {
		t.Errorf("after %d hours of %d new waits each, the record holds %d leases; want at most %d", hours, perHour, got, most)
	}
	last := t0.Add((hours - 1) * time.Hour)
	for i := range perHour {
		name := holdKey{fmt.Sprint("q", (hours-1)*perHour+i+1), time.Minute}
		if !l.fresh(name, last) {
			t.Fatalf("%s, declared in the last hour, was swept out; want it kept", name)
		}
	}
}

// Holds declare their queue until a declare has succeeded, not on the
// strength of one still under way: that one may fail (a queue of the name
// declared otherwise, by hand), and a hold that skipped its own would be
// published into that queue, with no way back to its work queue.
func TestHoldsDeclareUntilADeclareHasSucceeded(t *testing.T) {
	l := newHoldLeases()
	t0 := time.Unix(1_700_000_000, 0)
	spec := broker.QueueSpec{Name: "q", Durable: true}
	first, second := l.plan(spec, time.Minute, t0), l.plan(spec, time.Minute, t0)
	if !first.declare || !second.declare {
		t.Fatalf("two holds planned before any declare ended: declare %v and %v; want both", first.declare, second.declare)
	}
	l.learn(leaseNews{hold: first.hold, forget: true}) // the first's declare failed
	l.learn(leaseNews{hold: second.hold, at: t0})
	if p := l.plan(spec, time.Minute, t0.Add(time.Second)); p.declare || !p.since.Equal(t0) {
		t.Errorf("a hold after a declare succeeded: declare %v, relying on the declare of %v; want none, %v", p.declare, p.since, t0)
	}
	l.learn(leaseNews{hold: first.hold, at: t0.Add(-10 * time.Second)}) // an older declare, told late
	if p := l.plan(spec, time.Minute, t0.Add(25*time.Second)); p.declare {
		t.Errorf("an older declare told after a newer one replaced it in the record: a hold 25 s after the newer declares")
	}
	if p := l.plan(broker.QueueSpec{Name: "qq", Type: broker.Quorum}, time.Minute, t0); p.declare || !p.levels() {
		t.Errorf("a quorum queue's hold: declare %v into %q; want the delay levels, declared with the queue", p.declare, p.hold)
	}
}
