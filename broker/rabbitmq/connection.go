package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
)

// quiet is for the connection supervisor: the connection actor logs its own
// events, once each, rather than a line per redial.
var quiet = slog.New(slog.DiscardHandler)

// connection is an AMQP connection and the socket under it, which close
// shuts itself when the broker does not answer in time.
type connection struct {
	*amqp.Connection
	socket *countedConn
}

// close closes the connection, waiting at most closeTimeout for the
// broker's answer, then closes its socket. A deadline on the close alone
// would not do: amqp091 pushes the read deadline back at every frame that
// comes in, and a broker that blocks the connection (a resource alarm)
// leaves the close unanswered while its heartbeats go on.
func (c *connection) close() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.CloseDeadline(time.Now().Add(closeTimeout))
	}()
	timer := time.NewTimer(closeTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		_ = c.socket.Close() // its reader fails, and amqp091 shuts the connection down
		<-done
	}
}

// dial connects l to the first node, from start on in turn, that takes
// it: a node that is down or refuses is passed over for the next. It
// returns the node's index; when none took it, every node's failure,
// joined (errors.Is finds ErrAccessRefused in them).
func (b *Backend) dial(ctx context.Context, l *link, start int) (*connection, int, error) {
	errs := make([]error, 0, len(b.nodes))
	for k := range b.nodes {
		i := (start + k) % len(b.nodes)
		conn, err := b.dialNode(ctx, l, b.nodes[i])
		if err == nil {
			return conn, i, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 1 {
		return nil, start, errs[0]
	}
	return nil, start, fmt.Errorf("rabbitmq: no node took the connection: %w", errors.Join(errs...))
}

// dialNode opens l's connection to n, or says clearly why it could not.
// ctx bounds the whole of it, the AMQP handshake included, which amqp091
// runs without one.
func (b *Backend) dialNode(ctx context.Context, l *link, n node) (*connection, error) {
	var socket *countedConn
	var writer *socketWriter // over socket; amqp091 closes it with the connection
	var unwatch func() bool  // ends the handshake's watch of ctx
	cfg := amqp.Config{
		Heartbeat:       b.opts.Heartbeat,
		Locale:          "en_US",
		TLSClientConfig: b.opts.TLS,
		ChannelMax:      l.channelMax, // the broker's, when lower
		Properties:      amqp.Table{"connection_name": l.name, "product": "queuey"},
		Dial: func(network, addr string) (net.Conn, error) {
			timeout := 30 * b.opts.Heartbeat / 10
			d := net.Dialer{Timeout: timeout}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Heartbeats start only after the handshake: until then a peer
			// that accepts and never speaks would hold the dial for good.
			// amqp091 clears the deadline once the connection is open.
			if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
				conn.Close()
				return nil, err
			}
			// ctx's end fails the handshake's reads and writes at once.
			unwatch = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
			socket = &countedConn{Conn: conn}
			writer = newSocketWriter(socket)
			return writer, nil
		},
	}
	conn, err := amqp.DialConfig(n.url, cfg)
	if unwatch != nil && !unwatch() && err == nil {
		// ctx ended as the handshake did: the socket's deadline may be
		// past, the connection unusable.
		_ = conn.Close()
		err = ctx.Err()
	}
	if err == nil {
		return &connection{Connection: conn, socket: socket}, nil
	}
	if writer != nil {
		_ = writer.Close() // a failed handshake may leave it open
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("rabbitmq: connect to %s: %w", n.safeURL, context.Cause(ctx))
	}
	return nil, n.dialFailure(err)
}

// dialFailure says why a dial failed, for a ctx that has not ended, without
// the password. What amqp091 reports is kept under it, for errors.As.
func (n node) dialFailure(err error) error {
	var amqpErr *amqp.Error
	switch {
	case errors.Is(err, amqp.ErrSASL):
		return fmt.Errorf("%w: %s offers no authentication mechanism in common with this client", ErrAccessRefused, n.safeURL)
	case errors.Is(err, amqp.ErrVhost) || errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotAllowed:
		return n.vhostRefused(err)
	case errors.Is(err, amqp.ErrCredentials) || errors.As(err, &amqpErr) && amqpErr.Code == amqp.AccessRefused:
		return fmt.Errorf("%w: %s refused the user name or password", ErrAccessRefused, n.safeURL)
	case errors.As(err, &amqpErr) && !amqpErr.Server && (amqpErr.Code == amqp.FrameError || amqpErr.Code == amqp.SyntaxError):
		return &dialError{err: err, text: fmt.Sprintf("rabbitmq: the peer at %s did not speak AMQP 0-9-1 (%s): "+
			"is that a RabbitMQ AMQP port (5672, or 5671 for amqps://)?", n.safeURL, scrub(errors.New(innermost(amqpErr.Reason)), n.url))}
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("rabbitmq: cannot reach %s (is the broker running? start one with "+
			"`rabbitmq-server -detached`, or point QUEUEY_AMQP_URL elsewhere): %v", n.safeURL, scrub(err, n.url))
	}
	return fmt.Errorf("rabbitmq: connect to %s: %v", n.safeURL, scrub(err, n.url))
}

// vhostRefused reports the broker's refusal of the URL's virtual host
// (530 NOT_ALLOWED on connection.open, or amqp091's ErrVhost when the
// broker closed the socket without a word): the vhost does not exist, the
// user may not use it, or one of its connection limits is reached, as the
// broker's reason says. It is not ErrAccessRefused, which is for the
// credentials.
func (n node) vhostRefused(err error) error {
	var vhost, user string
	if uri, perr := amqp.ParseURI(n.url); perr == nil {
		vhost, user = uri.Vhost, uri.Username
	}
	reason := err.Error()
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) {
		reason = amqpErr.Reason
	}
	return &dialError{err: err, text: fmt.Sprintf("rabbitmq: %s: the virtual host %q does not exist or is not accessible to user %q (the broker said: %s)",
		n.safeURL, vhost, user, scrub(errors.New(reason), n.url))}
}

// dialError is a failed dial said in words of its own, with the error from
// below kept for errors.As (an *amqp.Error) but not repeated in the text.
type dialError struct {
	text string
	err  error
}

// Error is the dial's failure in words of its own.
func (e *dialError) Error() string { return e.text }

// Unwrap is the error from below.
func (e *dialError) Unwrap() error { return e.err }

// innermost takes the reason out of amqp091's "Exception (501) Reason:
// ..." texts, which it nests when it wraps one error in another.
func innermost(reason string) string {
	for strings.HasPrefix(reason, "Exception (") {
		_, quoted, ok := strings.Cut(reason, "Reason: ")
		if !ok {
			break
		}
		unquoted, err := strconv.Unquote(quoted)
		if err != nil {
			break
		}
		reason = unquoted
	}
	return reason
}

// scrub makes sure an error from below carries no credentials.
func scrub(err error, rawURL string) string {
	s := err.Error()
	if rawURL != "" && containsSecret(s, rawURL) {
		return "(error text withheld: it quoted the URL)"
	}
	return s
}

// session is one live connection with its channels.
type session struct {
	conn   *amqp.Connection
	socket *countedConn // under conn; closed to give the connection up (guard)
	log    *slog.Logger
	pubs   []atomic.Pointer[publisher] // the pool: publishes, batches, broadcasts
	next   atomic.Uint64
	// holds is the confirm channel of holds and dead letters (viaHolds).
	holds atomic.Pointer[publisher]

	// Semaphores rather than mutexes, so that a caller waits for its turn
	// no longer than its ctx allows, whoever holds it.
	opening        chan struct{} // one publishing channel (pool or holds) opened at a time
	declSem        chan struct{} // one declare at a time on declCh, which it guards
	declCh         *amqp.Channel
	delaysDeclared atomic.Bool // the delay levels, on this connection (quorum.go)
	// consumerSlots holds a token per consumer channel open: as many as
	// the connection's channel_max, less those kept for the backend's
	// own (consumelinks.go).
	consumerSlots chan struct{}
	closeMu       sync.Mutex
	backendClosed bool // closed because the backend is, not because the connection was lost

	acksMu sync.Mutex
	ackers map[*acker]struct{} // of the consume channels open (acker.go)

	blockMu   sync.Mutex
	blockedBy string        // the broker's reason while it blocks publishes
	unblocked chan struct{} // closed when the block lifts
	gone      chan struct{} // closed when the connection has shut down: no block will lift

	asideMu    sync.Mutex
	aside      sync.WaitGroup // private publishers' channels being closed
	asideEnded bool           // the connection is closed: no more closes in the background
}

// closeAside closes a private publisher's channel without waiting for the
// broker's answer: a connection the broker blocks (a resource alarm) would
// hold it back past the caller's ctx. Once the connection is closed, a
// close returns at once and is done in place.
func (s *session) closeAside(p *publisher) {
	closeIt := func() {
		p.shutdown()
		// The channel's notifications close when it does (amqp091 closes
		// them unless its channel Recovery is on, which is not used here).
		<-p.dead
	}
	s.asideMu.Lock()
	defer s.asideMu.Unlock()
	if s.asideEnded {
		closeIt()
		return
	}
	s.aside.Go(closeIt)
}

// waitAside waits for the channels closing in the background, once the
// connection is closed (every close then returns).
func (s *session) waitAside() {
	s.asideMu.Lock()
	s.asideEnded = true
	s.asideMu.Unlock()
	s.aside.Wait()
}

func newSession(conn *connection, pubs int, log *slog.Logger) *session {
	var channelMax uint16 // as the handshake agreed it
	if conn.Connection != nil {
		channelMax = conn.Config.ChannelMax
	}
	return &session{
		conn: conn.Connection, socket: conn.socket, log: log,
		pubs:    make([]atomic.Pointer[publisher], pubs),
		opening: make(chan struct{}, 1), declSem: make(chan struct{}, 1),
		consumerSlots: make(chan struct{}, consumerChannels(channelMax, 0)),
		unblocked:     closedChan(), gone: make(chan struct{}),
		ackers: map[*acker]struct{}{},
	}
}

// acquire takes sem, or gives up when ctx ends first.
func acquire(ctx context.Context, sem chan struct{}, what string) error {
	if err := ctx.Err(); err != nil { // select would pick a free sem at random
		return fmt.Errorf("rabbitmq: waiting to %s: %w", what, err)
	}
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: waiting to %s: %w", what, ctx.Err())
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// setBlocked follows connection.blocked and connection.unblocked.
func (s *session) setBlocked(b amqp.Blocking) {
	s.blockMu.Lock()
	defer s.blockMu.Unlock()
	switch {
	case b.Active && s.blockedBy == "":
		s.blockedBy = b.Reason
		s.unblocked = make(chan struct{})
	case !b.Active && s.blockedBy != "":
		s.blockedBy = ""
		close(s.unblocked)
	}
}

// waitUnblocked returns at once unless the broker blocks publishes (a memory
// or disk alarm); then it waits for the block to lift, bounded by ctx. A
// publish written to a blocked connection would hang in the socket write,
// which no ctx can interrupt. A connection lost meanwhile ends the wait
// with ErrConnectionLost: its block is never lifted, and a caller with no
// deadline (the topology's redeclaration after a reconnect) would
// otherwise wait on a dead connection forever, and the backend with it.
func (s *session) waitUnblocked(ctx context.Context) error {
	s.blockMu.Lock()
	reason, unblocked := s.blockedBy, s.unblocked
	s.blockMu.Unlock()
	select {
	case <-unblocked:
		return nil
	default:
	}
	select {
	case <-unblocked:
		return nil
	case <-s.gone:
		return fmt.Errorf("%w while the broker blocked it (%s)", ErrConnectionLost, reason)
	case <-ctx.Done():
		return fmt.Errorf("%w (%s): %w", ErrBlocked, reason, ctx.Err())
	}
}

// closeTimeout bounds the wait for the broker's answer when a connection
// is closed.
const closeTimeout = 2 * time.Second

// stuckGrace is how long an amqp091 call that takes no ctx may go on after
// its caller's ctx has ended while its connection's socket takes no byte,
// before guard gives the connection up.
const stuckGrace = 2 * time.Second

// answerCap bounds how long after its caller's ctx has ended a request
// waits for its answer while the connection moves: a broker that reads
// but does not answer. A variable only so that a test need not wait 30 s.
var answerCap = 30 * time.Second

// callKind says how long guard lets a call go on after its ctx ended.
type callKind int

const (
	// callWrite is a write (a publish): as long as the socket takes
	// bytes, so that a big message on a slow network is not cut off
	// while it moves.
	callWrite callKind = iota
	// callRequest is a request and its answer (a channel open, a
	// declare): as long as the socket takes bytes (the request may wait
	// behind a big publish), but answerCap at most.
	callRequest
)

// quoted is a name as guard gives it: quoted, or nothing if empty.
type quoted string

func (q quoted) String() string {
	if q == "" {
		return ""
	}
	return strconv.Quote(string(q))
}

// guard runs call, an amqp091 call that takes no ctx: a write (a publish)
// or a request with its answer (a channel open, a declare). A broker that
// stops reading a connection while keeping it alive (it blocked it during
// a resource alarm that began after waitUnblocked, or it hangs) would hold
// such a call, and its caller, for as long as that lasts, whatever ctx
// says. If, after ctx ends, call goes on through stuckGrace in which the
// socket takes no byte (or, for a request, past answerCap), the connection
// is given up: its socket is closed, which ends call with an error and
// every other call on the connection with ErrConnectionLost (publishes in
// flight go again on the next connection, which the backend dials), and
// guard reports ctx's error. A request abandoned halfway cannot be taken
// back on its channel anyway: amqp091 would pair its late answer with the
// channel's next request. op and name say what call does, for the error
// and the log ("publish to" and the queue); name is formatted only then.
func (s *session) guard(ctx context.Context, kind callKind, op string, name fmt.Stringer, call func() error) error {
	if ctx.Done() == nil {
		return call()
	}
	const (
		running int32 = iota
		finished
		gaveUp
	)
	var state atomic.Int32   // running, then whichever of the two sides gets there first
	var waited time.Duration // how long after ctx ended it gave up; set before gaveUp
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		ended := time.Now()
		timer := time.NewTimer(stuckGrace)
		defer timer.Stop()
		written := s.written()
		for {
			select {
			case <-done:
				return
			case <-timer.C:
			}
			capped := kind == callRequest && time.Since(ended) >= answerCap
			if w := s.written(); w != written && !capped {
				written = w // the connection moves: another stuckGrace
				timer.Reset(stuckGrace)
				continue
			}
			waited = time.Since(ended).Round(time.Millisecond)
			if state.CompareAndSwap(running, gaveUp) {
				s.log.Warn("rabbitmq: giving the connection up: a call still waits on the broker after its ctx ended",
					"call", op, "name", name.String(), "waited_after_ctx", waited)
				if s.socket != nil {
					_ = s.socket.Close()
				}
			}
			return
		}
	})
	defer func() { // a panic in call too: the watch must not outlive it
		close(done)
		stop()
	}()
	err := call()
	if !state.CompareAndSwap(running, finished) {
		if n := name.String(); n != "" {
			op += " " + n
		}
		return fmt.Errorf("rabbitmq: %s: the broker neither took it nor answered %v after the caller's ctx ended; the connection is given up and dialed again: %w",
			op, waited, ctx.Err())
	}
	return err
}

// written is the count of bytes the socket took (0 without one).
func (s *session) written() int64 {
	if s.socket == nil {
		return 0
	}
	return s.socket.written.Load()
}

// close records why the session ends before its connection is closed
// (which shuts its channels down): backendClosed says the backend is
// closing (else the connection was lost), which is what its consumers
// then report.
func (s *session) close(backendClosed bool) {
	s.closeMu.Lock()
	s.backendClosed = backendClosed
	s.closeMu.Unlock()
}

// via says which confirm channel a publish goes on.
type via int

const (
	// viaPool is the next channel of the pool (Options.PublishChannels),
	// which spreads many callers' publishes over its channels.
	viaPool via = iota
	// viaHolds is the one channel of holds and dead letters, apart from
	// the pool: a worker's settlements keep many in flight, which one
	// channel confirms in fewer frames and less broker work than four
	// (BenchmarkHold), and the work-queue check of a hold that finds its
	// queue gone closes this channel, not one of a producer's publishes.
	viaHolds
	// viaAlone is a channel opened for the publish and closed after it,
	// so that a refusal on it is the publish's own (publishAlone).
	viaAlone
)

// slot is where the channel of v is kept: the next of the pool's, or the
// holds'.
func (s *session) slot(v via) *atomic.Pointer[publisher] {
	if v == viaHolds {
		return &s.holds
	}
	return &s.pubs[int(s.next.Add(1)%uint64(len(s.pubs)))]
}

// publisher returns the live confirm channel of slot, opening it if it is
// new or was closed by a channel error.
func (s *session) publisher(ctx context.Context, slot *atomic.Pointer[publisher]) (*publisher, error) {
	if p := slot.Load(); p != nil && !p.isDead() {
		return p, nil
	}
	if err := acquire(ctx, s.opening, "open a publishing channel"); err != nil {
		return nil, err
	}
	defer func() { <-s.opening }()
	if p := slot.Load(); p != nil && !p.isDead() {
		return p, nil // opened while this caller waited
	}
	p, err := s.openPublisher(ctx)
	if err != nil {
		return nil, err
	}
	slot.Store(p)
	return p, nil
}

// openPublisher opens a confirm channel (guard).
func (s *session) openPublisher(ctx context.Context) (p *publisher, err error) {
	err = s.guard(ctx, callRequest, "open a publishing channel", quoted(""), func() error {
		p, err = newPublisher(s)
		return err
	})
	if err != nil {
		return nil, lostOr(err)
	}
	return p, nil
}

// publish publishes on the channel v says and waits for its confirm.
func (s *session) publish(ctx context.Context, v via, to route, pub amqp.Publishing) error {
	if v == viaAlone {
		return s.publishAlone(ctx, to, pub)
	}
	if err := s.waitUnblocked(ctx); err != nil {
		return err
	}
	p, err := s.publisher(ctx, s.slot(v))
	if err != nil {
		return err
	}
	err = s.blockedOr(ctx, p.publish(ctx, to, pub))
	if errors.Is(err, errSharedRefusal) {
		// The channel is shared: the refused publish may have been
		// another in flight on it. A refusal on a channel of its own is
		// this message's.
		return s.publishAlone(ctx, to, pub)
	}
	return err
}

// publishAlone publishes on a confirm channel opened for this publish and
// closed after it, so that a refusal is this message's own. If the broker
// had taken the message before the refusal that made this call, it gets
// it twice, as it does any publish whose confirm was lost.
func (s *session) publishAlone(ctx context.Context, to route, pub amqp.Publishing) error {
	alone := privatePublisher{s: s}
	defer alone.close()
	return alone.publish(ctx, to, pub)
}

// privatePublisher publishes one message at a time, waiting for each
// confirm, on a confirm channel kept out of the pool: a refusal on it is
// the refused message's own. A publish that fails leaves the channel
// closed or in doubt, so the next one opens another.
type privatePublisher struct {
	s *session
	p *publisher // nil until the first publish, and after a failed one
}

func (a *privatePublisher) publish(ctx context.Context, to route, pub amqp.Publishing) error {
	if err := a.s.waitUnblocked(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if a.p == nil {
		p, err := a.s.openPublisher(ctx)
		if err != nil {
			return err
		}
		a.p = p
	}
	err := a.s.blockedOr(ctx, a.p.publish(ctx, to, pub))
	if err != nil {
		a.close()
	}
	return err
}

// close closes the channel, if one is open, without waiting (closeAside).
func (a *privatePublisher) close() {
	if a.p != nil {
		a.s.closeAside(a.p)
		a.p = nil
	}
}

// blockedOr says ErrBlocked for a publish whose ctx ended while the broker
// blocked the connection: it blocks a connection when it first publishes
// during an alarm, and the confirm of that publish is what waited.
func (s *session) blockedOr(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	s.blockMu.Lock()
	reason := s.blockedBy
	s.blockMu.Unlock()
	if reason != "" {
		return fmt.Errorf("%w (%s): %w", ErrBlocked, reason, ctx.Err())
	}
	return err
}

// batchWindow bounds the confirms one PublishBatch keeps in flight.
const batchWindow = 256

// publishBatch publishes msgs[i] to routes[i] for each i of todo on one channel, with up
// to batchWindow confirms in flight, and tells settled each outcome. It
// returns the indexes whose publish was lost with the connection, to
// publish again on the next one; those are not settled yet.
//
// A publish the broker refuses closes the channel, and every publish in
// flight on it fails with ErrRefused, though only one was refused: those
// (errSharedRefusal) are published again one at a time on a channel out of
// the pool (a privatePublisher), so that only the refused one fails (the
// others the broker had taken before the refusal arrive twice).
func (s *session) publishBatch(ctx context.Context, msgs []broker.Message, routes []route, todo []int, settled func(i int, err error)) (lost []int) {
	p, err := s.publisher(ctx, s.slot(viaPool))
	if err != nil {
		if errors.Is(err, ErrConnectionLost) {
			return todo
		}
		for _, i := range todo {
			settled(i, err)
		}
		return nil
	}
	type inFlight struct {
		i         int
		confirmed <-chan error
	}
	window := make([]inFlight, 0, batchWindow) // oldest first
	var refused []int                          // in flight when the broker refused one of them
	settle := func(f inFlight) {
		err := s.blockedOr(ctx, p.wait(ctx, routes[f.i], f.confirmed))
		switch {
		case errors.Is(err, ErrConnectionLost) && ctx.Err() == nil:
			lost = append(lost, f.i)
		case errors.Is(err, errSharedRefusal):
			refused = append(refused, f.i)
		default:
			settled(f.i, err)
		}
	}
	for k, i := range todo {
		if len(window) == batchWindow {
			settle(window[0])
			window = window[1:]
		}
		err := s.waitUnblocked(ctx)
		if err == nil {
			err = ctx.Err()
		}
		if errors.Is(err, ErrConnectionLost) && ctx.Err() == nil { // lost while blocked
			lost = append(lost, todo[k:]...)
			break
		}
		if err != nil {
			for _, j := range todo[k:] {
				settled(j, err)
			}
			break
		}
		confirmed, err := p.send(ctx, routes[i], publishing(msgs[i], nil))
		if errors.Is(err, ErrConnectionLost) {
			lost = append(lost, todo[k:]...)
			break
		}
		if err != nil {
			settled(i, err)
			continue
		}
		window = append(window, inFlight{i, confirmed})
	}
	for _, f := range window {
		settle(f)
	}
	alone := privatePublisher{s: s}
	defer alone.close()
	for _, i := range refused {
		err := alone.publish(ctx, routes[i], publishing(msgs[i], nil))
		if errors.Is(err, ErrConnectionLost) && ctx.Err() == nil {
			lost = append(lost, i)
			continue
		}
		settled(i, err)
	}
	return lost
}

// declare declares one queue on the declaration channel (onDeclCh).
func (s *session) declare(ctx context.Context, name string, durable bool, args amqp.Table) error {
	return s.onDeclCh(ctx, "declare", name, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(name, durable, false, false, false, args)
		return err
	})
}

// onDeclCh runs call (a declaration: a queue, an exchange, a binding of
// name) on the declaration channel, kept apart from the publishing
// channels so that a refused declare (which closes its channel) cannot
// cut off publishes in flight. While the broker blocks the connection it
// is not read, so a declaration waits for the block to lift, bounded by
// ctx, before it is sent.
func (s *session) onDeclCh(ctx context.Context, what, name string, call func(*amqp.Channel) error) error {
	err := s.onDeclChRaw(ctx, what, name, call)
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed {
		return inequivalent(name, amqpErr.Reason)
	}
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound && errors.Is(notFound(amqpErr), broker.ErrUnavailable) {
		return fmt.Errorf("%w: %s %q: %s", broker.ErrUnavailable, what, name, amqpErr.Reason)
	}
	if err != nil {
		return lostOr(err)
	}
	return nil
}

// onDeclChRaw is onDeclCh without its reading of the broker's refusals:
// call's error as amqp091 gives it. A refusal closes the channel; the
// next call opens another.
func (s *session) onDeclChRaw(ctx context.Context, what, name string, call func(*amqp.Channel) error) error {
	if err := s.waitUnblocked(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := acquire(ctx, s.declSem, what+" "+strconv.Quote(name)); err != nil {
		return err
	}
	defer func() { <-s.declSem }()
	return s.guard(ctx, callRequest, what, quoted(name), func() error {
		if s.declCh == nil || s.declCh.IsClosed() {
			ch, err := s.conn.Channel()
			if err != nil {
				return err
			}
			s.declCh = ch
		}
		return call(s.declCh)
	})
}

// inequivalent explains a declaration of queue name that the broker
// refused with PRECONDITION_FAILED, reason being its text: "inequivalent
// arg 'durable' for queue 'q' in vhost '/': received 'false' but current
// is 'true'". The hint is for the argument named there.
func inequivalent(name, reason string) error {
	var arg string
	if _, rest, ok := strings.Cut(reason, "inequivalent arg '"); ok {
		arg, _, _ = strings.Cut(rest, "'")
	}
	differs := "other arguments"
	if arg != "" {
		differs = "another '" + arg + "'"
	}
	var hint string
	switch arg {
	case "durable":
		hint = "set the Queue's Transient to match: false for a durable queue, true for a transient one " +
			"(a dead-letter queue is durable whatever Transient says)"
	case "x-max-priority":
		hint = "set the Queue's MaxPriority to match, or NoPriorities for a queue without priorities"
	case "x-message-ttl":
		hint = "set the Queue's MessageTTL to match, or to 0 for a queue without one"
	case "x-queue-type":
		hint = "set the Queue's (or the QueueSet's) Type to match: Classic or Quorum; a queue cannot change type, so moving one means draining it into a new one"
	default:
		hint = "it was declared otherwise than queuey declares it, by another program or by hand"
	}
	return &broker.InequivalentError{Queue: name, Arg: arg, Err: fmt.Errorf("%w: queue %q exists with %s (%s); drain and delete it, or declare it as it is: %s",
		broker.ErrPreconditionFailed, name, differs, reason, hint)}
}

// depth passive-declares queue on the declaration channel (onDeclCh),
// which a missing queue closes and the next call opens again: an
// inspection costs one round trip, and the broker no channel process per
// call. Like declare, it waits for a block to lift first.
func (s *session) depth(ctx context.Context, queue string) (int, error) {
	q, err := s.inspect(ctx, queue)
	return q.Messages, err
}

// inspect is what a passive declare of queue says (depth).
func (s *session) inspect(ctx context.Context, queue string) (amqp.Queue, error) {
	var q amqp.Queue
	err := s.onDeclChRaw(ctx, "depth of", queue, func(ch *amqp.Channel) (err error) {
		q, err = ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		return err
	})
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return q, fmt.Errorf("%w: depth of %q", notFound(amqpErr), queue)
	}
	if err != nil {
		return q, lostOr(err)
	}
	return q, nil
}

// declareAll declares specs in turn. A queue whose node is down
// (broker.ErrUnavailable) does not keep the others from being declared:
// its error is joined to the rest.
func (s *session) declareAll(ctx context.Context, specs []broker.QueueSpec) error {
	var away []error
	for _, spec := range specs {
		err := s.declareSpec(ctx, spec)
		switch {
		case errors.Is(err, broker.ErrUnavailable):
			away = append(away, err)
		case err != nil:
			return err
		}
	}
	return errors.Join(away...)
}

// lostOr reports a closed connection or channel as ErrConnectionLost and
// anything else as it is.
func lostOr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err // guard gave the connection up: the caller's ctx ended first
	}
	var amqpErr *amqp.Error
	var opErr *net.OpError
	// Every channel id of the connection taken (the broker's channel_max
	// reached) is amqp091's own error, on a live connection: retrying on it
	// at once would spin.
	if errors.Is(err, amqp.ErrChannelMax) {
		return fmt.Errorf("rabbitmq: the connection has no channel left (the broker's channel_max): %w", err)
	}
	// A soft (channel) error such as NOT_FOUND is an answer; a closed
	// channel, a hard (connection) error, or a socket that failed under a
	// write (the connection reset) means the connection is gone.
	if errors.Is(err, amqp.ErrClosed) || (errors.As(err, &amqpErr) && !amqpErr.Recover) ||
		errors.As(err, &opErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	return fmt.Errorf("rabbitmq: %w", err)
}

func table(args map[string]any) amqp.Table {
	if len(args) == 0 {
		return nil
	}
	return amqp.Table(args)
}
