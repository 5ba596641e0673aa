package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
)

// ErrConsumerCancelled: the broker ended a consumer by itself
// (basic.cancel), most often because its queue was deleted. Its channel is
// closed then, so that what it delivered and was not settled goes back to
// the queue, if the queue is still there. Consuming again finds the queue
// gone (broker.ErrNoQueue), or, if someone else declared it again, as they
// declared it: with other arguments, maybe (see ARCHITECTURE.md §1,
// "RabbitMQ").
var ErrConsumerCancelled = errors.New("rabbitmq: the broker cancelled the consumer")

// consumer is one channel with basic.qos(prefetch) and one basic.consume.
// Its goroutine turns amqp deliveries into broker deliveries; Cancel closes
// the channel, so the broker takes back what is unsettled.
type consumer struct {
	queue string
	ch    *amqp.Channel
	slot  *channelSlot // ch's, of its connection's channels: released once ch is closed
	acks  *acker       // ch's: settles the deliveries of every consumer on it
	out   chan broker.Delivery
	stop  chan struct{}
	ended chan struct{}

	brokerCancel <-chan string // the tag, when the broker cancels the consumer

	tag       string
	once      sync.Once
	stopOnce  sync.Once
	stopped   atomic.Bool
	cancelled atomic.Bool
	err       error // set before ended is closed
}

func (s *session) consume(ctx context.Context, slot *channelSlot, queue string, prefetch int, exclusive bool) (broker.Consumer, error) {
	cs, err := s.consumeAll(ctx, slot, []string{queue}, []int{prefetch}, exclusive)
	if err != nil {
		return nil, err
	}
	return cs[0], nil
}

// consumeAll starts a consumer of each of queues, in order, on one channel,
// the one slot takes, with basic.qos(prefetches[i]) for each. A laned
// consumer's lane comes
// first: the broker then starts delivering it first, and its consumer's
// goroutine takes its deliveries while the next queue's consumer starts,
// so that they are ready before any of the next queue's arrive.
func (s *session) consumeAll(ctx context.Context, slot *channelSlot, queues []string, prefetches []int, exclusive bool) ([]*consumer, error) {
	var on consumeChannel
	var cs []*consumer
	err := s.guard(ctx, callRequest, "consume", quoted(queues[0]), func() (err error) {
		ch, err := s.conn.Channel()
		if err != nil {
			return err
		}
		on = consumeChannel{ch: ch, slot: slot, consumers: len(queues), acks: s.newAcker(ch, sum(prefetches))}
		for i, queue := range queues {
			var c *consumer
			if c, err = s.startConsumer(on, queue, prefetches[i], exclusive); err != nil {
				on.cancelAll(cs)
				on, cs = consumeChannel{}, nil
				return err
			}
			cs = append(cs, c)
		}
		return nil
	})
	if err != nil {
		if on.ch != nil { // it got through, just as guard gave the connection up
			on.cancelAll(cs)
		}
		return nil, consumeError(queues, err)
	}
	return cs, nil
}

// consumeChannel is a channel opened for consumers: its slot of the
// connection's channels, how many consume on it, and its acker.
type consumeChannel struct {
	ch        *amqp.Channel
	slot      *channelSlot
	consumers int
	acks      *acker
}

func sum(ns []int) int {
	total := 0
	for _, n := range ns {
		total += n
	}
	return total
}

// startConsumer consumes queue on on.ch, one of on.consumers on it, and
// starts the goroutine that hands out its deliveries.
func (s *session) startConsumer(on consumeChannel, queue string, prefetch int, exclusive bool) (*consumer, error) {
	ch := on.ch
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return nil, err
	}
	tag := consumerTag(queue)
	deliveries, err := ch.Consume(queue, tag, false, exclusive, false, false, nil)
	if err != nil {
		return nil, err
	}
	c := &consumer{tag: tag, queue: queue, ch: ch, slot: on.slot, acks: on.acks,
		out: make(chan broker.Delivery), stop: make(chan struct{}), ended: make(chan struct{})}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	// amqp091 tells of a basic.cancel from the broker here before it ends
	// the deliveries; each consumer of the channel needs room.
	c.brokerCancel = ch.NotifyCancel(make(chan string, on.consumers))
	go c.run(deliveries, closed, s)
	return c, nil
}

// cancelAll cancels the consumers started on the channel, and closes it.
func (on consumeChannel) cancelAll(cs []*consumer) {
	for _, c := range cs {
		c.Cancel()
	}
	_ = on.ch.Close()
	on.slot.release()
}

// notFound is what a NOT_FOUND about a queue means: that its node is down
// (broker.ErrUnavailable: a classic queue whose node a cluster lost), or
// that it does not exist (broker.ErrNoQueue).
func notFound(e *amqp.Error) error {
	if strings.Contains(e.Reason, "is down or inaccessible") {
		return broker.ErrUnavailable
	}
	return broker.ErrNoQueue
}

// consumeError says why a consume of queues failed.
func consumeError(queues []string, err error) error {
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return fmt.Errorf("%w: consume %q: %s", notFound(amqpErr), queues, amqpErr.Reason)
	}
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.AccessRefused && strings.Contains(amqpErr.Reason, "exclusive") {
		return fmt.Errorf("%w: consume %q: %s", broker.ErrInUse, queues, amqpErr.Reason)
	}
	return lostOr(err)
}

func (c *consumer) run(deliveries <-chan amqp.Delivery, closed <-chan *amqp.Error, s *session) {
	// ended before out: Err is valid once Deliveries is closed, and a
	// reader that finds it nil takes the consumer for one it stopped.
	defer close(c.out)
	defer close(c.ended)
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				c.err = c.why(closed, s)
				if errors.Is(c.err, ErrConsumerCancelled) {
					// Its channel outlives a broker's cancel: closed, not
					// left open for each time the queue is deleted.
					c.acks.flush()
					_ = c.ch.Close()
				}
				if c.ch.IsClosed() { // by the broker, or above; after a Stop it stays open to settle
					c.slot.release()
				}
				return
			}
			select {
			case c.out <- &delivery{c: c, d: d, msg: message(c.queue, d)}:
			case e, ok := <-closed:
				// The channel closed while d waited for a reader: the
				// broker has it back and a settle of it would be stale.
				// Dropped, as amqp091 drops what it still buffers, so
				// that no reader acts on it (a replay would republish a
				// dead letter that stays dead).
				again := make(chan *amqp.Error, 1)
				if ok {
					again <- e
				}
				c.err = c.why(again, s)
				return
			case <-c.stop:
				return
			}
		case <-c.stop:
			return
		}
	}
}

// why the deliveries ended: nil after Cancel, ErrClosed when the backend
// closed, else the lost connection or channel.
func (c *consumer) why(closed <-chan *amqp.Error, s *session) error {
	if c.cancelled.Load() {
		return nil
	}
	if c.stopped.Load() {
		// A stop's basic.cancel ends the deliveries too; a channel that
		// closed with an error meanwhile was lost all the same (amqp091
		// tells the close listeners before it ends the deliveries).
		select {
		case e := <-closed:
			if e != nil {
				return fmt.Errorf("%w: consumer of %q: %s", ErrConnectionLost, c.queue, e.Reason)
			}
		default:
		}
		return nil
	}
	s.closeMu.Lock()
	backendClosing := s.backendClosed
	s.closeMu.Unlock()
	var e *amqp.Error
	select {
	case e = <-closed:
	default:
	}
	if backendClosing && e == nil {
		return broker.ErrClosed
	}
	if e == nil && c.cancelledByBroker() {
		return fmt.Errorf("%w: consumer of %q (the queue was deleted, or moved off the broker's node); "+
			"its deliveries not settled go back to the queue, if it is still there", ErrConsumerCancelled, c.queue)
	}
	if e != nil && e.Code == amqp.PreconditionFailed && strings.Contains(e.Reason, "timed out") {
		return fmt.Errorf("%w: consumer of %q: %s", ErrConsumerTimeout, c.queue, e.Reason)
	}
	if e != nil {
		return fmt.Errorf("%w: consumer of %q: %s", ErrConnectionLost, c.queue, e.Reason)
	}
	return fmt.Errorf("%w: consumer of %q", ErrConnectionLost, c.queue)
}

// cancelledByBroker reports whether the broker sent basic.cancel for the
// consumer (amqp091 tells of it before it ends the deliveries).
func (c *consumer) cancelledByBroker() bool {
	select {
	case _, ok := <-c.brokerCancel: // closed, not sent on, when the channel shut down
		return ok
	default:
		return false
	}
}

func (c *consumer) Deliveries() <-chan broker.Delivery { return c.out }

func (c *consumer) Err() error {
	select {
	case <-c.ended:
		return c.err
	default:
		return nil
	}
}

// Stop sends basic.cancel: no new deliveries, while the channel stays open
// to settle those already received; amqp091 closes Deliveries once the
// broker confirmed the cancel and what it had sent was read.
func (c *consumer) Stop() {
	c.stopOnce.Do(func() {
		c.stopped.Store(true)
		_ = c.ch.Cancel(c.tag, false) // a closed channel has stopped anyway
	})
}

// Cancel closes the consumer's channel; the broker puts its unsettled
// deliveries back, and acks of them are refused from now on.
func (c *consumer) Cancel() {
	c.once.Do(func() {
		c.cancelled.Store(true)
		close(c.stop)
		c.acks.flush() // what was settled goes before the channel closes
		_ = c.ch.Close()
		c.slot.release()
		<-c.ended
	})
}

// consumerTag is unique and says whose consumer it is.
func consumerTag(queue string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	if len(queue) > 160 {
		queue = queue[:160]
	}
	return "queuey." + queue + "." + hex.EncodeToString(b)
}

type delivery struct {
	c       *consumer
	d       amqp.Delivery
	msg     broker.Message
	settled atomic.Bool
}

func (d *delivery) Message() broker.Message { return d.msg }
func (d *delivery) Redelivered() bool       { return d.d.Redelivered }

func (d *delivery) Ack(context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	return d.settleErr(d.c.acks.ack(d.d.DeliveryTag))
}

func (d *delivery) Requeue(context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	return d.settleErr(d.c.acks.requeue(d.d.DeliveryTag))
}

// settleErr: the delivery's own channel is closed, so the broker has taken
// it back; it was never sent on another channel.
func (d *delivery) settleErr(err error) error {
	if err == nil {
		return nil
	}
	if d.c.ch.IsClosed() || errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("%w: %v", broker.ErrStaleDelivery, err)
	}
	return fmt.Errorf("rabbitmq: settle: %w", err)
}

// message reads a delivery back into a broker.Message: the properties of
// ARCHITECTURE.md §1 ("Wire format"), and the string form of the other
// headers, without the ones the broker adds on dead-lettering (x-death
// and friends; x-death says the message came back from a hold queue) and
// without CC and BCC: the broker routed the message by them already, and
// a copy that carried them would be routed again (or, as a string,
// refused, closing the channel that published it).
func message(queue string, d amqp.Delivery) broker.Message {
	m := broker.Message{
		Queue:         queue,
		ID:            d.MessageId,
		CorrelationID: d.CorrelationId,
		Type:          d.Type,
		Priority:      d.Priority,
		Body:          d.Body,
	}
	for k, v := range d.Headers {
		switch {
		case k == broker.HeaderAttempt:
			m.Attempt = toUint32(v)
		case k == broker.HeaderDeferrals:
			m.Deferrals = toUint32(v)
		case k == broker.HeaderDue:
			// A stamp that does not parse (not ours) reads as none.
			if s, ok := v.(string); ok {
				if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
					m.DueAt = time.UnixMilli(ms)
				}
			}
		case k == "x-death":
			m.FromHold = true
		case strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-"):
		case k == "x-delivery-count": // a quorum queue's count of redeliveries
		case k == "CC" || k == "BCC":
		default:
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[k] = fmt.Sprint(v)
		}
	}
	return m
}

func toUint32(v any) uint32 {
	switch n := v.(type) {
	case uint32:
		return n
	case int32:
		return uint32(max(n, 0))
	case int64:
		return uint32(min(max(n, 0), 1<<32-1))
	case uint16:
		return uint32(n)
	case int16:
		return uint32(max(n, 0))
	case uint8:
		return uint32(n)
	case int8:
		return uint32(max(n, 0))
	case int:
		return uint32(min(max(n, 0), 1<<32-1))
	}
	return 0
}
