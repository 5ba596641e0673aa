package rabbitmq

import (
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// channelEnd is how a reader of a channel of its own (a broadcast
// listener, a ledger follower) ends: Close asks its goroutine to stop and
// closes the channel, and the goroutine closes ended once it has set err.
type channelEnd struct {
	ch    *amqp.Channel
	stop  chan struct{} // closed by Close
	ended chan struct{} // closed when the goroutine has set err
	err   error
	once  sync.Once
}

func newChannelEnd(ch *amqp.Channel) channelEnd {
	return channelEnd{ch: ch, stop: make(chan struct{}), ended: make(chan struct{})}
}

// Err implements broker.Listener: why the reader ended, once it has.
func (e *channelEnd) Err() error {
	select {
	case <-e.ended:
		return e.err
	default:
		return nil
	}
}

// Close implements broker.Listener: it closes the reader's channel, and
// with it its consumers, waiting closeTimeout at most for the broker's
// answer (a broker that blocks the connection does not read it; the close
// then ends in the background), then for the reader's goroutine.
func (e *channelEnd) Close() {
	e.once.Do(func() {
		close(e.stop)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = e.ch.Close()
		}()
		timer := time.NewTimer(closeTimeout)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
		}
		<-e.ended
	})
}
