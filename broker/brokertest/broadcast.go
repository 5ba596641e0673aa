package brokertest

import (
	"fmt"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// broadcaster is the backend as a broker.Broadcaster, or skips the test.
func (e *env) broadcaster() broker.Broadcaster {
	e.t.Helper()
	bc, ok := e.b.(broker.Broadcaster)
	if !ok {
		e.t.Skip("the backend is not a broker.Broadcaster")
	}
	return bc
}

// listen starts a listener of topic, closed when the test ends.
func (e *env) listen(topic string) broker.Listener {
	e.t.Helper()
	l, err := e.broadcaster().Listen(e.t.Context(), topic)
	if err != nil {
		e.t.Fatalf("listen to %q: %v", topic, err)
	}
	e.t.Cleanup(l.Close)
	return l
}

func (e *env) broadcast(topic string, bodies ...string) {
	e.t.Helper()
	for _, body := range bodies {
		if err := e.broadcaster().Broadcast(e.t.Context(), topic, []byte(body)); err != nil {
			e.t.Fatalf("broadcast %q to %q: %v", body, topic, err)
		}
	}
}

// hear receives n messages from l, each within the suite's slack.
func (e *env) hear(l broker.Listener, n int) []string {
	e.t.Helper()
	var got []string
	for range n {
		select {
		case m, ok := <-l.Messages():
			if !ok {
				e.t.Fatalf("the listener ended after %v: %v", got, l.Err())
			}
			got = append(got, string(m))
		case <-time.After(e.slack):
			e.t.Fatalf("heard %v, then nothing within %v", got, e.slack)
		}
	}
	return got
}

// silent checks that l hears nothing for d.
func (e *env) silent(l broker.Listener, d time.Duration) {
	e.t.Helper()
	select {
	case m, ok := <-l.Messages():
		if ok {
			e.t.Errorf("heard %q, want nothing", m)
		} else {
			e.t.Errorf("the listener ended: %v", l.Err())
		}
	case <-time.After(d):
	}
}

// ended waits for l's Messages to close and returns its Err.
func (e *env) ended(l broker.Listener) error {
	e.t.Helper()
	timeout := time.After(e.slack)
	for {
		select {
		case _, ok := <-l.Messages():
			if !ok {
				return l.Err()
			}
		case <-timeout:
			e.t.Fatalf("the listener still runs %v later", e.slack)
		}
	}
}

// broadcastTests are the broker.Broadcaster's: skipped for a backend that
// is none.
var broadcastTests = []struct {
	name string
	run  func(e *env)
}{
	{"EveryListenerHearsEveryBroadcastInOrder", func(e *env) {
		topic, other := e.prefix+".heartbeat", e.prefix+".command"
		a, b, c := e.listen(topic), e.listen(topic), e.listen(other)
		var want []string
		for i := range 20 {
			want = append(want, fmt.Sprintf(`{"n":%d}`, i))
		}
		e.broadcast(topic, want...)
		wantIDs(e.t, e.hear(a, len(want)), want...)
		wantIDs(e.t, e.hear(b, len(want)), want...)
		e.silent(c, 300*time.Millisecond) // another topic's listener hears none of it
		e.broadcast(other, "to the other")
		wantIDs(e.t, e.hear(c, 1), "to the other")
		e.silent(a, 100*time.Millisecond)
	}},
	{"ABroadcastNobodyHearsIsNoError", func(e *env) {
		e.broadcast(e.prefix+".nobody", "lost in the void")
		// What was sent before a listener began is not heard.
		l := e.listen(e.prefix + ".nobody")
		e.silent(l, 300*time.Millisecond)
		e.broadcast(e.prefix+".nobody", "heard")
		wantIDs(e.t, e.hear(l, 1), "heard")
	}},
	{"CloseEndsOneListener", func(e *env) {
		topic := e.prefix + ".heartbeat"
		stays, goes := e.listen(topic), e.listen(topic)
		goes.Close()
		if err := e.ended(goes); err != nil {
			e.t.Errorf("Err after Close: got %v, want nil", err)
		}
		goes.Close() // a second Close is harmless
		e.broadcast(topic, "after")
		wantIDs(e.t, e.hear(stays, 1), "after")
	}},
	{"ClosingTheBackendEndsListenersAndRefusesBroadcasts", func(e *env) {
		topic := e.prefix + ".heartbeat"
		bc := e.broadcaster()
		l := e.listen(topic)
		if err := e.b.Close(); err != nil {
			e.t.Fatalf("close: %v", err)
		}
		wantErr(e.t, "listener Err after the backend's Close", e.ended(l), broker.ErrClosed)
		wantErr(e.t, "broadcast after close", bc.Broadcast(e.t.Context(), topic, []byte("x")), broker.ErrClosed)
		_, err := bc.Listen(e.t.Context(), topic)
		wantErr(e.t, "listen after close", err, broker.ErrClosed)
	}},
}
