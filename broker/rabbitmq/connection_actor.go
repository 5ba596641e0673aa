package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/actor"
	"github.com/queuey-go/queuey/broker"
)

// connectionActor owns one of the backend's connections (a link). Each run
// of it dials, publishes the session to the backend, and then is an actor
// of package actor: what amqp091 tells of the connection (the broker
// blocks or unblocks it; it is lost) reaches its inbox as messages, taken
// one at a time. The run returns when the connection is lost, so that its
// supervisor dials again after a backoff, or nil when the backend closes.
type connectionActor struct {
	b       *Backend
	link    *link
	first   *connection // from Dial, used by the first run
	node    int         // the node connected to last (Backend.nodes)
	dialed  bool        // a connection was up before: the next is a reconnect
	lastErr string
}

// connMsg is a message to a connection actor's inbox, about its
// connection.
type connMsg interface{ connMsg() }

// blockNotice: the broker blocked the connection (a resource alarm) or
// lifted the block.
type blockNotice struct{ amqp.Blocking }

// connectionClosed: the connection has shut down; err is the broker's or
// the socket's reason, nil when it was closed from this side.
type connectionClosed struct{ err *amqp.Error }

func (blockNotice) connMsg()      {}
func (connectionClosed) connMsg() {}

// connInbox is the room in a connection actor's inbox: amqp091 sends at
// most one close and a block notice per alarm's start and end, which the
// actor takes in at once.
const connInbox = 8

// connRun is one run of a connection actor: one connection and the
// actor that follows it.
type connRun struct {
	conn  *connection
	s     *session
	log   *slog.Logger
	inbox *actor.Actor[connMsg]
	why   error          // why the connection ended; the actor's
	feeds sync.WaitGroup // the goroutines that hand amqp091's notices to the inbox
}

// Run dials (or takes the first connection), publishes the session and
// follows the connection until it is lost or ctx ends.
func (a *connectionActor) Run(ctx context.Context) error {
	log := a.b.opts.Logger.With("connection", a.link.role)
	conn, err := a.connect(ctx, log)
	if err != nil {
		return err
	}
	r := &connRun{conn: conn, s: newSession(conn, a.b.opts.PublishChannels, log), log: log}
	r.inbox = actor.New(a.link.role+" connection", connInbox, r.receive)
	r.feed(conn)
	specs, ok := a.b.publishSession(a.link, r.s)
	if !ok { // the backend closed meanwhile
		r.end()
		return nil
	}
	redeclared := a.redeclare(ctx, r.s, specs)
	if err := r.inbox.Run(ctx); err != nil {
		r.why = err // a crash of receive: the connection is given up as lost
	}
	if r.why == nil {
		r.why = ctx.Err()
	}
	a.b.unpublishSession(a.link)
	r.s.close(ctx.Err() != nil) // the actor's ctx ends when the backend closes
	r.end()
	<-redeclared
	if ctx.Err() != nil {
		return nil
	}
	log.Warn("rabbitmq connection lost; reconnecting", "error", r.why)
	return r.why
}

// connect returns the first connection from Dial, or dials one: after a
// connection was lost, another node first (the one lost may be down).
func (a *connectionActor) connect(ctx context.Context, log *slog.Logger) (*connection, error) {
	conn := a.first
	a.first = nil
	if conn == nil {
		start := a.node
		if a.dialed {
			start++
		}
		var err error
		if conn, a.node, err = a.b.dial(ctx, a.link, start); err != nil {
			if err.Error() != a.lastErr { // once per distinct cause: no log storm
				log.Warn("rabbitmq connect failed; retrying with backoff", "error", err)
				a.lastErr = err.Error()
			}
			return nil, err
		}
		if a.dialed {
			log.Info("rabbitmq reconnected", "url", a.b.nodes[a.node].safeURL)
		}
	}
	a.dialed, a.lastErr = true, ""
	return conn, nil
}

// feed hands amqp091's notices of conn to the inbox, each on a goroutine
// of its own that ends when amqp091 closes its channel, as it does when
// the connection shuts down (end waits for them). They are asked for
// before anything is sent, so that the broker's block notices are
// followed from the first moment, the topology's redeclaration included:
// what is sent during an alarm waits for the block to lift instead of
// going into a socket the broker does not read. A notice that comes once
// the actor has stopped is dropped: its connection is over. The block
// feed closes the session's gone when it ends, which ends every wait for
// a block to lift.
func (r *connRun) feed(conn *connection) {
	lost := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	r.feeds.Go(func() {
		e := <-lost // its reason, or nil: amqp091 closes lost after one at most
		_ = r.inbox.Send(context.Background(), connectionClosed{err: e})
	})
	r.feeds.Go(func() {
		defer close(r.s.gone)
		for bl := range blocked {
			_ = r.inbox.Send(context.Background(), blockNotice{bl})
		}
	})
}

// receive takes one notice about the connection.
func (r *connRun) receive(_ context.Context, m connMsg) error {
	switch m := m.(type) {
	case blockNotice:
		r.s.setBlocked(m.Blocking)
		if m.Active {
			r.log.Warn("rabbitmq blocked the connection (a resource alarm); publishes wait", "reason", m.Reason)
		} else {
			r.log.Info("rabbitmq unblocked the connection")
		}
	case connectionClosed:
		r.why = ErrConnectionLost
		if m.err != nil {
			r.why = fmt.Errorf("%w: %s", ErrConnectionLost, m.err.Reason)
		}
		r.inbox.Stop() // the notices queued before are still taken, then Run returns
	}
	return nil
}

// end closes the connection, if it is not yet, and waits for what it
// left: the private publishers' closes and the notice feeds. The inbox is
// stopped first, so that a feed never waits for room in it.
func (r *connRun) end() {
	r.inbox.Stop()
	if !r.conn.IsClosed() {
		r.s.flushAcks() // what was acked goes before the close
		// A connection the broker blocks (a resource alarm) is not read:
		// the broker's answer to the close would come when the alarm
		// clears. Closing the connection shuts its channels down too.
		r.conn.close()
	}
	r.s.waitAside()
	r.feeds.Wait()
}

// redeclare declares specs, the backend's topology, again on a new
// publishing connection, on a goroutine of its own (the returned channel
// closes when it is done) while the actor follows the connection.
func (a *connectionActor) redeclare(ctx context.Context, s *session, specs []broker.QueueSpec) <-chan struct{} {
	done := make(chan struct{})
	if len(specs) == 0 {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		err := s.declareAll(ctx, specs)
		switch {
		case errors.Is(err, broker.ErrUnavailable):
			a.b.opts.Logger.Warn("rabbitmq: after a reconnect, queues whose node is down were not declared again; they come back with it", "error", err)
		case err != nil:
			a.b.opts.Logger.Error("rabbitmq: redeclaring the topology after a reconnect failed", "error", err)
		}
	}()
	return done
}

// publishSession makes s l's live session, unless the backend is closed
// (false). On the publishing link it returns the topology to declare
// again: a restarted broker keeps durable queues, but not transient ones.
// (A hold queue it lost is declared again by the next hold into it, which
// finds it gone: broker.ErrNoHold.)
func (b *Backend) publishSession(l *link, s *session) (specs []broker.QueueSpec, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, false
	}
	l.conn = s
	close(l.ready)
	if l == &b.pub {
		for _, spec := range b.declared {
			specs = append(specs, spec)
		}
	}
	return specs, true
}

// unpublishSession takes l's session back: callers wait for the next one
// (ready), unless the backend is closed.
func (b *Backend) unpublishSession(l *link) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l.conn = nil
	if !b.closed {
		l.ready = make(chan struct{})
	}
}
