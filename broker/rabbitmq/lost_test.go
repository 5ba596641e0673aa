package rabbitmq

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
)

// lostOr tells a connection that is gone (publish again on the next one)
// from an answer of the broker (report it).
func TestLostOrTellsALostConnectionFromAnAnswer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		lost bool
	}{
		{"closed channel", amqp.ErrClosed, true},
		{"hard error", &amqp.Error{Code: amqp.ConnectionForced, Reason: "shutdown", Server: true, Recover: false}, true},
		{"reset under a write", &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"end of the stream", io.EOF, true},
		{"soft error", &amqp.Error{Code: amqp.NotFound, Reason: "no queue", Server: true, Recover: true}, false},
		{"a deadline", context.DeadlineExceeded, false},
		{"anything else", errors.New("frame too large"), false},
		// amqp091's own, on a live connection: retrying at once on the
		// same connection would spin.
		{"no channel id left", amqp.ErrChannelMax, false},
	} {
		if got := errors.Is(lostOr(c.err), ErrConnectionLost); got != c.lost {
			t.Errorf("%s: lost %t, want %t", c.name, got, c.lost)
		}
	}
}

// A consumer whose deliveries end says the backend is closed only when it
// is: a session closed because its connection was lost (the broker's close
// not yet read) is a lost connection, which a worker recovers from, not
// broker.ErrClosed, which stops it.
func TestAConsumerOfALostConnectionDoesNotSayTheBackendIsClosed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		backendClosed bool
		want          error
	}{
		{false, ErrConnectionLost},
		{true, broker.ErrClosed},
	} {
		s := newSession(&connection{}, 1, slog.New(slog.DiscardHandler))
		s.close(c.backendClosed)
		closed := make(chan *amqp.Error) // nothing read from the broker yet
		if got := (&consumer{queue: "q"}).why(closed, s); !errors.Is(got, c.want) {
			t.Errorf("backend closed %t: got %v, want %v", c.backendClosed, got, c.want)
		}
	}
}
