package clocktest_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey-go/queuey/clocktest"
)

// Goroutines that make timers already due, all at once, and leave them
// unread, as an actor does whose select took another message first: the
// clock goes on. (On a bare clock.Mock, making a timer fires every timer
// due, and two goroutines making theirs at once could both fire the same
// one: the second send, on a channel that holds one value and that its
// owner no longer reads, waited for good under the mock's lock, and every
// reading of the clock with it. Here that stopped the test in every run;
// in the worker, the goroutines that made timers at once were actors
// woken by one move of the clock.)
func TestTimersMadeDueAtOnceAndLeftUnreadDoNotStopTheClock(t *testing.T) {
	const goroutines, timers = 64, 2000
	c := clocktest.NewClock()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range timers {
				c.Timer(0)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("making timers already due stopped the clock")
	}
	if !c.Now().Equal(clocktest.Epoch) {
		t.Errorf("the clock reads %v; want %v, unmoved", c.Now(), clocktest.Epoch)
	}
}

// A timer made already due fires at once, without the clock moving.
func TestATimerMadeDueFiresAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := clocktest.NewClock()
		select {
		case at := <-c.Timer(0).C:
			if !at.Equal(clocktest.Epoch) {
				t.Errorf("fired at %v; want %v", at, clocktest.Epoch)
			}
		default:
			t.Fatal("a timer made due did not fire at once")
		}
		if c.Timer(time.Second).Stop() != true {
			t.Error("Stop of a timer not fired yet = false; want true")
		}
	})
}

// A timeout ctx ends once the clock has moved past it, with
// context.DeadlineExceeded, and its error can be read while the move ends
// it (run under -race: clock.Mock's own read it without a lock).
func TestATimeoutEndsWhenTheClockMovesPastIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := clocktest.NewClock()
		ctx, cancel := c.WithTimeout(t.Context(), time.Second)
		defer cancel()
		read := make(chan error)
		go func() {
			for ctx.Err() == nil {
				runtime.Gosched()
			}
			read <- ctx.Err()
		}()
		c.Add(time.Second)
		if err := <-read; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("read %v; want context.DeadlineExceeded", err)
		}
	})
}
