package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
)

// A held message is released by the broker into its work queue when its
// wait ends; a work queue that is gone then (deleted by an operator, not
// declared again yet) drops it without a word. So a hold is not reported
// done until the work queue was seen to exist after the hold was asked
// for, and declared again, as the backend knows it, if it was not.
//
// The check runs beside the hold's publish, not before it, so that a hold
// costs no more round trips than before, and one check serves every hold
// of a queue that waits for it: a hold joins the next check to start (one
// that started before it was asked for proves nothing about it), so that
// a thousand holds in flight cost a check or two, not a thousand.

// workCheck is one check of a work queue; done is closed once err is set.
type workCheck struct {
	done chan struct{}
	err  error
}

// workChecks are the checks of one work queue: the one under way, and the
// one that starts after it, which later holds join; and how many times a
// check found the queue gone and declared it again.
type workChecks struct {
	running, next *workCheck
	declared      uint64
}

// workCheckTimeout bounds a check, which holds other than the one that
// started it wait for.
const workCheckTimeout = 30 * time.Second

// workCheckFor returns the check of spec's work queue that a hold asked
// for now waits for, the next one to start, and a count to give
// declaredSince once it is over. The hold that finds no check under way
// starts one, on a goroutine of the backend's (Close waits for it), which
// goes on to the next check while holds keep asking for one: a goroutine
// started for each check would grow a new stack each time.
func (b *Backend) workCheckFor(spec broker.QueueSpec) (*workCheck, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := &workCheck{done: make(chan struct{})}
	if b.closed {
		c.err = broker.ErrClosed
		close(c.done)
		return c, 0
	}
	wc := b.workChecks[spec.Name]
	if wc == nil {
		wc = &workChecks{}
		b.workChecks[spec.Name] = wc
	}
	switch {
	case wc.next != nil: // starts after this call: join it
		return wc.next, wc.declared
	case wc.running != nil: // started before this call: the next one
		wc.next = c
		return c, wc.declared
	}
	wc.running = c
	b.runs.Go(func() { b.runWorkChecks(wc, c, spec) })
	return c, wc.declared
}

// declaredSince reports whether a check declared spec's work queue again
// since workCheckFor gave count: a hold published meanwhile may have
// expired into nothing before the queue was back.
func (b *Backend) declaredSince(queue string, count uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.workChecks[queue] != nil && b.workChecks[queue].declared != count
}

// wait waits for c, or for ctx to end.
func (c *workCheck) wait(ctx context.Context, queue string) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: checking that work queue %q exists: %w", queue, ctx.Err())
	}
}

// runWorkChecks runs c, then the check that holds asked for meanwhile,
// if any, and so on until none is waiting.
func (b *Backend) runWorkChecks(wc *workChecks, c *workCheck, spec broker.QueueSpec) {
	for c != nil {
		b.runWorkCheck(wc, c, spec)
		b.mu.Lock()
		c, wc.running, wc.next = wc.next, wc.next, nil
		b.mu.Unlock()
	}
}

// runWorkCheck runs c and tells its holds how it went.
func (b *Backend) runWorkCheck(wc *workChecks, c *workCheck, spec broker.QueueSpec) {
	ctx, cancel := context.WithTimeout(b.runCtx, workCheckTimeout)
	defer cancel()
	declared, err := b.checkWorkQueue(ctx, spec)
	b.mu.Lock()
	c.err = err
	if declared {
		wc.declared++
	}
	b.mu.Unlock()
	close(c.done)
}

// checkWorkQueue finds spec's work queue (and its lane, if it has one)
// by existsOn, and declares it (and its dead-letter queue) again if it is
// gone. A queue that exists with other arguments exists: what it lacks is
// said where it is consumed.
func (b *Backend) checkWorkQueue(ctx context.Context, spec broker.QueueSpec) (declared bool, _ error) {
	queues := []string{spec.Name}
	if hasLane(spec) {
		queues = append(queues, broker.LaneQueueName(spec.Name))
	}
	err := b.onSession(ctx, func(s *session) error { return s.existsOn(ctx, queues) })
	if !errors.Is(err, broker.ErrNoQueue) {
		return false, err
	}
	b.opts.Logger.Warn("rabbitmq: a job is held for a work queue that is gone; declaring it again", "queue", spec.Name)
	if err := b.Declare(ctx, spec); err != nil {
		return false, fmt.Errorf("rabbitmq: work queue %q is gone, and declaring it again failed: %w", spec.Name, err)
	}
	return true, nil
}

// existsOn checks that each of queues exists, in one round trip on the
// declaration channel: a passive declare of each without its answer
// (nowait), then a basic.qos, whose answer comes only once the broker has
// taken what was sent before it on the channel. A missing queue closes
// the channel first (404): broker.ErrNoQueue, or broker.ErrUnavailable
// for a queue whose node is down. Without nowait, the broker would ask
// each queue for its counts (a call the queue answers in its turn, behind
// the deliveries and acks it is busy with); a queue is looked up, not
// asked, so that a check beside every hold costs a busy queue nothing.
func (s *session) existsOn(ctx context.Context, queues []string) error {
	err := s.onDeclChRaw(ctx, "check that it exists", strings.Join(queues, ", "), func(ch *amqp.Channel) error {
		for _, q := range queues {
			if _, err := ch.QueueDeclarePassive(q, false, false, false, true, nil); err != nil {
				return err
			}
		}
		return ch.Qos(0, 0, false)
	})
	return s.existence(ctx, queues, err)
}

// existence is what err, the outcome of existsOn's declares and qos, says
// of queues: nil when they exist.
func (s *session) existence(ctx context.Context, queues []string, err error) error {
	var amqpErr *amqp.Error
	switch {
	case errors.Is(err, amqp.ErrClosed):
		// The channel closed before the qos went out: on a declare's 404,
		// or with its connection. Which, a passive declare with its answer
		// tells.
		for _, q := range queues {
			if _, err := s.inspect(ctx, q); err != nil {
				return err
			}
		}
		return nil
	case errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound:
		return fmt.Errorf("%w: %s", notFound(amqpErr), amqpErr.Reason)
	case err != nil:
		return lostOr(err)
	}
	return nil
}
