package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
)

// Broadcasts (broker.Broadcaster), for the fleet's heartbeats and
// commands: a topic is a routing key of RabbitMQ's amq.direct exchange,
// which every virtual host has and nobody can delete or declare otherwise.
// Each listener is a queue of its own, server-named, exclusive to the
// publishing connection and auto-deleted with its consumer, bound to
// amq.direct with the topic as its key: a direct exchange hands a copy to
// every queue bound with the message's key, so each listener hears every
// message, and a broadcast nobody listens to is dropped by the exchange
// (published mandatory, it comes back as unroutable, which Broadcast takes
// for "nobody listens"). Nothing is declared for a topic, so a topic
// costs the broker nothing while nobody listens, and nothing is left
// behind when the last listener goes.
//
// A listener's queue is non-durable and bounded: messages older than
// ListenerTTL expire, and past ListenerMaxLength messages or
// ListenerMaxBytes the oldest are dropped, so a listener that cannot keep
// up (a console on a slow link, a stalled process) costs the broker that
// much memory at most. It is consumed with automatic acks, so that a
// broker alarm, which blocks the publishing connection, does not hold its
// deliveries back; what the listener's reader leaves unread past
// listenerBuffer messages is dropped, as the memory backend does.
//
// A listener ends when its connection is lost, with ErrConnectionLost
// (Err): it does not resubscribe, since what was broadcast meanwhile is
// gone anyway. Its owner listens again (the console and the fleet agent
// do, after a backoff); Listen waits for the next connection.

// broadcastExchange carries every broadcast, the topic as routing key.
const broadcastExchange = "amq.direct"

// The bounds of a listener's queue.
const (
	// ListenerTTL is how long a broadcast waits for a listener at most.
	ListenerTTL = time.Minute
	// ListenerMaxLength is how many broadcasts a listener's queue holds
	// at most; past it the oldest are dropped.
	ListenerMaxLength = 1000
	// ListenerMaxBytes is how many bytes of broadcasts a listener's
	// queue holds at most; past it the oldest are dropped.
	ListenerMaxBytes = 16 << 20
)

// listenerBuffer is how many messages a listener holds unread before it
// drops the next ones.
const listenerBuffer = 256

var _ broker.Broadcaster = (*Backend)(nil)

// Broadcast implements broker.Broadcaster: body goes to every listener of
// topic there is now, confirmed by the broker; with none, it is dropped,
// and that is no error. While the connection is down it waits for the
// next one, bounded by ctx.
func (b *Backend) Broadcast(ctx context.Context, topic string, body []byte) error {
	if err := checkTopic(topic); err != nil {
		return err
	}
	pub := amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Transient, MessageId: broadcastID(), Body: body}
	err := b.publish(ctx, route{exchange: broadcastExchange, key: topic}, pub)
	if errors.Is(err, broker.ErrUnroutable) {
		return nil // nobody listens
	}
	return err
}

// checkTopic refuses a topic AMQP cannot carry as a routing key.
func checkTopic(topic string) error {
	if topic == "" || len(topic) > 255 {
		return fmt.Errorf("rabbitmq: broadcast topic %.40q: it takes 1 to 255 bytes", topic)
	}
	return nil
}

// broadcastID is a message id of its own for a broadcast: the publisher
// pairs a returned message with its publish by id.
func broadcastID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "queuey.broadcast." + hex.EncodeToString(b)
}

// listenerArgs bound a listener's queue.
var listenerArgs = amqp.Table{
	"x-message-ttl":      int64(ListenerTTL / time.Millisecond),
	"x-max-length":       int64(ListenerMaxLength),
	"x-max-length-bytes": int64(ListenerMaxBytes),
	"x-overflow":         "drop-head",
}

// Listen implements broker.Broadcaster: a queue of the listener's own,
// bound to topic, on the publishing connection. It waits for a
// connection, bounded by ctx. The listener ends at Close, at the
// backend's (Err: broker.ErrClosed) or when its connection is lost (Err:
// ErrConnectionLost); then listen again.
func (b *Backend) Listen(ctx context.Context, topic string) (broker.Listener, error) {
	if err := checkTopic(topic); err != nil {
		return nil, err
	}
	for {
		s, err := b.session(ctx)
		if err != nil {
			return nil, err
		}
		l, err := s.listen(ctx, topic)
		if errors.Is(err, ErrConnectionLost) && ctx.Err() == nil {
			continue
		}
		return l, err
	}
}

// listen declares, binds and consumes a listener's queue on a channel of
// its own (guard), once the broker does not block the connection.
func (s *session) listen(ctx context.Context, topic string) (*listener, error) {
	if err := s.waitUnblocked(ctx); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var l *listener
	err := s.guard(ctx, callRequest, "listen to", quoted(topic), func() error {
		ch, err := s.conn.Channel()
		if err != nil {
			return err
		}
		l, err = startListener(s, ch, topic)
		if err != nil {
			_ = ch.Close()
		}
		return err
	})
	if err != nil {
		if l != nil { // it got through, just as guard gave the connection up
			l.Close()
		}
		return nil, lostOr(fmt.Errorf("listen to %q: %w", topic, err))
	}
	return l, nil
}

func startListener(s *session, ch *amqp.Channel, topic string) (*listener, error) {
	q, err := ch.QueueDeclare("", false, true, true, false, listenerArgs)
	if err != nil {
		return nil, err
	}
	if err := ch.QueueBind(q.Name, topic, broadcastExchange, false, nil); err != nil {
		return nil, err
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return nil, err
	}
	l := &listener{topic: topic, channelEnd: newChannelEnd(ch), out: make(chan []byte, listenerBuffer)}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	go l.run(deliveries, closed, s)
	return l, nil
}

// listener is one listener's channel and its consumer.
type listener struct {
	channelEnd
	topic   string
	out     chan []byte
	dropped atomic.Uint64
}

// run hands each delivery on, or drops it when the reader has
// listenerBuffer unread, until the deliveries end or Close.
func (l *listener) run(deliveries <-chan amqp.Delivery, closed <-chan *amqp.Error, s *session) {
	defer close(l.out)
	defer close(l.ended)
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				l.err = l.why(closed, s)
				return
			}
			select {
			case l.out <- d.Body:
			default:
				l.dropped.Add(1)
			}
		case <-l.stop:
			return
		}
	}
}

// why the deliveries ended: nil after Close, ErrClosed when the backend
// closed, else the lost connection or channel.
func (l *listener) why(closed <-chan *amqp.Error, s *session) error {
	select {
	case <-l.stop:
		return nil
	default:
	}
	s.closeMu.Lock()
	backendClosing := s.backendClosed
	s.closeMu.Unlock()
	var e *amqp.Error
	select {
	case e = <-closed:
	default:
	}
	switch {
	case backendClosing && e == nil:
		return broker.ErrClosed
	case e != nil:
		return fmt.Errorf("%w: listener of %q: %s", ErrConnectionLost, l.topic, e.Reason)
	}
	return fmt.Errorf("%w: listener of %q", ErrConnectionLost, l.topic)
}

// Messages implements broker.Listener.
func (l *listener) Messages() <-chan []byte { return l.out }
