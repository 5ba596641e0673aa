package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
)

// publisher is one confirm-mode channel with many publishes in flight.
//
// Pairing a basic.return with its publish: the broker sends the return of a
// message before the ack of the same message on the same channel, and
// amqp091 hands both to listeners from its one reader goroutine, in that
// order. The returns listener is unbuffered, so the reader cannot go on to
// the ack before the owner goroutine has taken the return; by the time
// either side settles a publish, its return (if any) is recorded under its
// message id.
type publisher struct {
	s         *session
	ch        *amqp.Channel
	dead      chan struct{} // closed when the channel is gone
	closing   chan *amqp.Error
	confirmed uint64 // confirms received; only the owner goroutine (own) touches it
	// sending serializes a publish with the passive declares before it
	// (route.existing): amqp091 sends a publish's frames under a lock of
	// its channel, but a declare without it, which could come between them
	// (a protocol error, which ends the connection).
	sending sync.Mutex

	mu       sync.Mutex
	failed   error                      // why the channel is gone, once it is
	pending  map[uint64]*pendingPublish // by delivery tag
	early    map[uint64]bool            // confirms that beat their registration: tag → acked
	returned map[string]amqp.Return     // by message id, until the ack comes
}

type pendingPublish struct {
	id   string
	done chan error
}

func newPublisher(s *session) (*publisher, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	p := &publisher{
		s:        s,
		ch:       ch,
		dead:     make(chan struct{}),
		pending:  map[uint64]*pendingPublish{},
		early:    map[uint64]bool{},
		returned: map[string]amqp.Return{},
	}
	p.closing = ch.NotifyClose(make(chan *amqp.Error, 1))
	returns := ch.NotifyReturn(make(chan amqp.Return)) // unbuffered: see the type's comment
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 256))
	go p.own(returns, confirms)
	return p, nil
}

// own receives the channel's returns and confirms until the channel closes,
// then fails what is still pending.
func (p *publisher) own(returns <-chan amqp.Return, confirms <-chan amqp.Confirmation) {
	defer close(p.dead)
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			p.mu.Lock()
			p.returned[r.MessageId] = r
			p.mu.Unlock()
		case c, ok := <-confirms:
			if !ok {
				p.failAll()
				if returns != nil {
					for range returns { // amqp091 closes it too; let its reader finish
					}
				}
				return
			}
			p.confirmed++
			p.mu.Lock()
			if pend, ok := p.pending[c.DeliveryTag]; ok {
				delete(p.pending, c.DeliveryTag)
				pend.done <- p.outcomeLocked(pend.id, c.Ack)
			} else {
				p.early[c.DeliveryTag] = c.Ack
			}
			p.mu.Unlock()
		}
	}
}

func (p *publisher) outcomeLocked(id string, acked bool) error {
	if r, ok := p.returned[id]; ok {
		delete(p.returned, id)
		return fmt.Errorf("%w: the broker returned the message published to %q: %d %s",
			broker.ErrUnroutable, r.RoutingKey, r.ReplyCode, r.ReplyText)
	}
	if !acked {
		return ErrNacked
	}
	return nil
}

// failAll fails what is pending when the channel is gone. A channel the
// broker closed with a channel error (a soft error: it refused what was
// published on it, such as a header of a type it does not take) is an
// answer, not a lost connection: it must not be published again, or a
// refused message would be retried in a tight loop. With one publish in
// flight the refusal was that publish's; with more, it was one of them
// (errSharedRefusal), and the session publishes each again alone to tell.
func (p *publisher) failAll() {
	err := fmt.Errorf("%w: the channel closed before the broker confirmed the publish", ErrConnectionLost)
	select {
	case e := <-p.closing:
		if e != nil && e.Server && e.Recover {
			err = refusal(e)
			// Every confirm the broker sent before it closed the channel
			// has been received: the rest of what was published is what
			// was in flight.
			if p.ch.GetNextPublishSeqNo()-1-p.confirmed > 1 {
				err = fmt.Errorf("%w (%w)", err, errSharedRefusal)
			}
		}
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for tag, pend := range p.pending {
		pend.done <- err
		delete(p.pending, tag)
	}
	p.failed = err
}

// refusal is what a channel error, e, says of the publishes in flight on
// the channel it closed: ErrRefused, and broker.ErrNoQueue (or
// broker.ErrUnavailable, for a queue whose node is down) when a queue
// that a publish needed was not there (route.existing), or errNoExchange
// when the exchange it was sent to was not (a delay level deleted).
func refusal(e *amqp.Error) error {
	switch {
	case e.Code == amqp.NotFound && (strings.HasPrefix(e.Reason, "NOT_FOUND - no queue") || strings.Contains(e.Reason, "is down or inaccessible")):
		return fmt.Errorf("%w: %w: %d %s", ErrRefused, notFound(e), e.Code, e.Reason)
	case e.Code == amqp.NotFound && strings.HasPrefix(e.Reason, "NOT_FOUND - no exchange"):
		return fmt.Errorf("%w: %w: %d %s", ErrRefused, errNoExchange, e.Code, e.Reason)
	}
	return fmt.Errorf("%w: %d %s", ErrRefused, e.Code, e.Reason)
}

// errNoExchange: a publish went to an exchange that does not exist.
var errNoExchange = errors.New("no such exchange")

func (p *publisher) isDead() bool {
	select {
	case <-p.dead:
		return true
	default:
		return false
	}
}

// errSharedRefusal marks a refusal that closed a channel with more than one
// publish in flight: the refused one may have been another.
var errSharedRefusal = errors.New("one of several publishes in flight on the channel")

// shutdown closes the channel; the owner then fails what is pending.
func (p *publisher) shutdown() { _ = p.ch.Close() }

// publish sends pub where to says, mandatory, and waits for its confirm.
func (p *publisher) publish(ctx context.Context, to route, pub amqp.Publishing) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	confirmed, err := p.send(ctx, to, pub)
	if err != nil {
		return err
	}
	return p.wait(ctx, to, confirmed)
}

// send sends pub where to says, mandatory, and
// returns where its outcome will come (see wait). A write the broker does
// not take ends soon after ctx does (session.guard).
func (p *publisher) send(ctx context.Context, to route, pub amqp.Publishing) (confirmed <-chan error, _ error) {
	if err := fitsAFrame(pub, p.s.conn.Config.FrameSize); err != nil {
		return nil, fmt.Errorf("publish to %s: %w", to, err)
	}
	var dc *amqp.DeferredConfirmation
	err := p.s.guard(ctx, callWrite, "publish to", to, func() (err error) {
		p.sending.Lock()
		defer p.sending.Unlock()
		for _, q := range to.existing {
			if _, err := p.ch.QueueDeclarePassive(q, false, false, false, true, nil); err != nil {
				return err
			}
		}
		dc, err = p.ch.PublishWithDeferredConfirm(to.exchange, to.key, true, false, pub)
		return err
	})
	if err != nil {
		return nil, lostOr(err)
	}
	done := make(chan error, 1)
	p.mu.Lock()
	if acked, ok := p.early[dc.DeliveryTag]; ok {
		delete(p.early, dc.DeliveryTag)
		done <- p.outcomeLocked(pub.MessageId, acked)
	} else {
		p.pending[dc.DeliveryTag] = &pendingPublish{id: pub.MessageId, done: done}
	}
	p.mu.Unlock()
	return done, nil
}

// fitsAFrame refuses, before anything is written, a publish that AMQP
// cannot carry: a short string (message id, correlation id, type, a
// header's name) over 255 bytes, or properties larger than the
// connection's frame size. Either, once on the wire, would end the
// connection, and the publish would be tried again on the next one, for
// ever.
func fitsAFrame(pub amqp.Publishing, frameSize int) error {
	for _, f := range []struct{ name, v string }{{"message id", pub.MessageId}, {"correlation id", pub.CorrelationId}, {"type", pub.Type}} {
		if len(f.v) > 255 {
			return fmt.Errorf("%w: its %s is %d bytes long; AMQP takes 255", ErrUnencodable, f.name, len(f.v))
		}
	}
	size := 256 // the frame's header and the other properties, generously
	for k, v := range pub.Headers {
		if len(k) > 255 {
			return fmt.Errorf("%w: its header name %.40q… is %d bytes long; AMQP takes 255", ErrUnencodable, k, len(k))
		}
		size += 1 + len(k) + 5 + headerValueSize(v)
	}
	if frameSize > 0 && size > frameSize {
		return fmt.Errorf("%w: its headers take about %d bytes, over the connection's frame size of %d", ErrUnencodable, size, frameSize)
	}
	return nil
}

// headerValueSize is about what a header value takes on the wire: its
// length for text, generously more than a number takes for the rest.
func headerValueSize(v any) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case []byte:
		return len(v)
	}
	return 64
}

// wait waits for the outcome of a publish to to that send started.
func (p *publisher) wait(ctx context.Context, to route, confirmed <-chan error) error {
	select {
	case err := <-confirmed:
		return err
	case <-p.dead:
		select {
		case err := <-confirmed:
			return err
		default:
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.failed
		}
	case <-ctx.Done():
		// The owner still settles the tag; nobody waits for it.
		return fmt.Errorf("rabbitmq: waiting for the confirm of a publish to %s: %w", to, ctx.Err())
	}
}

// route is where a publish goes: a queue, through the default exchange
// (toQueue), or an exchange with a routing key (the delay levels); and
// the queues that must exist when the broker takes the publish (a hold's
// work queues). Each of those is declared passively, without an answer,
// on the publish's channel just before it: the broker takes a channel's
// frames in order, so a publish it confirms was taken after they were
// seen to be there, at the cost of a frame and no round trip; one that is
// gone closes the channel (404) before the publish is taken, and the
// publish fails with broker.ErrNoQueue (refusal). A passive declare
// without an answer looks the queue up; it does not ask the queue for its
// counts, which a busy queue answers in its turn.
type route struct {
	exchange, key string
	existing      []string
}

// toQueue routes to queue through the default exchange.
func toQueue(queue string) route { return route{key: queue} }

// String is the queue's name, quoted, or the exchange's and the key's.
func (r route) String() string {
	if r.exchange == "" {
		return strconv.Quote(r.key)
	}
	return fmt.Sprintf("exchange %q (routing key %q)", r.exchange, r.key)
}

// publishing is msg on the wire (ARCHITECTURE.md §1, "Wire format"):
// JSON, persistent, message id = job id, type = kind, priority, x-attempt
// and x-deferrals headers, the due time (broker.HeaderDue) when set, plus
// msg's own headers and extra's (a dead letter's), which come last.
func publishing(msg broker.Message, extra amqp.Table) amqp.Publishing {
	headers := make(amqp.Table, len(msg.Headers)+3+len(extra))
	for k, v := range msg.Headers {
		headers[k] = v
	}
	headers[broker.HeaderAttempt] = msg.Attempt
	headers[broker.HeaderDeferrals] = msg.Deferrals
	if !msg.DueAt.IsZero() {
		headers[broker.HeaderDue] = strconv.FormatInt(msg.DueAt.UnixMilli(), 10)
	}
	for k, v := range extra {
		headers[k] = v
	}
	typ := msg.Type
	if len(typ) > 255 {
		typ = typ[:255]
	}
	return amqp.Publishing{
		ContentType:   "application/json",
		DeliveryMode:  amqp.Persistent,
		MessageId:     msg.ID,
		CorrelationId: msg.CorrelationID,
		Type:          typ,
		Priority:      msg.Priority,
		Headers:       headers,
		Body:          msg.Body,
	}
}
