package clocktest

import (
	"context"
	"time"

	"github.com/benbjohnson/clock"
)

// Skewed returns a clock that reads by ahead of c (behind when by is
// negative), as the clock of a host that is off does: Now, Since, Until
// and WithDeadline read the skewed time; timers, tickers and sleeps wait
// as c's do. Give it to one of two workers to test what workers with
// different clocks make of one schedule.
func Skewed(c clock.Clock, by time.Duration) clock.Clock { return skewed{c, by} }

type skewed struct {
	clock.Clock
	by time.Duration
}

func (s skewed) Now() time.Time                  { return s.Clock.Now().Add(s.by) }
func (s skewed) Since(t time.Time) time.Duration { return s.Now().Sub(t) }
func (s skewed) Until(t time.Time) time.Duration { return t.Sub(s.Now()) }

func (s skewed) WithDeadline(parent context.Context, d time.Time) (context.Context, context.CancelFunc) {
	return s.Clock.WithDeadline(parent, d.Add(-s.by))
}
