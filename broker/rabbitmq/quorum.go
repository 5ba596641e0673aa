package rabbitmq

import (
	"context"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
)

// The quorum topology (ARCHITECTURE.md §1, "Topologies"): a work queue,
// its dead-letter queue and its lane are quorum queues; a message with a
// priority lands on the lane, which consumers take from first; a wait goes
// through the delay levels, shared by every quorum queue of the virtual
// host, and is released on the lane or the work queue.

// hasLane reports whether spec's queue has a lane: a quorum work queue
// with a top priority.
func hasLane(spec broker.QueueSpec) bool {
	return spec.Type == broker.Quorum && spec.MaxPriority > 0 && !spec.Plain
}

// landsOn is the queue msg lands on: the lane of a queue that has one for
// a message with a priority, else msg.Queue.
func landsOn(spec broker.QueueSpec, msg broker.Message) string {
	if hasLane(spec) && msg.Priority > 0 {
		return broker.LaneQueueName(msg.Queue)
	}
	return msg.Queue
}

// laneSpec is the spec of spec's lane: a quorum queue as the work queue
// is, without priorities.
func laneSpec(spec broker.QueueSpec) broker.QueueSpec {
	return broker.QueueSpec{Name: broker.LaneQueueName(spec.Name), Type: broker.Quorum, Durable: true,
		MessageTTL: spec.MessageTTL, SingleActiveConsumer: spec.SingleActiveConsumer, Plain: true}
}

// routeOf is where Publish sends msg.
func (b *Backend) routeOf(msg broker.Message) route {
	b.mu.Lock()
	spec := b.declared[msg.Queue]
	b.mu.Unlock()
	return toQueue(landsOn(spec, msg))
}

// declareSpec declares spec's work queue, its dead-letter queue and, for a
// quorum queue, its lane, the delay levels and their bindings to both.
func (s *session) declareSpec(ctx context.Context, spec broker.QueueSpec) error {
	if err := s.declare(ctx, spec.Name, spec.Durable, table(broker.QueueArgs(spec))); err != nil {
		return err
	}
	if !spec.Plain {
		if err := s.declare(ctx, broker.DeadQueueName(spec.Name), true, table(broker.DeadQueueArgs(spec.Type))); err != nil {
			return err
		}
	}
	if spec.Type != broker.Quorum {
		return nil
	}
	if err := s.declareDelays(ctx); err != nil {
		return err
	}
	targets := []string{spec.Name}
	if hasLane(spec) {
		lane := laneSpec(spec)
		if err := s.declare(ctx, lane.Name, true, table(broker.QueueArgs(lane))); err != nil {
			return err
		}
		targets = append(targets, lane.Name)
	}
	for _, t := range targets {
		if err := s.bindQueue(ctx, t, broker.DelayDeliverBinding(t), broker.DelayDeliverExchange); err != nil {
			return err
		}
	}
	return nil
}

// declareDelays declares the delay levels, once per connection: the
// orphans' exchange and queue, the delivering exchange, then each level's
// exchange, queue and bindings, from the lowest up, so that what a level
// passes on has somewhere to go.
func (s *session) declareDelays(ctx context.Context) error {
	if s.delaysDeclared.Load() {
		return nil
	}
	if err := s.declareOrphans(ctx); err != nil {
		return err
	}
	if err := s.declareExchange(ctx, broker.DelayDeliverExchange, amqp.ExchangeTopic, table(broker.DelayDeliverArgs())); err != nil {
		return err
	}
	for n := range broker.DelayLevels {
		name := broker.DelayLevelName(n)
		wait, pass := broker.DelayLevelBindings(n)
		next := broker.DelayDeliverExchange
		if n > 0 {
			next = broker.DelayLevelName(n - 1)
		}
		err := s.declareExchange(ctx, name, amqp.ExchangeTopic, nil)
		if err == nil {
			err = s.declare(ctx, name, true, table(broker.DelayLevelArgs(n)))
		}
		if err == nil {
			err = s.bindQueue(ctx, name, wait, name)
		}
		if err == nil {
			err = s.onDeclCh(ctx, "bind", next, func(ch *amqp.Channel) error { return ch.ExchangeBind(next, pass, name, false, nil) })
		}
		if err != nil {
			return fmt.Errorf("rabbitmq: declaring delay level %d: %w", n, err)
		}
	}
	s.delaysDeclared.Store(true)
	return nil
}

// declareOrphans declares where the delivering exchange sends what it
// cannot route: a fanout exchange and a quorum queue bound to it, both
// named broker.DelayOrphans.
func (s *session) declareOrphans(ctx context.Context) error {
	name := broker.DelayOrphans
	err := s.declareExchange(ctx, name, amqp.ExchangeFanout, nil)
	if err == nil {
		err = s.declare(ctx, name, true, amqp.Table{"x-queue-type": "quorum"})
	}
	if err == nil {
		err = s.bindQueue(ctx, name, "", name)
	}
	if err != nil {
		return fmt.Errorf("rabbitmq: declaring the delay levels' orphans: %w", err)
	}
	return nil
}

// declareExchange declares a durable exchange of kind with args.
func (s *session) declareExchange(ctx context.Context, name, kind string, args amqp.Table) error {
	return s.onDeclCh(ctx, "declare exchange", name, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(name, kind, true, false, false, false, args)
	})
}

// bindQueue binds queue to exchange with key.
func (s *session) bindQueue(ctx context.Context, queue, key, exchange string) error {
	return s.onDeclCh(ctx, "bind", queue, func(ch *amqp.Channel) error { return ch.QueueBind(queue, key, exchange, false, nil) })
}

// declareLevelsAgain declares the delay levels again (the connection's
// note that it declared them is cleared first), and spec's queues with
// their bindings to them: a hold found them gone.
func (b *Backend) declareLevelsAgain(ctx context.Context, spec broker.QueueSpec) error {
	if s, err := b.session(ctx); err == nil {
		s.delaysDeclared.Store(false)
	}
	if err := b.Declare(ctx, spec); err != nil {
		return fmt.Errorf("declaring the delay levels again: %w", err)
	}
	return nil
}

// depthOf counts what is ready on spec's queue and, if it has one, its
// lane.
func (b *Backend) depthOf(ctx context.Context, s *session, spec broker.QueueSpec) (int, error) {
	n, err := s.depth(ctx, spec.Name)
	if err != nil || !hasLane(spec) {
		return n, err
	}
	lane, err := s.depth(ctx, broker.LaneQueueName(spec.Name))
	return n + lane, err
}

// queueType is the type of queue, a work queue or a dead-letter queue,
// as it was declared through the backend (Classic if it was not).
func (b *Backend) queueType(queue string) broker.QueueType {
	b.mu.Lock()
	defer b.mu.Unlock()
	if spec, ok := b.declared[queue]; ok {
		return spec.Type
	}
	if work, ok := strings.CutSuffix(queue, broker.DeadSuffix); ok {
		return b.declared[work].Type
	}
	return broker.Classic
}

// aloneChecks and aloneEvery pace aloneOn: a consumer that has just
// ended is still counted for a moment.
const (
	aloneChecks = 10
	aloneEvery  = 100 * time.Millisecond
)

// aloneOn is an exclusive consumer's check on a quorum queue, which on
// RabbitMQ 3.10 takes an exclusive consumer beside others and others
// beside it: the queue must have no consumer. A count above zero is
// looked at again for a second before it is ErrInUse.
func (b *Backend) aloneOn(ctx context.Context, s *session, queue string) error {
	for i := 1; ; i++ {
		q, err := s.inspect(ctx, queue)
		switch {
		case err != nil:
			return err
		case q.Consumers == 0:
			return nil
		case i == aloneChecks:
			return fmt.Errorf("%w: consume %q: it has %d consumer(s)", broker.ErrInUse, queue, q.Consumers)
		}
		select {
		case <-b.opts.Clock.After(aloneEvery):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
