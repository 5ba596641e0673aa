package rabbitmq

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Refusal is refusal: what a channel error says of the publishes in
// flight on the channel it closed.
func Refusal(e *amqp.Error) error { return refusal(e) }

// ErrNoExchange is errNoExchange.
var ErrNoExchange = errNoExchange

// SetAnswerCap sets answerCap for a test, before its backend is dialed,
// and restores it when the test ends (after its backend is closed).
func SetAnswerCap(t interface{ Cleanup(func()) }, d time.Duration) {
	old := answerCap
	answerCap = d
	t.Cleanup(func() { answerCap = old })
}

// Written is how many bytes b's publishing connection has written to its
// socket (0 before it is connected).
func Written(b *Backend) int64 {
	b.mu.Lock()
	s := b.pub.conn
	b.mu.Unlock()
	if s == nil {
		return 0
	}
	return s.written()
}

// SetConsumeChannelMax has o's consume connections ask the broker for a
// channel_max of n, below its own: so many consumers (less the backend's
// own channel) on each, which spreads a few hundred queues over several
// connections without changing the broker's settings.
func SetConsumeChannelMax(o *Options, n uint16) { o.consumeChannelMax = n }

// PoolChannelsClosed counts the channels of b's publishing pool that a
// channel error has closed (the broker's answer to a publish on them).
func PoolChannelsClosed(b *Backend) int {
	b.mu.Lock()
	s := b.pub.conn
	b.mu.Unlock()
	closed := 0
	for i := range s.pubs {
		p := s.pubs[i].Load()
		if p == nil {
			continue
		}
		p.mu.Lock() // failAll holds it until it has recorded why
		if p.failed != nil {
			closed++
		}
		p.mu.Unlock()
	}
	return closed
}

// RawChannel is a channel of a plain amqp091 connection to url, as another
// program would have; the connection is closed when the test ends.
func RawChannel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}
