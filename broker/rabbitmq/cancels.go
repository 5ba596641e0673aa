package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
)

// The ledger of a queue set's cancelled jobs (broker.CancelLedger,
// ARCHITECTURE.md §1, "Cancellation") is a durable stream queue,
// broker.CancelLedgerName(prefix): a log the broker appends each publish
// to, in the one order every consumer reads it in, and keeps after it is
// read. A record is published persistent, with a confirm; a follower
// consumes the stream from its first offset kept ("x-stream-offset":
// "first"), then live. The stream keeps its records MaxCancelKeep
// (x-max-age) and CancelLedgerMaxBytes at most (x-max-length-bytes), in
// segments of CancelLedgerSegmentBytes, the unit in which retention drops
// the oldest.
//
// A stream says nothing of its consumers (a passive declare counts none),
// so beside it each set has the roll of its followers
// (broker.CancelFollowersName): a classic, non-durable queue that every
// follower of the set consumes and nothing is published to, gone
// CancelRollExpires after its last follower. Its consumer count is
// CancelFollowers. A follower consumes the roll first, then the stream, on
// one channel: whoever the roll counts reads every record kept before the
// count, since its stream consumer starts after, from the first.
//
// A follower has a channel of its own on the publishing connection, as a
// broadcast listener has: it takes none of the consume connections'
// channels, which are counted for the work queues' consumers
// (consumelinks.go). It does not drop: what its reader leaves unread
// holds its acks back, and with them the stream's credit, so that the
// broker stops sending it (followPrefetch in flight at most). A broker
// alarm that blocks the connection holds its acks back too: it stalls,
// and goes on once the block lifts. It ends with its channel or
// connection: ErrConnectionLost; ErrConsumerCancelled when the broker
// ended one of its consumers (the stream or the roll was deleted, or its
// node went away); broker.ErrFollowerBehind when a record stayed unacked
// past the broker's consumer_timeout, which closes the channel. It does
// not resubscribe: its owner follows again, from the start.

// The bounds of a ledger's stream and of its roll.
const (
	// CancelLedgerMaxBytes is how much of a ledger the broker keeps at
	// most; past it the oldest segment goes, whatever its records' keep.
	CancelLedgerMaxBytes = 256 << 20
	// CancelLedgerSegmentBytes is the size of a ledger's segments, the
	// files retention deletes whole.
	CancelLedgerSegmentBytes = 8 << 20
	// CancelRollExpires is how long a roll of followers stays once it has
	// none (x-expires).
	CancelRollExpires = time.Minute
)

// followPrefetch is how many records a follower has in flight, unacked.
const followPrefetch = 256

var _ broker.CancelLedger = (*Backend)(nil)

// ledgerArgs make a ledger's stream.
var ledgerArgs = amqp.Table{
	"x-queue-type":                    "stream",
	"x-max-age":                       fmt.Sprintf("%ds", (broker.MaxCancelKeep+time.Second-1)/time.Second),
	"x-max-length-bytes":              int64(CancelLedgerMaxBytes),
	"x-stream-max-segment-size-bytes": int64(CancelLedgerSegmentBytes),
}

// rollArgs make a roll of followers: classic, whatever the virtual host's
// default queue type (a quorum queue cannot be non-durable).
var rollArgs = amqp.Table{
	"x-queue-type": "classic",
	"x-expires":    int64(CancelRollExpires / time.Millisecond),
}

// checkRoll refuses, before anything is sent, a prefix whose roll of
// followers RabbitMQ cannot name.
func checkRoll(prefix string) error {
	roll := broker.CancelFollowersName(prefix)
	switch {
	case !utf8.ValidString(roll):
		return &broker.NameError{Name: roll, Reason: "is invalid: the name is not valid UTF-8"}
	case strings.HasPrefix(roll, "amq."):
		return &broker.NameError{Name: roll, Reason: `is invalid: the "amq." prefix is reserved by RabbitMQ`}
	case len(roll) > broker.MaxNameBytes:
		return &broker.NameError{Name: roll, Reason: fmt.Sprintf("is invalid: the name is %d bytes, over the %d-byte AMQP limit", len(roll), broker.MaxNameBytes)}
	}
	return nil
}

// AppendCancel implements broker.CancelLedger: it declares the stream of
// prefix's ledger and publishes body into it, persistent, confirmed. A
// publish cut off by a lost connection goes again on the next one, so a
// record may be in the ledger twice. keep, in (0, MaxCancelKeep], is met by the
// stream's own x-max-age, unless the ledger outgrows CancelLedgerMaxBytes.
func (b *Backend) AppendCancel(ctx context.Context, prefix string, body []byte, keep time.Duration) error {
	if err := checkRoll(prefix); err != nil {
		return err
	}
	if keep <= 0 || keep > broker.MaxCancelKeep {
		return fmt.Errorf("%w: cancellation keep %v is not in (0, %v]", broker.ErrInvalidDelay, keep, broker.MaxCancelKeep)
	}
	name := broker.CancelLedgerName(prefix)
	pub := amqp.Publishing{MessageId: broker.NewJobID(), DeliveryMode: amqp.Persistent, Body: body}
	var err error
	for range 2 { // a stream deleted between the declare and the publish: once more
		err = b.onSession(ctx, func(s *session) error { return s.declare(ctx, name, true, ledgerArgs) })
		if err == nil {
			err = b.publish(ctx, toQueue(name), pub)
		}
		if !errors.Is(err, broker.ErrUnroutable) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("append to the ledger %q for %q: %w", name, prefix, err)
	}
	return nil
}

// CancelFollowers implements broker.CancelLedger: the consumers of
// prefix's roll, by a passive declare; a roll that does not exist has
// none.
func (b *Backend) CancelFollowers(ctx context.Context, prefix string) (int, error) {
	if err := checkRoll(prefix); err != nil {
		return 0, err
	}
	var n int
	err := b.onSession(ctx, func(s *session) error {
		q, err := s.inspect(ctx, broker.CancelFollowersName(prefix))
		n = q.Consumers
		if errors.Is(err, broker.ErrNoQueue) {
			n, err = 0, nil
		}
		return err
	})
	return n, err
}

// FollowCancels implements broker.CancelLedger: a channel of its own on
// the publishing connection, as a broadcast listener has, which it waits
// for, bounded by ctx. The follower ends at Close, at the backend's (Err:
// broker.ErrClosed) or with its channel or connection; then follow again.
// A stream another process has just declared may not be up on this node
// yet: FollowCancels tries again after a pause (nackPause), until ctx
// ends.
func (b *Backend) FollowCancels(ctx context.Context, prefix string) (broker.Listener, error) {
	if err := checkRoll(prefix); err != nil {
		return nil, err
	}
	pause := nackPause{clock: b.opts.Clock}
	for {
		f, err := b.followOnce(ctx, prefix)
		if !errors.Is(err, errStreamStarting) {
			if err != nil {
				return nil, err
			}
			return f, nil
		}
		if perr := pause.wait(ctx); perr != nil {
			return nil, fmt.Errorf("%w (tried again until: %w)", err, perr)
		}
	}
}

// followOnce starts a follower on the live publishing session, on the
// next one when the connection was lost meanwhile, until ctx ends.
func (b *Backend) followOnce(ctx context.Context, prefix string) (*follower, error) {
	var f *follower
	err := b.onSession(ctx, func(s *session) (err error) {
		f, err = s.follow(ctx, prefix)
		return err
	})
	return f, err
}

// follow opens the follower's channel and starts it (guard), once the
// broker does not block the connection.
func (s *session) follow(ctx context.Context, prefix string) (*follower, error) {
	if err := s.waitUnblocked(ctx); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ledger, roll := broker.CancelLedgerName(prefix), broker.CancelFollowersName(prefix)
	var f *follower
	err := s.guard(ctx, callRequest, "follow", quoted(roll), func() error {
		ch, err := s.conn.Channel()
		if err != nil {
			return lostOr(err)
		}
		f, err = startFollower(s, ch, prefix, ledger, roll)
		if err != nil {
			_ = ch.Close()
		}
		return err
	})
	if err != nil {
		if f != nil { // it got through, just as guard gave the connection up
			f.Close()
		}
		return nil, fmt.Errorf("follow the ledger %q for %q: %w", ledger, prefix, err)
	}
	return f, nil
}

// startFollower declares the ledger and prefix's roll on ch, consumes the
// roll, then the ledger from its first offset, and starts the follower's
// goroutine.
func startFollower(s *session, ch *amqp.Channel, prefix, ledger, roll string) (*follower, error) {
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	cancelled := ch.NotifyCancel(make(chan string, 2))
	if _, err := ch.QueueDeclare(ledger, true, false, false, false, ledgerArgs); err != nil {
		return nil, followError(ledger, err)
	}
	if _, err := ch.QueueDeclare(roll, false, false, false, false, rollArgs); err != nil {
		return nil, followError(roll, err)
	}
	if err := ch.Qos(followPrefetch, 0, false); err != nil {
		return nil, lostOr(err)
	}
	counted, err := ch.Consume(roll, consumerTag(roll), true, false, false, false, nil)
	if err != nil {
		return nil, followError(roll, err)
	}
	records, err := ch.Consume(ledger, consumerTag(ledger), false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		return nil, followError(ledger, err)
	}
	f := &follower{set: prefix, ledger: ledger, channelEnd: newChannelEnd(ch), cancelled: cancelled, out: make(chan []byte, listenerBuffer)}
	go f.run(records, counted, closed, s)
	return f, nil
}

// errStreamStarting: the broker has the ledger's stream, but not yet its
// replica on the connection's node; it comes up soon after the stream is
// first declared (a consume then, from another connection, is refused
// with PRECONDITION_FAILED, or, on RabbitMQ 3.10, ends the connection
// with INTERNAL_ERROR).
var errStreamStarting = errors.New("rabbitmq: the ledger's stream has no replica on this node yet")

// followError says why declaring or consuming queue name failed.
func followError(name string, err error) error {
	var amqpErr *amqp.Error
	switch {
	case errors.As(err, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed && strings.Contains(amqpErr.Reason, "replica on the local node"):
		return fmt.Errorf("%w: %s", errStreamStarting, amqpErr.Reason)
	case errors.As(err, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed:
		return inequivalent(name, amqpErr.Reason)
	}
	return consumeError([]string{name}, err)
}

// follower is one follower's channel and its two consumers.
type follower struct {
	channelEnd
	set       string // the queue set's prefix
	ledger    string
	cancelled <-chan string
	out       chan []byte
}

// run hands each record on, acking it once its reader has it, until the
// records or the roll's consumer end, or Close.
func (f *follower) run(records, counted <-chan amqp.Delivery, closed <-chan *amqp.Error, s *session) {
	defer close(f.out)
	defer close(f.ended)
	for {
		select {
		case d, ok := <-records:
			if !ok {
				f.end(closed, s)
				return
			}
			if !f.handOn(d, closed, s) {
				return
			}
		case _, ok := <-counted: // nothing is published to the roll; what is, is dropped
			if !ok {
				f.end(closed, s)
				return
			}
		case <-f.stop:
			return
		}
	}
}

// handOn gives d's body to the reader, however long it takes, then acks
// it, which lets the broker send the next. It reports false when the
// follower ended meanwhile.
func (f *follower) handOn(d amqp.Delivery, closed <-chan *amqp.Error, s *session) bool {
	select {
	case f.out <- d.Body:
	case e, ok := <-closed:
		again := make(chan *amqp.Error, 1)
		if ok {
			again <- e
		}
		f.end(again, s)
		return false
	case <-f.stop:
		return false
	}
	_ = d.Ack(false) // one that fails, fails with the channel, whose end comes next
	return true
}

// end records why the follower ended by itself, and closes its channel
// if the broker left it open (it cancelled a consumer).
func (f *follower) end(closed <-chan *amqp.Error, s *session) {
	f.err = f.why(closed, s)
	if !f.ch.IsClosed() && errors.Is(f.err, ErrConsumerCancelled) {
		_ = f.ch.Close()
	}
}

// why the follower ended: nil after Close, ErrClosed when the backend
// closed, broker.ErrFollowerBehind when the broker closed the channel for
// a record left unacked past its consumer_timeout, ErrConsumerCancelled
// when the broker cancelled a consumer, else the lost connection or
// channel.
func (f *follower) why(closed <-chan *amqp.Error, s *session) error {
	select {
	case <-f.stop:
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
	case e != nil && e.Code == amqp.PreconditionFailed && strings.Contains(e.Reason, "timed out"):
		// Its reader left a record unread past the broker's consumer_timeout.
		return fmt.Errorf("%w (%w): follower of %q for %q: %s", broker.ErrFollowerBehind, ErrConsumerTimeout, f.ledger, f.set, e.Reason)
	case e != nil:
		return fmt.Errorf("%w: follower of %q for %q: %s", ErrConnectionLost, f.ledger, f.set, e.Reason)
	case len(f.cancelled) > 0:
		return fmt.Errorf("%w: follower of %q for %q (its stream or its roll was deleted, or its node went away); follow again",
			ErrConsumerCancelled, f.ledger, f.set)
	}
	return fmt.Errorf("%w: follower of %q for %q", ErrConnectionLost, f.ledger, f.set)
}

// Messages implements broker.Listener: the set's records, in the
// ledger's order.
func (f *follower) Messages() <-chan []byte { return f.out }
