package clocktest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/clocktest"
)

// A skewed clock reads ahead of its base by its skew, and its deadlines
// and timers fall when the base's time says.
func TestASkewedClockReadsAheadAndWaitsAsItsBase(t *testing.T) {
	base := clock.NewMock()
	base.Set(clocktest.Epoch)
	ahead := clocktest.Skewed(base, time.Hour)
	if got := ahead.Now(); !got.Equal(clocktest.Epoch.Add(time.Hour)) {
		t.Fatalf("Now() = %v, want an hour after the base's", got)
	}
	if got := ahead.Since(clocktest.Epoch); got != time.Hour {
		t.Errorf("Since(the base's now) = %v, want 1h", got)
	}
	if got := ahead.Until(clocktest.Epoch.Add(2 * time.Hour)); got != time.Hour {
		t.Errorf("Until(base + 2h) = %v, want 1h", got)
	}
	ctx, cancel := ahead.WithDeadline(t.Context(), ahead.Now().Add(time.Minute))
	defer cancel()
	timer := ahead.Timer(time.Minute)
	base.Add(59 * time.Second)
	if ctx.Err() != nil {
		t.Fatal("the deadline a minute ahead (by the skewed clock) passed after 59 s of the base")
	}
	base.Add(time.Second)
	<-timer.C
	if ctx.Err() == nil {
		t.Error("the deadline a minute ahead did not pass after a minute of the base")
	}
}

func ExampleSkewed() {
	base := clock.NewMock()
	base.Set(clocktest.Epoch)
	behind := clocktest.Skewed(base, -30*time.Second)
	fmt.Println(behind.Now().Format(time.TimeOnly))
	// Output: 23:59:30
}
