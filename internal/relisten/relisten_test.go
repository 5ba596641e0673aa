package relisten_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/internal/relisten"
)

// refusing is a broadcaster whose Listen fails while down is set.
type refusing struct {
	*memory.Backend
	down bool
}

func (r *refusing) Listen(ctx context.Context, topic string) (broker.Listener, error) {
	if r.down {
		return nil, errors.New("connection lost")
	}
	return r.Backend.Listen(ctx, topic)
}

// The backoff doubles at each failure in a row from 1 s up to 30 s, and
// starts again from 1 s once a listen succeeds; Retry fires after it.
func TestTheBackoffDoublesUpToItsCapAndStartsAgain(t *testing.T) {
	mock := clock.NewMock()
	b := &refusing{Backend: memory.New(nil), down: true}
	defer b.Close()
	l := relisten.New(b, "t", mock, time.Second)
	defer l.Close()
	var waits []time.Duration
	for range 7 {
		if err := l.Listen(t.Context()); err == nil {
			t.Fatal("listened while down")
		}
		waits = append(waits, l.Wait())
		select {
		case <-l.Retry():
			t.Fatal("Retry fired before the backoff")
		default:
		}
		mock.Add(l.Wait())
		<-l.Retry()
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i := range want {
		if waits[i] != want[i]*time.Second {
			t.Fatalf("backoffs %v, want %v seconds", waits, want)
		}
	}
	b.down = false
	if err := l.Listen(t.Context()); err != nil || l.Retry() != nil || l.Messages() == nil {
		t.Fatalf("listen once up: %v", err)
	}
	_ = b.Broadcast(t.Context(), "t", []byte("x"))
	if m := <-l.Messages(); string(m) != "x" {
		t.Errorf("heard %q", m)
	}
	b.Backend.Close() // the listener ends with the backend
	for range l.Messages() {
	}
	if err := l.Ended(); !errors.Is(err, broker.ErrClosed) || l.Wait() != time.Second {
		t.Errorf("Ended: %v, backoff %v; want ErrClosed, 1 s again", err, l.Wait())
	}
}
