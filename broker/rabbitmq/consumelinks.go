package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
)

// ErrTooManyConsumers: every consume connection the backend may open
// (maxConsumeLinks) has all its channels taken by consumers, and one more
// was asked for. Backend.MaxConsumers says how many fit, and
// queuey.NewWorker refuses a worker with more queues than that; this is
// what the backend says when several users of one backend ask for more
// together.
var ErrTooManyConsumers = errors.New("rabbitmq: every consume connection is full")

// maxConsumeLinks caps the consume connections of a backend. A consumer
// has a channel of its own, and the broker gives a connection at most
// channel_max channels (2,047 by default): the consumers are spread over
// as many connections as they need, up to 16, which at the default
// channel_max is 32,736 consumers, more queues than a broker serves well.
const maxConsumeLinks = 16

// ownChannels is how many channels of a consume connection are kept for
// the backend's own use: its declaration channel, on which an exclusive
// consumer of a quorum queue checks that the queue has no other (aloneOn).
const ownChannels = 1

// consumeLinkName is the connection_name of the i-th consume connection:
// "<name> (consume)" for the first, "<name> (consume 2)" for the second.
func consumeLinkName(name string, i int) string {
	if i == 0 {
		return name + " (consume)"
	}
	return fmt.Sprintf("%s (consume %d)", name, i+1)
}

// MaxConsumers is how many consumers the backend can have at once: each
// has a channel of its own, a consume connection has as many as the
// broker's channel_max (read from the publishing connection's handshake)
// less ownChannels, and the backend opens up to 16 consume connections.
// It implements broker.ConsumerLimit, which queuey.NewWorker checks.
func (b *Backend) MaxConsumers() int {
	return maxConsumeLinks * consumerChannels(b.channelMax, b.opts.consumeChannelMax)
}

// consumerChannels is how many consumers a consume connection takes when
// the broker's channel_max is brokerMax and the backend asked for asked
// (0: the broker's).
func consumerChannels(brokerMax, asked uint16) int {
	n := brokerMax
	if asked != 0 && (n == 0 || asked < n) {
		n = asked
	}
	return max(int(n)-ownChannels, 1)
}

// consumeLinkLocked is the i-th consume connection, whose connection
// actor the first call starts; nil once the backend is closed. The caller
// holds b.mu.
func (b *Backend) consumeLinkLocked(i int) *link {
	if b.closed {
		return nil
	}
	l := &b.sub
	if i > 0 {
		for len(b.subMore) < i {
			n := len(b.subMore) + 1
			b.subMore = append(b.subMore, &link{role: fmt.Sprintf("consume %d", n+1), name: consumeLinkName(b.opts.ConnectionName, n),
				channelMax: b.opts.consumeChannelMax, ready: make(chan struct{})})
		}
		l = b.subMore[i-1]
	}
	if !l.started {
		l.started = true
		b.superviseLocked(l, nil)
	}
	return l
}

// consumeOn finds a consume connection with a channel free for one more
// consumer, from the first on, opening the next connection when those
// open are full, and runs start on it with the channel's slot. A
// connection that is down is waited for, bounded by ctx: its consumers
// are the ones that come back to it. start's ErrChannelMax (the broker
// counted a channel not yet closed) passes on to the next connection.
func (b *Backend) consumeOn(ctx context.Context, queue string, start func(*session, *channelSlot) (broker.Consumer, error)) (broker.Consumer, error) {
	for i := range maxConsumeLinks {
		b.mu.Lock()
		l := b.consumeLinkLocked(i)
		b.mu.Unlock()
		if l == nil {
			return nil, broker.ErrClosed
		}
		s, err := b.sessionOf(ctx, l)
		if err != nil {
			return nil, err
		}
		slot := s.takeChannel()
		if slot == nil {
			continue
		}
		c, err := start(s, slot)
		if err != nil {
			slot.release() // its channel, if one was opened, is closed
		}
		if !errors.Is(err, amqp.ErrChannelMax) {
			return c, err
		}
	}
	return nil, fmt.Errorf("%w: consume %q: the backend's %d consume connections carry %d consumers, its MaxConsumers",
		ErrTooManyConsumers, queue, maxConsumeLinks, b.MaxConsumers())
}

// channelSlot is one of a consume connection's channels, taken for a
// consumer's channel (two consumers share one on a laned queue) and given
// back once that channel is closed.
type channelSlot struct {
	slots chan struct{} // the session's
	once  sync.Once
}

// takeChannel takes a slot for a consumer's channel, or returns nil when
// the connection has none left.
func (s *session) takeChannel() *channelSlot {
	select {
	case s.consumerSlots <- struct{}{}:
		return &channelSlot{slots: s.consumerSlots}
	default:
		return nil
	}
}

// release gives the slot back; later calls do nothing. It never waits:
// the slot's token is in slots until then.
func (c *channelSlot) release() {
	c.once.Do(func() { <-c.slots })
}
