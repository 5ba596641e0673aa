package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/supervisor"
)

// Errors particular to this backend.
var (
	// ErrConnectionLost: the connection broke while a call was in flight.
	// Publishes retry on the next connection by themselves until their ctx
	// ends; this surfaces through consumers and settles.
	ErrConnectionLost = errors.New("rabbitmq: connection lost")
	// ErrAccessRefused: the broker refused the credentials. (A vhost that
	// does not exist, or that the user may not use, is said apart, with
	// the broker's *amqp.Error under it.)
	// Retrying does not help; fix the URL.
	ErrAccessRefused = errors.New("rabbitmq: access refused")
	// ErrNacked: the broker nacked a publish (it could not take the
	// message: a quorum queue electing a new leader, a queue that
	// rejects publishes while full). A publish is tried again, with
	// backoff, until its ctx ends; then this is the error.
	ErrNacked = errors.New("rabbitmq: broker nacked the publish")
	// ErrBlocked: the broker blocks publishes (a memory or disk alarm) and
	// the call's ctx ended before it lifted.
	ErrBlocked = errors.New("rabbitmq: broker blocked publishing")
	// ErrRefused: the broker refused a publish with a channel error (a
	// header of a type it does not take, a message over its size limit)
	// and closed the channel. Publishing it again would be refused again.
	ErrRefused = errors.New("rabbitmq: the broker refused a publish and closed its channel")
	// ErrUnencodable: a publish AMQP cannot carry (a short string over 255
	// bytes, properties over the frame size) was refused before it was
	// sent; the connection is unharmed.
	ErrUnencodable = errors.New("rabbitmq: the message does not fit AMQP's limits; not sent")
	// ErrConsumerTimeout: the broker closed a consumer's channel because a
	// delivery stayed unacked longer than its consumer_timeout. The job
	// comes back; raise consumer_timeout or keep jobs (JobTimeout) shorter.
	ErrConsumerTimeout = errors.New("rabbitmq: a delivery outlived the broker's consumer_timeout")
)

// Backend is the RabbitMQ backend. Create it with Dial.
type Backend struct {
	nodes   []node // the broker's nodes, tried in turn (dial)
	safeURL string // every node's URL without its password, for String
	opts    Options

	runCtx context.Context // the connection supervisors'; ends at Close
	stop   context.CancelFunc
	runs   sync.WaitGroup // the connection supervisors

	mu     sync.Mutex
	closed bool
	// pub publishes and declares; sub carries the consumers, from the
	// first Consume on, and subMore those that do not fit on it, a
	// connection each time the last is full (consumelinks.go). Apart, a
	// broker alarm that blocks the publishing connection leaves the
	// consumers free to ack (RabbitMQ blocks a whole connection, acks
	// included, once it publishes during an alarm).
	pub, sub   link
	subMore    []*link
	channelMax uint16 // the broker's channel_max, from the first dial's handshake
	declared   map[string]broker.QueueSpec
}

// node is one node of the broker, by its URL.
type node struct {
	url     string // holds credentials: never logged, never in an error
	safeURL string // url without its password (Redact)
}

// link is one of the backend's connections, as its connection actor
// keeps it. Backend.mu guards its fields.
type link struct {
	role       string        // "publish", "consume", "consume 2"..., for the logs
	name       string        // the connection_name the broker shows
	channelMax uint16        // the channel_max asked of the broker; 0: the broker's
	started    bool          // its connection actor runs
	conn       *session      // nil while disconnected
	ready      chan struct{} // closed while conn is set (or the backend is closed)
}

var _ broker.Backend = (*Backend)(nil)

// Dial connects to the broker at rawURL (amqp:// or amqps://) and keeps the
// connection up until Close (and the consumers' own, from the first
// Consume). A first dial that fails is returned as an error (credentials,
// a missing vhost, nobody listening) rather than retried.
func Dial(ctx context.Context, rawURL string, opts *Options) (*Backend, error) {
	return DialCluster(ctx, []string{rawURL}, opts)
}

// DialCluster is Dial for a broker of several nodes, a RabbitMQ cluster:
// one URL per node. Each connection goes to the first node, in the given
// order, that takes it; when it is lost, the next dial starts with
// another node, with the same backoff as Dial's reconnects, so that
// publishes in flight go out again through a node that is up
// (ARCHITECTURE.md §1, "Topologies"). The first dial fails only if no
// node takes it.
func DialCluster(ctx context.Context, urls []string, opts *Options) (*Backend, error) {
	if len(urls) == 0 {
		return nil, errors.New("rabbitmq: no broker URL to dial")
	}
	o := opts.withDefaults()
	b := &Backend{
		opts:     o,
		pub:      link{role: "publish", name: o.ConnectionName, ready: make(chan struct{})},
		sub:      link{role: "consume", name: consumeLinkName(o.ConnectionName, 0), channelMax: o.consumeChannelMax, ready: make(chan struct{})},
		declared: map[string]broker.QueueSpec{},
	}
	safe := make([]string, len(urls))
	for i, raw := range urls {
		n, err := parseNode(raw)
		if err != nil {
			return nil, err
		}
		b.nodes, safe[i] = append(b.nodes, n), n.safeURL
	}
	b.safeURL = strings.Join(safe, ",")
	first, _, err := b.dial(ctx, &b.pub, 0)
	if err != nil {
		return nil, err
	}
	b.channelMax = first.Config.ChannelMax
	b.pub.started = true
	b.runCtx, b.stop = context.WithCancel(context.Background())
	b.superviseLocked(&b.pub, first)
	return b, nil
}

// parseNode checks that rawURL is an amqp:// or amqps:// URL.
func parseNode(rawURL string) (node, error) {
	n := node{url: rawURL, safeURL: Redact(rawURL)}
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		// The parser's text may quote part of the password: none of it.
		return n, fmt.Errorf("rabbitmq: the AMQP URL does not parse: is its port a number? A user name or password holding '/', '?', '#', '@', ':', '%%' or a space must be percent-encoded (url.UserPassword does it)")
	case u.Scheme != "amqp" && u.Scheme != "amqps":
		return n, fmt.Errorf("rabbitmq: %q is not an amqp:// or amqps:// URL (amqp://user:password@host:5672/vhost)", n.safeURL)
	}
	return n, nil
}

// superviseLocked starts the supervised connection actor that keeps l
// connected until Close; first, when set, is its first connection. The
// caller holds b.mu, or has not shared b yet.
func (b *Backend) superviseLocked(l *link, first *connection) {
	sup := supervisor.New(supervisor.Spec{
		Name:       "rabbitmq " + l.role,
		Intensity:  math.MaxInt32, // a broker may be away for long; backoff paces the dials
		Period:     time.Minute,
		MinBackoff: b.opts.ReconnectMin,
		MaxBackoff: b.opts.ReconnectMax,
		Clock:      b.opts.Clock,
		Logger:     quiet,
	}, supervisor.Child{Name: l.role + " connection", Run: (&connectionActor{b: b, link: l, first: first}).Run, Restart: supervisor.Permanent})
	b.runs.Go(func() { _ = sup.Run(b.runCtx) })
}

// String names the backend by its URL, without the password.
func (b *Backend) String() string { return "rabbitmq.Backend(" + b.safeURL + ")" }

// Format prints the backend as String does for every verb (%v, %+v, %#v),
// so that no formatting of it can show the credentials its URL holds.
func (b *Backend) Format(f fmt.State, _ rune) { _, _ = fmt.Fprint(f, b.String()) }

// Name reports "rabbitmq".
func (b *Backend) Name() string { return "rabbitmq" }

// session waits for a live publishing connection, bounded by ctx.
func (b *Backend) session(ctx context.Context) (*session, error) {
	return b.sessionOf(ctx, &b.pub)
}

// sessionOf waits for l to be connected, bounded by ctx.
func (b *Backend) sessionOf(ctx context.Context, l *link) (*session, error) {
	for {
		b.mu.Lock()
		closed, s, ready := b.closed, l.conn, l.ready
		b.mu.Unlock()
		switch {
		case closed:
			return nil, broker.ErrClosed
		case s != nil:
			return s, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("rabbitmq: waiting for a connection to %s: %w", b.safeURL, ctx.Err())
		}
	}
}

// Declare declares each work queue with x-max-priority (when set) and its
// dead-letter queue, and remembers them for Hold and for redeclaring after a
// reconnect.
func (b *Backend) Declare(ctx context.Context, specs ...broker.QueueSpec) error {
	for _, s := range specs {
		if err := broker.ValidateSpec(s); err != nil {
			return err
		}
	}
	for {
		s, err := b.session(ctx)
		if err != nil {
			return err
		}
		err = s.declareAll(ctx, specs)
		if errors.Is(err, ErrConnectionLost) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return err
		}
		b.mu.Lock()
		for _, spec := range specs {
			b.declared[spec.Name] = spec
		}
		b.mu.Unlock()
		return nil
	}
}

// Publish puts msg on its queue and waits for the broker's confirm. While
// the connection is down it waits for the next one, bounded by ctx; a
// publish cut off by a lost connection is sent again, so a message may
// arrive twice, never zero times once Publish returned nil. A publish the
// broker nacks is sent again after a pause (50 ms, doubling up to 1 s)
// until ctx ends: a quorum queue nacks while it elects a new leader.
func (b *Backend) Publish(ctx context.Context, msg broker.Message) error {
	return b.publish(ctx, b.routeOf(msg), publishing(msg, nil))
}

// PublishBatch publishes msgs on one channel with up to 256 confirms in
// flight (see broker.BatchPublisher). A message whose confirm was lost with
// the connection is published again on the next one, and one the broker
// nacked is published again alone until ctx ends, as Publish does.
func (b *Backend) PublishBatch(ctx context.Context, msgs []broker.Message, settled func(i int, err error)) {
	todo := make([]int, len(msgs))
	routes := make([]route, len(msgs))
	for i := range todo {
		todo[i] = i
		routes[i] = b.routeOf(msgs[i])
	}
	var nacked []int
	keepNacked := func(i int, err error) {
		if errors.Is(err, ErrNacked) && ctx.Err() == nil {
			nacked = append(nacked, i) // published again below, each alone
			return
		}
		settled(i, err)
	}
	for len(todo) > 0 {
		s, err := b.session(ctx)
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			for _, i := range todo {
				settled(i, err)
			}
			break
		}
		todo = s.publishBatch(ctx, msgs, routes, todo, keepNacked)
	}
	for _, i := range nacked {
		settled(i, b.publishNacked(ctx, routes[i], publishing(msgs[i], nil)))
	}
}

// nackPause paces the publishes again of what the broker nacked: 50 ms,
// doubling up to a second.
type nackPause struct {
	clock clock.Clock
	next  time.Duration
}

// wait waits the next pause, or until ctx ends (its error).
func (p *nackPause) wait(ctx context.Context) error {
	p.next = min(max(2*p.next, 50*time.Millisecond), time.Second)
	select {
	case <-p.clock.After(p.next):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DeclareHold declares the hold queue of queue for ttl, which expires
// 2×ttl after this declare (x-expires; publishes do not count), or for a
// quorum queue the delay levels and the queue's bindings to them again.
// When to declare again is the caller's: the worker's hold actor, and a
// producer, keep the record of what they declared and when.
func (b *Backend) DeclareHold(ctx context.Context, queue string, ttl time.Duration) error {
	spec, err := b.holdSpec(queue, ttl)
	if err != nil {
		return err
	}
	if spec.Type == broker.Quorum {
		return b.declareLevelsAgain(ctx, spec)
	}
	hold := broker.HoldQueueName(queue, ttl)
	for {
		s, err := b.session(ctx)
		if err != nil {
			return err
		}
		err = s.declare(ctx, hold, spec.Durable, table(broker.HoldQueueArgs(spec.Name, ttl)))
		if !errors.Is(err, ErrConnectionLost) || ctx.Err() != nil {
			return err
		}
	}
}

// Hold publishes msg into the hold queue of msg.Queue for ttl, or for a
// quorum queue into the delay levels; the broker dead-letters it back to
// msg.Queue when ttl has passed.
//
// A work queue gone when a wait ends (deleted by an operator, not declared
// again yet) drops what is released into it without a word. So the broker
// takes a hold only once it has seen msg.Queue (and its lane) there, after
// the hold was asked for (route.existing): a work queue that is gone is
// broker.ErrNoQueue, a hold queue or delay level that is gone
// broker.ErrNoHold.
func (b *Backend) Hold(ctx context.Context, msg broker.Message, ttl time.Duration) error {
	spec, err := b.holdSpec(msg.Queue, ttl)
	if err != nil {
		return err
	}
	to := route{key: broker.HoldQueueName(msg.Queue, ttl), existing: workQueues(spec)}
	if spec.Type == broker.Quorum { // into the top delay level, whose key says the wait and the target
		secs := int64(broker.LevelsTTL(ttl) / time.Second)
		to.exchange, to.key = broker.DelayLevelName(broker.DelayLevels-1), broker.DelayRoutingKey(secs, landsOn(spec, msg))
	}
	err = b.publishVia(ctx, viaHolds, to, publishing(msg, nil))
	if errors.Is(err, broker.ErrUnroutable) || errors.Is(err, errNoExchange) {
		return fmt.Errorf("%w: %w", broker.ErrNoHold, err)
	}
	return err
}

// holdSpec checks a hold's ttl and finds its queue's spec.
func (b *Backend) holdSpec(queue string, ttl time.Duration) (broker.QueueSpec, error) {
	if ttl <= 0 || ttl%time.Millisecond != 0 || ttl > broker.MaxHoldMs*time.Millisecond {
		return broker.QueueSpec{}, fmt.Errorf("%w: hold ttl %v is not a whole number of milliseconds in (0, %dms]",
			broker.ErrInvalidDelay, ttl, broker.MaxHoldMs)
	}
	b.mu.Lock()
	spec, ok := b.declared[queue]
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return broker.QueueSpec{}, broker.ErrClosed
	}
	if !ok {
		return broker.QueueSpec{}, fmt.Errorf("%w: hold for %q, which was not declared through this backend", broker.ErrUnknownQueue, queue)
	}
	return spec, nil
}

// workQueues are the queues a message held for spec's queue may be
// released into: the queue, and its lane if it has one. Each must exist
// when the broker takes the hold (route.existing): a queue gone when the
// wait ends drops what is released into it without a word.
func workQueues(spec broker.QueueSpec) []string {
	if hasLane(spec) {
		return []string{spec.Name, broker.LaneQueueName(spec.Name)}
	}
	return []string{spec.Name}
}

// DeadLetter publishes dl to <q>.dead with x-death-reason,
// x-original-queue and x-attempts headers (the reason cut to
// broker.MaxReasonBytes). A dead-letter queue deleted
// by someone else is declared again (as the work queue is).
func (b *Backend) DeadLetter(ctx context.Context, dl broker.DeadLetter) error {
	extra := amqp.Table{
		broker.HeaderDeathReason:   broker.CapReason(dl.Reason),
		broker.HeaderOriginalQueue: dl.Queue,
		broker.HeaderAttempts:      dl.Attempt,
	}
	dead := broker.DeadQueueName(dl.Queue)
	err := b.publishVia(ctx, viaHolds, toQueue(dead), publishing(dl.Message, extra))
	if !errors.Is(err, broker.ErrUnroutable) {
		return err
	}
	// The dead-letter queue went away (deleted by hand): declare it again,
	// as a worker does its work queue, rather than fail every dead letter.
	b.mu.Lock()
	spec, ok := b.declared[dl.Queue]
	b.mu.Unlock()
	if !ok {
		return err
	}
	if derr := b.Declare(ctx, spec); derr != nil {
		return fmt.Errorf("dead-letter queue %q is gone, and declaring it again failed: %w", dead, derr)
	}
	return b.publishVia(ctx, viaHolds, toQueue(dead), publishing(dl.Message, extra))
}

// publish publishes on the pool's channels (viaPool) and waits for the
// confirm.
func (b *Backend) publish(ctx context.Context, to route, pub amqp.Publishing) error {
	return b.publishVia(ctx, viaPool, to, pub)
}

// publishVia publishes on the channel v says and waits for the confirm,
// and publishes again what the broker nacked (publishNacked).
func (b *Backend) publishVia(ctx context.Context, v via, to route, pub amqp.Publishing) error {
	err := b.publishOn(ctx, v, to, pub)
	if errors.Is(err, ErrNacked) && ctx.Err() == nil {
		return b.publishNacked(ctx, to, pub)
	}
	return err
}

// publishOn publishes through the next live connection, on the channel v
// says.
func (b *Backend) publishOn(ctx context.Context, v via, to route, pub amqp.Publishing) error {
	for {
		s, err := b.session(ctx)
		if err != nil {
			return err
		}
		err = s.publish(ctx, v, to, pub)
		if errors.Is(err, ErrConnectionLost) && ctx.Err() == nil {
			continue // the next connection takes it
		}
		return err
	}
}

// publishNacked publishes again what the broker nacked, after a pause
// (nackPause), each time on a channel of its own, until it is confirmed
// or ctx ends: a quorum queue that has just elected a leader was seen to
// go on nacking the channels that published while it had none.
func (b *Backend) publishNacked(ctx context.Context, to route, pub amqp.Publishing) error {
	pause := nackPause{clock: b.opts.Clock}
	for {
		if err := pause.wait(ctx); err != nil {
			return fmt.Errorf("%w (published again until: %w)", ErrNacked, err)
		}
		err := b.publishOn(ctx, viaAlone, to, pub)
		if !errors.Is(err, ErrNacked) || ctx.Err() != nil {
			return err
		}
	}
}

// Depth counts the messages ready on queue, by a passive declare (and on
// its lane's, when it has one).
func (b *Backend) Depth(ctx context.Context, queue string) (int, error) {
	b.mu.Lock()
	spec, ok := b.declared[queue]
	b.mu.Unlock()
	if !ok {
		spec = broker.QueueSpec{Name: queue}
	}
	for {
		s, err := b.session(ctx)
		if err != nil {
			return 0, err
		}
		n, err := b.depthOf(ctx, s, spec)
		if errors.Is(err, ErrConnectionLost) && ctx.Err() == nil {
			continue
		}
		return n, err
	}
}

// Consume opens a channel for queue with basic.qos(prefetch) and starts a
// consumer with manual acks. Consumers have a connection of their own,
// opened by the first Consume, so that their acks never wait behind a
// publish the broker holds up.
func (b *Backend) Consume(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	return b.consume(ctx, queue, prefetch, false)
}

// ConsumeExclusive implements broker.ExclusiveConsumer with an exclusive
// basic.consume: the broker refuses it while the queue has a consumer, and
// refuses others while it lasts (ACCESS_REFUSED, reported as
// broker.ErrInUse).
func (b *Backend) ConsumeExclusive(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	return b.consume(ctx, queue, prefetch, true)
}

func (b *Backend) consume(ctx context.Context, queue string, prefetch int, exclusive bool) (broker.Consumer, error) {
	if prefetch < 1 || prefetch > math.MaxUint16 {
		return nil, fmt.Errorf("rabbitmq: consume %q: prefetch %d is outside 1..65535", queue, prefetch)
	}
	b.mu.Lock()
	spec := b.declared[queue]
	b.mu.Unlock()
	return b.consumeOn(ctx, queue, func(s *session, slot *channelSlot) (broker.Consumer, error) {
		if hasLane(spec) && !exclusive {
			return s.consumeLaned(ctx, slot, queue, prefetch)
		}
		if exclusive && b.queueType(queue) == broker.Quorum {
			if err := b.aloneOn(ctx, s, queue); err != nil {
				return nil, err
			}
		}
		return s.consume(ctx, slot, queue, prefetch, exclusive)
	})
}

// Close stops reconnecting, closes the connections (which ends every
// consumer; the broker takes back their unsettled deliveries) and refuses
// later calls with broker.ErrClosed.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for _, l := range append([]*link{&b.pub, &b.sub}, b.subMore...) {
		if l.conn == nil {
			close(l.ready) // wake waiters; they see closed
		}
	}
	b.mu.Unlock()
	b.stop()
	b.runs.Wait()
	return nil
}

// DeclaredQueues lists the work queues declared through this backend.
func (b *Backend) DeclaredQueues() []broker.QueueSpec {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]broker.QueueSpec, 0, len(b.declared))
	for _, s := range b.declared {
		out = append(out, s)
	}
	return out
}
