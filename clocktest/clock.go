package clocktest

import (
	"context"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/internal/mockctx"
)

// Clock is the harness's mock clock: a clock.Mock whose timers (Timer,
// After, Sleep) fire on a goroutine of their own, as its AfterFunc's do.
//
// clock.Mock fires the timers that are due both when the clock moves and
// when a timer is made, and a timer of its own sends on its channel, which
// holds one value, under the mock's lock. A goroutine that made a timer
// while a move was firing the timers due on its way (a handler or an actor
// woken by one of them) could fire the next of them as well as the move
// did: the second send waited for good, under the lock, and every reading
// of the clock in the system with it. Made here, a timer is an AfterFunc
// whose function sends on the timer's channel: making it fires nothing,
// and firing it holds no lock while it sends. A timer made already due
// fires at once, as clock.Mock's does. Its timeout contexts (WithTimeout,
// WithDeadline) read their error under a lock, where clock.Mock's do not.
type Clock struct {
	*clock.Mock
}

var _ clock.Clock = (*Clock)(nil)

// NewClock returns a mock clock at Epoch, for a synctest bubble: its
// timers send on a goroutine of their own, so a move returns before the
// timers it fired have sent, and synctest.Wait (which the harness's
// Advance calls) is what tells when they have. Outside a bubble, a test
// that moves the clock cannot know it.
func NewClock() *Clock {
	c := &Clock{Mock: clock.NewMock()}
	c.Set(Epoch)
	return c
}

// Timer returns a timer that fires once the clock has moved d on.
func (c *Clock) Timer(d time.Duration) *clock.Timer {
	ch := make(chan time.Time, 1)
	t := c.AfterFunc(d, func() { ch <- c.Now() })
	t.C = ch
	if d <= 0 && t.Stop() { // due already, and not fired by a move meanwhile
		ch <- c.Now()
	}
	return t
}

// After returns a channel that receives the time once the clock has moved
// d on.
func (c *Clock) After(d time.Duration) <-chan time.Time { return c.Timer(d).C }

// Sleep waits until the clock has moved d on.
func (c *Clock) Sleep(d time.Duration) { <-c.After(d) }

// WithTimeout returns a copy of parent that ends once the clock has moved
// d on. Unlike clock.Mock's, its error is read under the lock it is
// written under: a handler may read it while a move ends it.
func (c *Clock) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return mockctx.WithDeadline(c, parent, c.Now().Add(d))
}

// WithDeadline returns a copy of parent that ends once the clock reaches
// deadline (see WithTimeout).
func (c *Clock) WithDeadline(parent context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	return mockctx.WithDeadline(c, parent, deadline)
}
