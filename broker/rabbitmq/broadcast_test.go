package rabbitmq_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// listenerQueue is the queue bound to amq.direct with topic as its key,
// as rabbitmqctl lists it, or "" when there is none.
func listenerQueue(t *testing.T, topic string) string {
	t.Helper()
	for _, line := range strings.Split(rabbitmqctl(t, "list_bindings", "source_name", "routing_key", "destination_name", "--quiet"), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "amq.direct" && f[1] == topic {
			return f[2]
		}
	}
	return ""
}

// A listener is a bounded, exclusive, auto-deleted queue of its own,
// gone once it is closed; it ends with ErrConnectionLost when its
// connection is, and a listen after that hears again on the next
// connection.
func TestAListenerIsABoundedQueueThatEndsWithItsConnection(t *testing.T) {
	t.Parallel()
	name := unique("listener")
	b := rabbittest.Dial(t, &rabbitmq.Options{ConnectionName: name, ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	defer b.Close()
	ctx := t.Context()
	topic := name + ".heartbeat"
	l, err := b.Listen(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	q := listenerQueue(t, topic)
	if !strings.HasPrefix(q, "amq.gen-") {
		t.Fatalf("the listener's queue is %q, want a server-named one bound to amq.direct by %q", q, topic)
	}
	info := listQueues(t, q)[q]
	want := map[string]any{"x-message-ttl": float64(60000), "x-max-length": float64(1000), "x-max-length-bytes": float64(16 << 20), "x-overflow": "drop-head"}
	for k, v := range want {
		if info.Arguments[k] != v {
			t.Errorf("listener queue argument %s: %v, want %v", k, info.Arguments[k], v)
		}
	}
	if info.Durable {
		t.Error("the listener's queue is durable")
	}

	closeConnection(t, name)
	select {
	case _, ok := <-l.Messages():
		if ok {
			t.Fatal("a message after the connection was closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not end with its connection")
	}
	if !errors.Is(l.Err(), rabbitmq.ErrConnectionLost) {
		t.Errorf("Err: %v, want ErrConnectionLost", l.Err())
	}
	l.Close()

	again, err := b.Listen(ctx, topic) // waits for the next connection
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Broadcast(ctx, topic, []byte("after")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-again.Messages():
		if string(m) != "after" {
			t.Errorf("heard %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the new listener heard nothing")
	}
	again.Close()
	if q := listenerQueue(t, topic); q != "" {
		t.Errorf("after Close, %s is still bound to the topic", q)
	}
}

// A listener whose reader does not read keeps listenerBuffer (256)
// messages and drops the rest; nothing piles up on the broker.
func TestAListenerThatIsNotReadDropsWhatItCannotHold(t *testing.T) {
	t.Parallel()
	name := unique("slow")
	b := rabbittest.Dial(t, &rabbitmq.Options{ConnectionName: name})
	defer b.Close()
	ctx := t.Context()
	topic := name + ".heartbeat"
	l, err := b.Listen(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 600 {
		if err := b.Broadcast(ctx, topic, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	q := listenerQueue(t, topic)
	if n := listQueues(t, q)[q].Messages; n != 0 {
		t.Errorf("%d broadcasts wait on the broker for a listener that does not read, want 0", n)
	}
	heard := 0
	for {
		select {
		case m := <-l.Messages():
			if string(m) != fmt.Sprint(heard) {
				t.Fatalf("heard %q as message %d: the first ones are kept, in order", m, heard)
			}
			heard++
			continue
		case <-time.After(300 * time.Millisecond):
		}
		break
	}
	if heard != 256 {
		t.Errorf("heard %d of 600 unread broadcasts, want the first 256", heard)
	}
}
