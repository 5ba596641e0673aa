// Package mockctx gives a mock clock (benbjohnson/clock's Mock) timeout
// contexts that can be read while the clock ends them.
//
// The mock's own WithTimeout and WithDeadline make a context whose Err
// reads the error without the lock its timer writes it under: a handler
// that reads its ctx's error while a test moves the clock past its job
// timeout is a data race under -race. The contexts made here keep the
// error under a lock, as the standard library's do; otherwise they behave
// as the mock's: they end with context.DeadlineExceeded once the clock
// reaches the deadline, with the parent's error when the parent ends
// first, and with context.Canceled when cancelled.
package mockctx

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
)

// Guard returns c with race-free timeout contexts when it is a
// *clock.Mock, and c itself otherwise.
func Guard(c clock.Clock) clock.Clock {
	if m, ok := c.(*clock.Mock); ok {
		return guarded{m}
	}
	return c
}

// guarded is a *clock.Mock whose timeout contexts are this package's.
type guarded struct{ *clock.Mock }

// WithTimeout returns WithDeadline(the mock, parent, now+d).
func (g guarded) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return WithDeadline(g.Mock, parent, g.Now().Add(d))
}

// WithDeadline returns WithDeadline(the mock, parent, deadline).
func (g guarded) WithDeadline(parent context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	return WithDeadline(g.Mock, parent, deadline)
}

// WithDeadline returns a copy of parent that ends once c reaches
// deadline. Its error and its cause are context.DeadlineExceeded then; a
// parent that ends first gives its error and cause; cancel gives
// context.Canceled. A parent whose deadline is sooner gives a plain
// cancellable copy, as the mock's does.
func WithDeadline(c clock.Clock, parent context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if cur, ok := parent.Deadline(); ok && cur.Before(deadline) {
		return context.WithCancel(parent)
	}
	values, end := context.WithCancelCause(parent)
	ctx := &deadlineCtx{values: values, end: end, deadline: deadline, done: make(chan struct{})}
	wait := c.Until(deadline)
	if wait <= 0 {
		ctx.finish(context.DeadlineExceeded, context.DeadlineExceeded)
		return ctx, func() {}
	}
	ctx.mu.Lock() // a parent ended already finishes ctx once stop is set
	stopParent := context.AfterFunc(parent, func() { ctx.finish(parent.Err(), context.Cause(parent)) })
	timer := c.AfterFunc(wait, func() { ctx.finish(context.DeadlineExceeded, context.DeadlineExceeded) })
	ctx.stop = func() {
		stopParent()
		timer.Stop()
	}
	ctx.mu.Unlock()
	return ctx, func() { ctx.finish(context.Canceled, context.Canceled) }
}

// deadlineCtx is a context that ends at a deadline of a mock clock.
//
// Its Done is a channel of its own, not values' (whose error would be
// context.Canceled whatever the reason): a child the standard library
// makes of it then takes its error from Err, not from values.
type deadlineCtx struct {
	values   context.Context // parent's values; its cause is context.Cause's answer
	end      context.CancelCauseFunc
	deadline time.Time
	done     chan struct{}
	stop     func() // the deadline's timer and the watch of the parent

	mu    sync.Mutex
	ended bool
	err   error
}

// finish ends ctx with err and cause, once. If the parent has ended
// already (values has followed it), ctx ends as the parent did, whatever
// finished it: its error and its cause agree.
func (c *deadlineCtx) finish(err, cause error) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	if parentErr := c.values.Err(); parentErr != nil {
		err = parentErr
	}
	c.ended, c.err = true, err
	c.end(cause) // nothing when values has followed the parent already
	close(c.done)
	stop := c.stop
	c.mu.Unlock()
	if stop != nil { // nil for a ctx due when it was made
		stop()
	}
}

// Deadline is the clock's time at which ctx ends.
func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Done is closed when ctx ends.
func (c *deadlineCtx) Done() <-chan struct{} { return c.done }

// Err is nil until ctx ends, then why, read under the lock it is written
// under.
func (c *deadlineCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value is parent's value for key.
func (c *deadlineCtx) Value(key any) any { return c.values.Value(key) }

// String names the ctx and its deadline, as the standard library's do.
func (c *deadlineCtx) String() string {
	return fmt.Sprintf("%v.WithDeadline(%s)", c.values, c.deadline)
}
