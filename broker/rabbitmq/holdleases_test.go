package rabbitmq

import (
	"fmt"
	"testing"
	"time"
)

// A lease spares the declare of its hold queue for ttl/2, and no longer.
func TestAHoldLeaseIsFreshForHalfItsTTL(t *testing.T) {
	l := newHoldLeases()
	t0 := time.Unix(1_700_000_000, 0)
	if l.fresh("q.deferred.60000", time.Minute, t0) {
		t.Fatal("a hold queue never declared is fresh; want it declared")
	}
	l.declared("q.deferred.60000", time.Minute, t0)
	for _, c := range []struct {
		after time.Duration
		fresh bool
	}{{0, true}, {29 * time.Second, true}, {30 * time.Second, false}, {time.Hour, false}} {
		if got := l.fresh("q.deferred.60000", time.Minute, t0.Add(c.after)); got != c.fresh {
			t.Errorf("%v after its declare: fresh = %v, want %v", c.after, got, c.fresh)
		}
	}
	l.forget("q.deferred.60000")
	if l.fresh("q.deferred.60000", time.Minute, t0) {
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
			l.declared(fmt.Sprintf("q.deferred.%d", h*perHour+i+1), time.Minute, now)
		}
	}
	if got, most := len(l.byQueue), 2*perHour+1; got > most {
		t.Errorf("after %d hours of %d new waits each, the record holds %d leases; want at most %d", hours, perHour, got, most)
	}
	last := t0.Add((hours - 1) * time.Hour)
	for i := range perHour {
		name := fmt.Sprintf("q.deferred.%d", (hours-1)*perHour+i+1)
		if !l.fresh(name, time.Minute, last) {
			t.Fatalf("%s, declared in the last hour, was swept out; want it kept", name)
		}
	}
	l.reset()
	if len(l.byQueue) != 0 {
		t.Errorf("after a reset the record holds %d leases; want 0", len(l.byQueue))
	}
}
