package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// A held message is released by the broker into its work queue when its
// wait ends; a work queue that is gone then (deleted by an operator, not
// declared again yet) drops it without a word. So a hold is not reported
// done until the work queue was seen to exist after the hold was asked
// for, and declared again, as the backend knows it, if it was not.
//
// One check a round trip serves every hold of a queue that waits for it:
// a hold joins the next check to start (one that started before it was
// asked for proves nothing about it), so that a thousand holds in flight
// cost a check or two, not a thousand.

// workCheck is one check of a work queue; done is closed once err is set.
type workCheck struct {
	done chan struct{}
	err  error
}

// workChecks are the checks of one work queue: the one under way, and the
// one that starts after it, which later holds join.
type workChecks struct {
	running, next *workCheck
}

// workCheckTimeout bounds a check that holds other than its starter's
// wait for: it goes on if the starter's ctx ends.
const workCheckTimeout = 30 * time.Second

// ensureWorkQueue returns once a check of spec's work queue that started
// after the call has found it (or declared it again), or with why not.
func (b *Backend) ensureWorkQueue(ctx context.Context, spec broker.QueueSpec) error {
	b.mu.Lock()
	wc := b.workChecks[spec.Name]
	if wc == nil {
		wc = &workChecks{}
		b.workChecks[spec.Name] = wc
	}
	var c, after *workCheck
	switch {
	case wc.next != nil: // starts after this call: join it
		c = wc.next
	case wc.running != nil: // started before this call: run the next one
		c, after = &workCheck{done: make(chan struct{})}, wc.running
		wc.next = c
	default:
		c = &workCheck{done: make(chan struct{})}
		wc.running = c
	}
	starter := wc.running == c || after != nil
	b.mu.Unlock()
	if starter {
		b.runWorkCheck(wc, c, after, spec)
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: checking that work queue %q exists: %w", spec.Name, ctx.Err())
	}
}

// runWorkCheck runs c once the check before it (after, if any) is over,
// on a ctx of its own: other holds may be waiting for it.
func (b *Backend) runWorkCheck(wc *workChecks, c, after *workCheck, spec broker.QueueSpec) {
	if after != nil {
		<-after.done
		b.mu.Lock()
		wc.running, wc.next = c, nil
		b.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(b.runCtx, workCheckTimeout)
	defer cancel()
	c.err = b.checkWorkQueue(ctx, spec)
	b.mu.Lock()
	if wc.running == c {
		wc.running = nil
	}
	b.mu.Unlock()
	close(c.done)
}

// checkWorkQueue finds spec's work queue by a passive declare, and
// declares it (and its dead-letter queue) again if it is gone. A queue
// that exists with other arguments exists: what it lacks is said where it
// is consumed.
func (b *Backend) checkWorkQueue(ctx context.Context, spec broker.QueueSpec) error {
	_, err := b.Depth(ctx, spec.Name)
	if !errors.Is(err, broker.ErrNoQueue) {
		return err
	}
	b.opts.Logger.Warn("rabbitmq: a job is held for a work queue that is gone; declaring it again", "queue", spec.Name)
	if err := b.Declare(ctx, spec); err != nil {
		return fmt.Errorf("rabbitmq: work queue %q is gone, and declaring it again failed: %w", spec.Name, err)
	}
	return nil
}
