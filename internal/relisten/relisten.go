// Package relisten keeps a broker.Listener going: one that ends (its
// connection was lost) or cannot start is started again after a backoff.
// The fleet agent's command listener and the console's heartbeat
// listener use it.
package relisten

import (
	"context"
	"errors"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
)

// The backoff between tries: Min after the first failure, doubling at
// each failure in a row up to Max.
const (
	Min = time.Second
	Max = 30 * time.Second
)

// Listener listens to a topic again after a backoff whenever it ends. Its
// owner's goroutine alone uses it: a select on Messages and Retry, then
// Ended or Listen.
type Listener struct {
	bc      broker.Broadcaster
	topic   string
	clock   clock.Clock
	timeout time.Duration
	l       broker.Listener
	retry   <-chan time.Time
	wait    time.Duration
}

// New returns a Listener of topic on bc that does not listen yet (call
// Listen). timeout bounds each Listen, which may wait for a connection.
func New(bc broker.Broadcaster, topic string, c clock.Clock, timeout time.Duration) *Listener {
	return &Listener{bc: bc, topic: topic, clock: c, timeout: max(timeout, time.Second)}
}

// Listen starts listening; on failure it sets Retry and returns why
// (broker.ErrClosed: never again).
func (r *Listener) Listen(ctx context.Context) error {
	r.retry = nil
	lctx, cancel := r.clock.WithTimeout(ctx, r.timeout)
	defer cancel()
	l, err := r.bc.Listen(lctx, r.topic)
	if err != nil {
		r.backoff()
		return err
	}
	r.l, r.wait = l, 0
	return nil
}

// Messages is the listener's, or nil (never ready) while there is none.
func (r *Listener) Messages() <-chan []byte {
	if r.l == nil {
		return nil
	}
	return r.l.Messages()
}

// Retry fires when it is time to Listen again; nil while listening.
func (r *Listener) Retry() <-chan time.Time { return r.retry }

// Wait is the backoff before the next try.
func (r *Listener) Wait() time.Duration { return r.wait }

// Ended takes note that Messages was closed, sets Retry, and returns why
// the listener ended (broker.ErrClosed: never again).
func (r *Listener) Ended() error {
	err := r.l.Err()
	r.l.Close()
	r.l = nil
	if err == nil {
		err = errors.New("the listener was closed")
	}
	r.backoff()
	return err
}

func (r *Listener) backoff() {
	r.wait = min(max(2*r.wait, Min), Max)
	r.retry = r.clock.After(r.wait)
}

// Close closes the listener, if one listens.
func (r *Listener) Close() {
	if r.l != nil {
		r.l.Close()
		r.l = nil
	}
	r.retry = nil
}
