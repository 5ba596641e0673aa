package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
)

// The tests drive every hold with a *clock.Mock. The backend hands out
// deliveries synchronously, under its lock, during the call that makes them
// possible (Publish, Ack, Consume, ...), so a delivery that should exist is
// already buffered in the consumer's channel: recv and none check it without
// waiting. Only a release by the clock's timer goroutine is waited for, in
// waitRecv, with a generous guard that only a failure reaches.

// failAfter bounds a wait that a correct backend satisfies at once.
const failAfter = 5 * time.Second

func newBackend(t *testing.T) (*memory.Backend, *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	b := memory.New(&memory.Options{Clock: mock})
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b, mock
}

// spec is a work queue with ten priority levels, as queuey declares them.
func spec(name string) broker.QueueSpec {
	return broker.QueueSpec{Name: name, MaxPriority: 10, Durable: true}
}

func declare(t *testing.T, b *memory.Backend, specs ...broker.QueueSpec) {
	t.Helper()
	if err := b.Declare(t.Context(), specs...); err != nil {
		t.Fatalf("declare: %v", err)
	}
}

func msg(queue, id string, priority uint8) broker.Message {
	return broker.Message{
		Queue:    queue,
		ID:       id,
		Type:     "test",
		Priority: priority,
		Attempt:  1,
		Body:     []byte(fmt.Sprintf(`{"id":%q}`, id)),
	}
}

func publish(t *testing.T, b *memory.Backend, msgs ...broker.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := b.Publish(t.Context(), m); err != nil {
			t.Fatalf("publish %s: %v", m.ID, err)
		}
	}
}

func hold(t *testing.T, b *memory.Backend, m broker.Message, ttl time.Duration) {
	t.Helper()
	if err := b.Hold(t.Context(), m, ttl); err != nil {
		t.Fatalf("hold %s for %v: %v", m.ID, ttl, err)
	}
}

// consume starts a consumer that the test's cleanup cancels.
func consume(t *testing.T, b *memory.Backend, queue string, prefetch int) broker.Consumer {
	t.Helper()
	c, err := b.Consume(t.Context(), queue, prefetch)
	if err != nil {
		t.Fatalf("consume %q: %v", queue, err)
	}
	t.Cleanup(c.Cancel)
	return c
}

// recv takes the delivery that must already be buffered.
func recv(t *testing.T, c broker.Consumer) broker.Delivery {
	t.Helper()
	select {
	case d, ok := <-c.Deliveries():
		if !ok {
			t.Fatalf("consumer ended (%v), want a delivery", c.Err())
		}
		return d
	default:
		t.Fatalf("got no delivery, want one")
		return nil
	}
}

// waitRecv waits for a delivery made by the clock's timer goroutine.
func waitRecv(t *testing.T, c broker.Consumer) broker.Delivery {
	t.Helper()
	select {
	case d, ok := <-c.Deliveries():
		if !ok {
			t.Fatalf("consumer ended (%v), want a delivery", c.Err())
		}
		return d
	case <-time.After(failAfter):
		t.Fatalf("got no delivery within %v, want one", failAfter)
		return nil
	}
}

// none checks that nothing is buffered for c.
func none(t *testing.T, c broker.Consumer) {
	t.Helper()
	select {
	case d, ok := <-c.Deliveries():
		if ok {
			t.Fatalf("got delivery %s, want none", d.Message().ID)
		}
		t.Fatalf("consumer ended (%v), want it open and idle", c.Err())
	default:
	}
}

// ended checks that c's channel is closed with nothing left in it.
func ended(t *testing.T, c broker.Consumer) {
	t.Helper()
	select {
	case d, ok := <-c.Deliveries():
		if ok {
			t.Fatalf("got delivery %s from an ended consumer, want a closed channel", d.Message().ID)
		}
	default:
		t.Fatalf("got an open channel, want it closed")
	}
}

func ack(t *testing.T, d broker.Delivery) {
	t.Helper()
	if err := d.Ack(t.Context()); err != nil {
		t.Fatalf("ack %s: %v", d.Message().ID, err)
	}
}

// ids receives n buffered deliveries, acking each, and returns their ids.
func ids(t *testing.T, c broker.Consumer, n int) []string {
	t.Helper()
	var out []string
	for range n {
		d := recv(t, c)
		out = append(out, d.Message().ID)
		ack(t, d)
	}
	return out
}

func messageIDs(msgs []broker.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.ID)
	}
	return out
}

func wantIDs(t *testing.T, got []string, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ids differ (-want +got):\n%s", diff)
	}
}

func wantErr(t *testing.T, what string, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Errorf("%s: got error %v, want %v", what, got, want)
	}
}

// counts checks Pending and Held of queue, in that order: a message only
// ever moves from held to pending, so reading Pending first can never count
// one message twice.
func counts(t *testing.T, b *memory.Backend, queue string, pending, held int) {
	t.Helper()
	if got := b.Pending(queue); got != pending {
		t.Errorf("Pending(%q): got %d, want %d", queue, got, pending)
	}
	if got := b.Held(queue); got != held {
		t.Errorf("Held(%q): got %d, want %d", queue, got, held)
	}
}

func TestName(t *testing.T) {
	b, _ := newBackend(t)
	if got := b.Name(); got != "memory" {
		t.Errorf("Name: got %q, want %q", got, "memory")
	}
}

func TestNewWithoutOptionsUsesTheRealClock(t *testing.T) {
	b := memory.New(nil)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "1", 0))
	if got := b.Pending("work"); got != 1 {
		t.Errorf("Pending: got %d, want 1", got)
	}
	if err := b.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

func TestDeclareIsIdempotent(t *testing.T) {
	b, _ := newBackend(t)
	s := broker.QueueSpec{Name: "work", MaxPriority: 4, Durable: true, MessageTTL: time.Minute}
	declare(t, b, s)
	publish(t, b, msg("work", "kept", 0))
	declare(t, b, s)
	declare(t, b, s, s)
	if got := b.Pending("work"); got != 1 {
		t.Errorf("Pending after redeclare: got %d, want 1 (messages kept)", got)
	}
	got, ok := b.QueueSpec("work")
	if !ok {
		t.Fatalf("QueueSpec(work): got no queue, want %+v", s)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("QueueSpec differs (-want +got):\n%s", diff)
	}
	wantIDs(t, b.Queues(), "work", "work.dead")
}

func TestRedeclaringWithOtherArgumentsFails(t *testing.T) {
	orig := broker.QueueSpec{Name: "work", MaxPriority: 10, Durable: true}
	tests := []struct {
		name string
		spec broker.QueueSpec
	}{
		{"another max priority", broker.QueueSpec{Name: "work", MaxPriority: 5, Durable: true}},
		{"no priorities", broker.QueueSpec{Name: "work", Durable: true}},
		{"not durable", broker.QueueSpec{Name: "work", MaxPriority: 10}},
		{"a message ttl", broker.QueueSpec{Name: "work", MaxPriority: 10, Durable: true, MessageTTL: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := newBackend(t)
			declare(t, b, orig)
			publish(t, b, msg("work", "kept", 0))
			err := b.Declare(t.Context(), tt.spec)
			wantErr(t, "redeclare", err, broker.ErrPreconditionFailed)
			if err != nil && !strings.Contains(err.Error(), `"work"`) {
				t.Errorf("error %q does not name the queue %q", err, "work")
			}
			if got, _ := b.QueueSpec("work"); got != orig {
				t.Errorf("QueueSpec after a refused redeclare: got %+v, want %+v", got, orig)
			}
			// The queue and the backend stay usable.
			if got := b.Pending("work"); got != 1 {
				t.Errorf("Pending: got %d, want 1", got)
			}
			wantIDs(t, ids(t, consume(t, b, "work", 1), 1), "kept")
		})
	}
}

func TestARefusedDeclareDeclaresNothing(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	err := b.Declare(t.Context(), spec("other"), broker.QueueSpec{Name: "work"})
	wantErr(t, "declare", err, broker.ErrPreconditionFailed)
	wantIDs(t, b.Queues(), "work", "work.dead")
}

func TestDeclareCreatesTheDeadLetterQueue(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, broker.QueueSpec{Name: "work", MaxPriority: 3})
	got, ok := b.QueueSpec("work.dead")
	if !ok {
		t.Fatalf("QueueSpec(work.dead): got no queue, want one")
	}
	if want := (broker.QueueSpec{Name: "work.dead", Durable: true}); got != want {
		t.Errorf("QueueSpec(work.dead): got %+v, want %+v", got, want)
	}
	if _, ok := b.QueueSpec("missing"); ok {
		t.Errorf("QueueSpec(missing): got a queue, want none")
	}
}

func TestDeclaresEveryQueueSorted(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("app.gamma"), spec("app.alpha"), spec("app.beta"))
	wantIDs(t, b.Queues(), "app.alpha", "app.alpha.dead", "app.beta", "app.beta.dead", "app.gamma", "app.gamma.dead")
}

func TestDeclareRefusesAnInvalidName(t *testing.T) {
	tests := []struct {
		name  string
		queue string
	}{
		{"empty", ""},
		{"reserved prefix", "amq.work"},
		{"not utf-8", "work\xff"},
		{"too long", strings.Repeat("q", broker.MaxNameBytes+1)},
		{"no room for hold queues", strings.Repeat("q", broker.MaxNameBytes-5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := newBackend(t)
			err := b.Declare(t.Context(), spec("fine"), spec(tt.queue))
			wantErr(t, "declare", err, broker.ErrInvalidName)
			if got := b.Queues(); len(got) != 0 {
				t.Errorf("Queues after a refused declare: got %q, want none", got)
			}
		})
	}
}

func TestPublishThenConsumeIsFIFO(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	want := []broker.Message{msg("work", "1", 0), msg("work", "2", 0), msg("work", "3", 0)}
	want[1].Headers = map[string]string{"traceparent": "00-abc-def-01"}
	want[2].Attempt, want[2].Deferrals = 3, 2
	publish(t, b, want...)
	if got := b.Pending("work"); got != 3 {
		t.Errorf("Pending: got %d, want 3", got)
	}
	c := consume(t, b, "work", 10)
	var got []broker.Message
	for range 3 {
		d := recv(t, c)
		if d.Redelivered() {
			t.Errorf("%s: got redelivered, want a first delivery", d.Message().ID)
		}
		got = append(got, d.Message())
		ack(t, d)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deliveries differ (-want +got):\n%s", diff)
	}
	none(t, c)
}

func TestConsumerStartedBeforePublishReceivesMessages(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	c := consume(t, b, "work", 1)
	none(t, c)
	publish(t, b, msg("work", "1", 0))
	wantIDs(t, ids(t, c, 1), "1")
	publish(t, b, msg("work", "2", 0))
	wantIDs(t, ids(t, c, 1), "2")
}

func TestPublishToAnUndeclaredQueueIsUnroutable(t *testing.T) {
	b, _ := newBackend(t)
	err := b.Publish(t.Context(), msg("missing", "lost", 0))
	wantErr(t, "publish", err, broker.ErrUnroutable)
	if err != nil && !strings.Contains(err.Error(), `"missing"`) {
		t.Errorf("error %q does not name the queue %q", err, "missing")
	}
	if got := b.Queues(); len(got) != 0 {
		t.Errorf("Queues: got %q, want none (a publish creates no queue)", got)
	}
}

func TestPrefetchCapsOutstandingDeliveries(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "1", 0), msg("work", "2", 0), msg("work", "3", 0))
	c := consume(t, b, "work", 2)
	first, second := recv(t, c), recv(t, c)
	none(t, c)
	if got := b.Pending("work"); got != 1 {
		t.Errorf("Pending while the consumer is full: got %d, want 1", got)
	}
	ack(t, first)
	wantIDs(t, ids(t, c, 1), "3")
	ack(t, second)
	none(t, c)
}

func TestConsumeRefusesAPrefetchBelowOne(t *testing.T) {
	for _, prefetch := range []int{0, -1} {
		t.Run(fmt.Sprint(prefetch), func(t *testing.T) {
			b, _ := newBackend(t)
			declare(t, b, spec("work"))
			c, err := b.Consume(t.Context(), "work", prefetch)
			if err == nil {
				c.Cancel()
				t.Fatalf("Consume with prefetch %d: got no error, want one", prefetch)
			}
			if got := b.Consumers("work"); got != 0 {
				t.Errorf("Consumers: got %d, want 0", got)
			}
		})
	}
}

func TestConsumingAMissingQueueFails(t *testing.T) {
	b, _ := newBackend(t)
	_, err := b.Consume(t.Context(), "missing", 1)
	wantErr(t, "consume", err, broker.ErrNoQueue)
}

func TestACanceledContextDoesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	calls := []struct {
		name string
		call func() error
	}{
		{"Declare", func() error { return b.Declare(ctx, spec("other")) }},
		{"Publish", func() error { return b.Publish(ctx, msg("work", "1", 0)) }},
		{"Hold", func() error { return b.Hold(ctx, msg("work", "1", 0), time.Second) }},
		{"DeadLetter", func() error {
			return b.DeadLetter(ctx, broker.DeadLetter{Message: msg("work", "1", 0), Reason: "r"})
		}},
		{"Consume", func() error { _, err := b.Consume(ctx, "work", 1); return err }},
	}
	for _, c := range calls {
		wantErr(t, c.name, c.call(), context.Canceled)
	}
	wantIDs(t, b.Queues(), "work", "work.dead")
	counts(t, b, "work", 0, 0)
	if got := b.Pending("work.dead"); got != 0 {
		t.Errorf("Pending(work.dead): got %d, want 0", got)
	}
	if got := b.Consumers("work"); got != 0 {
		t.Errorf("Consumers: got %d, want 0", got)
	}
}

func TestPublishOrdersByPriorityAndKeepsEachLevelFIFO(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "normal-1", 0), msg("work", "urgent-1", 10), msg("work", "normal-2", 0),
		msg("work", "urgent-2", 10), msg("work", "middle", 5), msg("work", "normal-3", 0))
	wantIDs(t, ids(t, consume(t, b, "work", 1), 6),
		"urgent-1", "urgent-2", "middle", "normal-1", "normal-2", "normal-3")
}

func TestAHigherPriorityPublishOvertakesTheWholeBacklog(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "a", 0), msg("work", "b", 0), msg("work", "c", 0), msg("work", "first", 1))
	wantIDs(t, ids(t, consume(t, b, "work", 1), 4), "first", "a", "b", "c")
}

func TestAPriorityAboveTheMaximumCountsAsTheMaximum(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, broker.QueueSpec{Name: "work", MaxPriority: 5})
	publish(t, b, msg("work", "low", 0), msg("work", "max-1", 5), msg("work", "over", 200),
		msg("work", "max-2", 5), msg("work", "four", 4))
	wantIDs(t, ids(t, consume(t, b, "work", 1), 5), "max-1", "over", "max-2", "four", "low")
}

func TestAQueueWithoutPrioritiesIsFIFO(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, broker.QueueSpec{Name: "work"})
	publish(t, b, msg("work", "a", 0), msg("work", "b", 10), msg("work", "c", 3), msg("work", "d", 255))
	wantIDs(t, ids(t, consume(t, b, "work", 1), 4), "a", "b", "c", "d")
}

func TestAHoldIsInvisibleUntilItsTTLElapses(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	hold(t, b, msg("work", "held", 0), 30*time.Second)
	steps := []struct {
		advance       time.Duration
		pending, held int
	}{
		{0, 0, 1},
		{29 * time.Second, 0, 1},
		{999 * time.Millisecond, 0, 1}, // 29.999 s
		{time.Millisecond, 1, 0},       // 30 s
		{time.Hour, 1, 0},
	}
	elapsed := time.Duration(0)
	for _, s := range steps {
		mock.Add(s.advance)
		elapsed += s.advance
		t.Run(elapsed.String(), func(t *testing.T) {
			counts(t, b, "work", s.pending, s.held)
		})
	}
	wantIDs(t, ids(t, consume(t, b, "work", 1), 1), "held")
}

func TestAHoldIsNeverCountedTwiceWhileItExpires(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	const n = 64
	for i := range n {
		hold(t, b, msg("work", fmt.Sprint(i), 0), time.Duration(i%8+1)*time.Millisecond)
	}
	for ms := 0; ms <= 8; ms++ {
		pending, held := b.Pending("work"), b.Held("work")
		if pending+held != n {
			t.Errorf("at %dms: got pending %d + held %d = %d, want %d", ms, pending, held, pending+held, n)
		}
		if want := ms * n / 8; pending != want {
			t.Errorf("at %dms: got pending %d, want %d", ms, pending, want)
		}
		mock.Add(time.Millisecond)
	}
}

func TestAHoldLandsAtItsPriorityAheadOfTheBacklog(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "backlog-1", 0), msg("work", "backlog-2", 0))
	hold(t, b, msg("work", "deferred", 10), 30*time.Second)
	hold(t, b, msg("work", "delayed", 0), 30*time.Second)
	publish(t, b, msg("work", "backlog-3", 0))
	mock.Add(30 * time.Second)
	counts(t, b, "work", 5, 0)
	wantIDs(t, ids(t, consume(t, b, "work", 1), 5), "deferred", "backlog-1", "backlog-2", "backlog-3", "delayed")
}

func TestHoldOnAnUndeclaredQueueFails(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	for _, q := range []string{"missing", "work.dead"} {
		err := b.Hold(t.Context(), msg(q, "x", 0), time.Second)
		wantErr(t, "hold on "+q, err, broker.ErrUnknownQueue)
		if err != nil && !strings.Contains(err.Error(), q) {
			t.Errorf("error %q does not name the queue %q", err, q)
		}
		if got := b.Held(q); got != 0 {
			t.Errorf("Held(%q): got %d, want 0", q, got)
		}
	}
}

func TestHoldRefusesAnInvalidTTL(t *testing.T) {
	tests := []struct {
		name string
		ttl  time.Duration
		want error
	}{
		{"zero", 0, broker.ErrInvalidDelay},
		{"negative", -time.Second, broker.ErrInvalidDelay},
		{"one nanosecond", time.Nanosecond, broker.ErrInvalidDelay},
		{"not whole milliseconds", 1500 * time.Microsecond, broker.ErrInvalidDelay},
		{"longer than a hold queue waits", (broker.MaxHoldMs + 1) * time.Millisecond, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := newBackend(t)
			declare(t, b, spec("work"))
			err := b.Hold(t.Context(), msg("work", "x", 0), tt.ttl)
			if err == nil {
				t.Fatalf("Hold for %v: got no error, want one", tt.ttl)
			}
			if tt.want != nil {
				wantErr(t, "hold", err, tt.want)
			}
			counts(t, b, "work", 0, 0)
		})
	}
}

func TestHoldAcceptsTheLongestWait(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	longest := broker.MaxHoldMs * time.Millisecond
	hold(t, b, msg("work", "x", 0), longest)
	mock.Add(longest - time.Millisecond)
	counts(t, b, "work", 0, 1)
	mock.Add(time.Millisecond)
	counts(t, b, "work", 1, 0)
}

func TestHoldQueuesNamesEachHoldQueue(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"), spec("other"))
	hold(t, b, msg("work", "a", 0), 30*time.Second)
	hold(t, b, msg("work", "b", 5), 30*time.Second)
	hold(t, b, msg("work", "c", 0), 5*time.Second)
	hold(t, b, msg("other", "d", 0), 30*time.Second)

	want := map[string]int{"work.deferred.30000": 2, "work.deferred.5000": 1}
	if diff := cmp.Diff(want, b.HoldQueues("work")); diff != "" {
		t.Errorf("HoldQueues(work) differs (-want +got):\n%s", diff)
	}
	if got := b.Held("work"); got != 3 {
		t.Errorf("Held(work): got %d, want 3", got)
	}
	if got := b.Held("unknown"); got != 0 {
		t.Errorf("Held(unknown): got %d, want 0", got)
	}
	if got := b.HoldQueues("unknown"); len(got) != 0 {
		t.Errorf("HoldQueues(unknown): got %v, want empty", got)
	}

	mock.Add(5 * time.Second)
	want = map[string]int{"work.deferred.30000": 2}
	if diff := cmp.Diff(want, b.HoldQueues("work")); diff != "" {
		t.Errorf("HoldQueues(work) after 5s differs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"other.deferred.30000": 1}, b.HoldQueues("other")); diff != "" {
		t.Errorf("HoldQueues(other) differs (-want +got):\n%s", diff)
	}
}

func TestAShortHoldIsNotStuckBehindALongOne(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	hold(t, b, msg("work", "long", 0), time.Minute)
	hold(t, b, msg("work", "short", 0), 10*time.Second)
	mock.Add(10 * time.Second)
	counts(t, b, "work", 1, 1)
	c := consume(t, b, "work", 1)
	wantIDs(t, ids(t, c, 1), "short")
	none(t, c)
	mock.Add(50 * time.Second)
	counts(t, b, "work", 0, 0) // delivered at once to the idle consumer
	wantIDs(t, ids(t, c, 1), "long")
}

func TestHoldsDueTogetherLandInPublishOrder(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	// All due at 10 s: the ones held later wait less.
	hold(t, b, msg("work", "1", 0), 10*time.Second)
	hold(t, b, msg("work", "2", 0), 10*time.Second)
	mock.Add(4 * time.Second)
	hold(t, b, msg("work", "3", 0), 6*time.Second)
	hold(t, b, msg("work", "4", 0), 6*time.Second)
	mock.Add(5 * time.Second)
	hold(t, b, msg("work", "5", 0), time.Second)
	counts(t, b, "work", 0, 5)
	mock.Add(time.Second)
	counts(t, b, "work", 5, 0)
	wantIDs(t, ids(t, consume(t, b, "work", 1), 5), "1", "2", "3", "4", "5")
}

func TestAReleasedHoldIsDeliveredToAWaitingConsumerByTheTimer(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	c := consume(t, b, "work", 1)
	hold(t, b, msg("work", "held", 7), 30*time.Second)
	mock.Add(30*time.Second - time.Millisecond)
	none(t, c)
	// Nothing but the timer uses the backend from here on.
	mock.Add(time.Millisecond)
	d := waitRecv(t, c)
	if got := d.Message(); got.ID != "held" || got.Priority != 7 {
		t.Errorf("released message: got %s at priority %d, want held at 7", got.ID, got.Priority)
	}
	if d.Redelivered() {
		t.Errorf("released message: got redelivered, want a first delivery")
	}
	ack(t, d)
	counts(t, b, "work", 0, 0)
}

func TestTheTimerReleasesEveryHoldInTurn(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	c := consume(t, b, "work", 10)
	hold(t, b, msg("work", "3s", 0), 3*time.Second)
	hold(t, b, msg("work", "1s", 0), time.Second)
	hold(t, b, msg("work", "2s", 0), 2*time.Second)
	for _, want := range []string{"1s", "2s", "3s"} {
		mock.Add(time.Second)
		d := waitRecv(t, c)
		if got := d.Message().ID; got != want {
			t.Errorf("got %s, want %s", got, want)
		}
		ack(t, d)
	}
}

func TestInspectionReleasesDueHolds(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	c := consume(t, b, "work", 1)
	hold(t, b, msg("work", "held", 0), time.Second)
	mock.Add(time.Second)
	// Whether or not the timer's goroutine has run yet, the backend's
	// state as of now has the message delivered.
	if got := b.InFlight("work"); got != 1 {
		t.Errorf("InFlight: got %d, want 1", got)
	}
	wantIDs(t, ids(t, c, 1), "held")
}

func TestAnAckHandsOutADueHoldBeforeTheBacklog(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "first", 0), msg("work", "backlog", 0))
	c := consume(t, b, "work", 1)
	first := recv(t, c)
	hold(t, b, msg("work", "urgent", 10), time.Second)
	mock.Add(time.Second)
	// The hold is due: the slot the ack frees is the urgent message's,
	// whether or not the timer's goroutine has run yet.
	ack(t, first)
	wantIDs(t, ids(t, c, 2), "urgent", "backlog")
}

func TestDeadLetterRecordsTheReason(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	m := msg("work", "doomed", 4)
	m.Attempt = 3
	m.Headers = map[string]string{"traceparent": "00-abc-def-01"}
	if err := b.DeadLetter(t.Context(), broker.DeadLetter{Message: m, Reason: "fatal: bad input"}); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	wantMsg := m
	wantMsg.Headers = map[string]string{
		"traceparent":              "00-abc-def-01",
		broker.HeaderDeathReason:   "fatal: bad input",
		broker.HeaderOriginalQueue: "work",
		broker.HeaderAttempts:      "3",
	}
	want := []broker.DeadLetter{{Message: wantMsg, Reason: "fatal: bad input"}}
	if diff := cmp.Diff(want, b.DeadLetters("work")); diff != "" {
		t.Errorf("DeadLetters differ (-want +got):\n%s", diff)
	}
	if got := b.Pending("work.dead"); got != 1 {
		t.Errorf("Pending(work.dead): got %d, want 1", got)
	}
	if got := b.Pending("work"); got != 0 {
		t.Errorf("Pending(work): got %d, want 0", got)
	}
	if got := b.Acked("work"); len(got) != 0 {
		t.Errorf("Acked(work): got %v, want none", messageIDs(got))
	}
	if m.Headers["x-death-reason"] != "" {
		t.Errorf("DeadLetter changed the caller's headers: %v", m.Headers)
	}
	if got := b.DeadLetters("unknown"); got != nil {
		t.Errorf("DeadLetters(unknown): got %v, want nil", got)
	}
}

func TestTheDeadLetterQueueIsConsumable(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	for _, id := range []string{"1", "2"} {
		dl := broker.DeadLetter{Message: msg("work", id, 0), Reason: "reason " + id}
		if err := b.DeadLetter(t.Context(), dl); err != nil {
			t.Fatalf("dead letter %s: %v", id, err)
		}
	}
	c := consume(t, b, "work.dead", 1)
	d := recv(t, c)
	if got := d.Message().Headers[broker.HeaderDeathReason]; got != "reason 1" {
		t.Errorf("reason: got %q, want %q", got, "reason 1")
	}
	none(t, c)
	ack(t, d)
	wantIDs(t, ids(t, c, 1), "2")
	if got := b.DeadLetters("work"); len(got) != 0 {
		t.Errorf("DeadLetters after consuming them: got %d, want 0", len(got))
	}
	wantIDs(t, messageIDs(b.Acked("work.dead")), "1", "2")
}

func TestDeadLetterFreesNothing(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "doomed", 0), msg("work", "next", 0))
	c := consume(t, b, "work", 1)
	d := recv(t, c)
	if err := b.DeadLetter(t.Context(), broker.DeadLetter{Message: d.Message(), Reason: "no"}); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	// Dead-lettering is a publish; the delivery is the worker's to settle.
	if got := b.InFlight("work"); got != 1 {
		t.Errorf("InFlight after dead letter: got %d, want 1", got)
	}
	none(t, c)
	ack(t, d)
	wantIDs(t, ids(t, c, 1), "next")
	wantIDs(t, messageIDs(b.Acked("work")), "doomed", "next")
	wantIDs(t, messageIDs(dlMessages(b.DeadLetters("work"))), "doomed")
}

func dlMessages(dls []broker.DeadLetter) []broker.Message {
	var out []broker.Message
	for _, dl := range dls {
		out = append(out, dl.Message)
	}
	return out
}

func TestDeadLetterWithoutADeadLetterQueueIsUnroutable(t *testing.T) {
	b, _ := newBackend(t)
	err := b.DeadLetter(t.Context(), broker.DeadLetter{Message: msg("missing", "x", 0), Reason: "no"})
	wantErr(t, "dead letter", err, broker.ErrUnroutable)
	if got := b.Queues(); len(got) != 0 {
		t.Errorf("Queues: got %q, want none", got)
	}
}

func TestAckRecordsInAckOrderAndFreesASlot(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "1", 0), msg("work", "2", 0), msg("work", "3", 0))
	c := consume(t, b, "work", 2)
	d1, d2 := recv(t, c), recv(t, c)
	none(t, c)
	ack(t, d2)
	d3 := recv(t, c) // the slot d2 held
	ack(t, d1)
	ack(t, d3)
	wantIDs(t, messageIDs(b.Acked("work")), "2", "1", "3")
	if got := b.Acked("unknown"); got != nil {
		t.Errorf("Acked(unknown): got %v, want nil", got)
	}
	if got := b.InFlight("work"); got != 0 {
		t.Errorf("InFlight: got %d, want 0", got)
	}
}

func TestSettlingTwiceIsRefused(t *testing.T) {
	type settle func(broker.Delivery, context.Context) error
	ackF := func(d broker.Delivery, ctx context.Context) error { return d.Ack(ctx) }
	requeueF := func(d broker.Delivery, ctx context.Context) error { return d.Requeue(ctx) }
	tests := []struct {
		name          string
		first, second settle
	}{
		{"ack then ack", ackF, ackF},
		{"ack then requeue", ackF, requeueF},
		{"requeue then ack", requeueF, ackF},
		{"requeue then requeue", requeueF, requeueF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := newBackend(t)
			declare(t, b, spec("work"))
			publish(t, b, msg("work", "1", 0))
			c := consume(t, b, "work", 2)
			d := recv(t, c)
			if err := tt.first(d, t.Context()); err != nil {
				t.Fatalf("first settle: %v", err)
			}
			wantErr(t, "second settle", tt.second(d, t.Context()), broker.ErrAlreadySettled)
			if got := len(b.Acked("work")); got > 1 {
				t.Errorf("Acked: got %d entries, want at most 1", got)
			}
		})
	}
}

func TestRequeuePutsTheMessageBackAtTheFrontOfItsLevel(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "normal-1", 0), msg("work", "normal-2", 0))
	c := consume(t, b, "work", 1)
	d := recv(t, c)
	if d.Redelivered() {
		t.Errorf("first delivery: got redelivered, want not")
	}
	publish(t, b, msg("work", "urgent", 5))
	if err := d.Requeue(t.Context()); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	// The slot is free again; a higher level still goes first.
	u := recv(t, c)
	if got := u.Message().ID; got != "urgent" {
		t.Errorf("after requeue: got %s, want urgent", got)
	}
	ack(t, u)
	again := recv(t, c)
	if got := again.Message().ID; got != "normal-1" || !again.Redelivered() {
		t.Errorf("requeued: got %s redelivered=%t, want normal-1 redelivered", got, again.Redelivered())
	}
	ack(t, again)
	last := recv(t, c)
	if got := last.Message().ID; got != "normal-2" || last.Redelivered() {
		t.Errorf("last: got %s redelivered=%t, want normal-2 not redelivered", got, last.Redelivered())
	}
	ack(t, last)
	wantIDs(t, messageIDs(b.Acked("work")), "urgent", "normal-1", "normal-2")
}

func TestRequeuedDeliveriesKeepTheirOriginalOrder(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "1", 0), msg("work", "2", 0), msg("work", "3", 0), msg("work", "4", 0))
	c := consume(t, b, "work", 3)
	d1, d2, d3 := recv(t, c), recv(t, c), recv(t, c)
	for _, d := range []broker.Delivery{d3, d1} { // out of order
		if err := d.Requeue(t.Context()); err != nil {
			t.Fatalf("requeue %s: %v", d.Message().ID, err)
		}
	}
	ack(t, d2)
	c.Cancel()
	wantIDs(t, ids(t, consume(t, b, "work", 3), 3), "1", "3", "4")
}

func TestCancelReturnsUnsettledDeliveriesInOrder(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "1", 0), msg("work", "2", 0), msg("work", "3", 0), msg("work", "4", 0))
	c, err := b.Consume(t.Context(), "work", 3)
	if err != nil {
		t.Fatal(err)
	}
	first := recv(t, c) // read; 2 and 3 stay buffered, unread
	c.Cancel()
	ended(t, c)
	if err := c.Err(); err != nil {
		t.Errorf("Err after Cancel: got %v, want nil", err)
	}
	counts(t, b, "work", 4, 0)
	if got := b.InFlight("work"); got != 0 {
		t.Errorf("InFlight: got %d, want 0", got)
	}
	wantErr(t, "ack after cancel", first.Ack(t.Context()), broker.ErrStaleDelivery)
	wantErr(t, "requeue after cancel", first.Requeue(t.Context()), broker.ErrStaleDelivery)
	c.Cancel() // again: no effect

	c2 := consume(t, b, "work", 4)
	var got []string
	var redelivered []bool
	for range 4 {
		d := recv(t, c2)
		got = append(got, d.Message().ID)
		redelivered = append(redelivered, d.Redelivered())
		ack(t, d)
	}
	wantIDs(t, got, "1", "2", "3", "4")
	if diff := cmp.Diff([]bool{true, true, true, false}, redelivered); diff != "" {
		t.Errorf("redelivered flags differ (-want +got):\n%s", diff)
	}
	wantIDs(t, messageIDs(b.Acked("work")), "1", "2", "3", "4")
}

func TestCancelHandsReturnedMessagesToTheOtherConsumers(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	a := consume(t, b, "work", 2)
	publish(t, b, msg("work", "1", 0), msg("work", "2", 0))
	other := consume(t, b, "work", 2)
	none(t, other)
	a.Cancel()
	for _, want := range []string{"1", "2"} {
		d := recv(t, other)
		if got := d.Message().ID; got != want || !d.Redelivered() {
			t.Errorf("got %s redelivered=%t, want %s redelivered", got, d.Redelivered(), want)
		}
		ack(t, d)
	}
}

func TestConsumersAreForgottenWhenCancelled(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	a, other := consume(t, b, "work", 1), consume(t, b, "work", 1)
	if got := b.Consumers("work"); got != 2 {
		t.Errorf("Consumers: got %d, want 2", got)
	}
	a.Cancel()
	if got := b.Consumers("work"); got != 1 {
		t.Errorf("Consumers after one Cancel: got %d, want 1", got)
	}
	publish(t, b, msg("work", "1", 0), msg("work", "2", 0))
	wantIDs(t, ids(t, other, 1), "1") // the cancelled consumer is skipped
	wantIDs(t, ids(t, other, 1), "2")
	other.Cancel()
	if got := b.Consumers("work"); got != 0 {
		t.Errorf("Consumers after both Cancel: got %d, want 0", got)
	}
	if got := b.Consumers("unknown"); got != 0 {
		t.Errorf("Consumers(unknown): got %d, want 0", got)
	}
}

func TestDisconnectEndsConsumersAndReturnsTheirDeliveries(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"), spec("other"))
	publish(t, b, msg("work", "1", 0), msg("work", "2", 0), msg("other", "x", 0))
	a, a2 := consume(t, b, "work", 1), consume(t, b, "work", 1)
	o := consume(t, b, "other", 1)
	da := recv(t, a)
	b.Disconnect("work")
	b.Disconnect("unknown") // no such queue: nothing happens
	for _, c := range []broker.Consumer{a, a2} {
		ended(t, c)
		wantErr(t, "Err", c.Err(), memory.ErrDisconnected)
	}
	wantErr(t, "ack after disconnect", da.Ack(t.Context()), broker.ErrStaleDelivery)
	if got := b.Consumers("work"); got != 0 {
		t.Errorf("Consumers(work): got %d, want 0", got)
	}
	if got := b.Pending("work"); got != 2 {
		t.Errorf("Pending(work): got %d, want 2", got)
	}
	// The other queue's consumer is untouched.
	wantIDs(t, ids(t, o, 1), "x")
	if got := b.Consumers("other"); got != 1 {
		t.Errorf("Consumers(other): got %d, want 1", got)
	}
	// A new consumer gets the returned deliveries back, in order.
	c := consume(t, b, "work", 2)
	d1, d2 := recv(t, c), recv(t, c)
	wantIDs(t, []string{d1.Message().ID, d2.Message().ID}, "1", "2")
	if !d1.Redelivered() || !d2.Redelivered() {
		t.Errorf("redelivered: got %t %t, want true true", d1.Redelivered(), d2.Redelivered())
	}
	ack(t, d1)
	ack(t, d2)
}

func TestMultipleConsumersShareOneQueue(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	a, other := consume(t, b, "work", 2), consume(t, b, "work", 2)
	publish(t, b, msg("work", "1", 0), msg("work", "2", 0), msg("work", "3", 0), msg("work", "4", 0),
		msg("work", "5", 0))
	a1, a3 := recv(t, a), recv(t, a)
	o2, o4 := recv(t, other), recv(t, other)
	wantIDs(t, []string{a1.Message().ID, o2.Message().ID, a3.Message().ID, o4.Message().ID}, "1", "2", "3", "4")
	none(t, a)
	none(t, other)
	if got := b.Pending("work"); got != 1 {
		t.Errorf("Pending with both consumers full: got %d, want 1", got)
	}
	ack(t, o2)
	wantIDs(t, ids(t, other, 1), "5")
	none(t, a)
	for _, d := range []broker.Delivery{a1, a3, o4} {
		ack(t, d)
	}
	if got := len(b.Acked("work")); got != 5 {
		t.Errorf("Acked: got %d, want 5", got)
	}
}

func TestQueuesAreIndependent(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("a"), spec("b"))
	publish(t, b, msg("a", "a1", 0), msg("a", "a2", 0), msg("b", "b1", 0))
	hold(t, b, msg("b", "b-held", 0), time.Second)
	ca := consume(t, b, "a", 1)
	da := recv(t, ca)
	counts(t, b, "a", 1, 0)
	counts(t, b, "b", 1, 1)
	if got := b.InFlight("b"); got != 0 {
		t.Errorf("InFlight(b): got %d, want 0", got)
	}
	cb := consume(t, b, "b", 10)
	wantIDs(t, ids(t, cb, 1), "b1")
	mock.Add(time.Second)
	counts(t, b, "b", 0, 0) // released and handed to cb
	wantIDs(t, ids(t, cb, 1), "b-held")
	none(t, ca) // a1 is still unacked on a, whatever happens on b
	b.Disconnect("b")
	if got := b.Consumers("a"); got != 1 {
		t.Errorf("Consumers(a) after disconnecting b: got %d, want 1", got)
	}
	ack(t, da)
	wantIDs(t, ids(t, ca, 1), "a2")
	wantIDs(t, messageIDs(b.Acked("a")), "a1", "a2")
	wantIDs(t, messageIDs(b.Acked("b")), "b1", "b-held")
}

func TestInFlightCountsDeliveredUnsettledMessages(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "1", 0), msg("work", "2", 0), msg("work", "3", 0), msg("work", "4", 0))
	if got := b.InFlight("work"); got != 0 {
		t.Errorf("InFlight before consuming: got %d, want 0", got)
	}
	a, other := consume(t, b, "work", 2), consume(t, b, "work", 1)
	// Buffered but unread deliveries are in flight too.
	if got := b.InFlight("work"); got != 3 {
		t.Errorf("InFlight: got %d, want 3", got)
	}
	d := recv(t, a)
	ack(t, d) // frees a slot that "4" takes
	if got := b.InFlight("work"); got != 3 {
		t.Errorf("InFlight after an ack refilled: got %d, want 3", got)
	}
	o := recv(t, other)
	if err := o.Requeue(t.Context()); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	// The requeued message goes straight back out to the consumer that had room.
	if got := b.InFlight("work"); got != 3 {
		t.Errorf("InFlight after a requeue: got %d, want 3", got)
	}
	a.Cancel()
	other.Cancel()
	if got := b.InFlight("work"); got != 0 {
		t.Errorf("InFlight after cancelling: got %d, want 0", got)
	}
	if got := b.InFlight("unknown"); got != 0 {
		t.Errorf("InFlight(unknown): got %d, want 0", got)
	}
}

func TestCloseEndsAllConsumers(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"), spec("idle"))
	publish(t, b, msg("work", "1", 0), msg("work", "2", 0))
	busy := consume(t, b, "work", 2)
	idle := consume(t, b, "idle", 1)
	d := recv(t, busy) // "2" stays buffered, unread
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if !b.Closed() {
		t.Errorf("Closed: got false, want true")
	}
	for name, c := range map[string]broker.Consumer{"busy": busy, "idle": idle} {
		t.Run(name, func(t *testing.T) {
			ended(t, c)
			wantErr(t, "Err", c.Err(), broker.ErrClosed)
		})
	}
	wantErr(t, "ack after close", d.Ack(t.Context()), broker.ErrClosed)
	wantErr(t, "requeue after close", d.Requeue(t.Context()), broker.ErrClosed)
	if got := b.Consumers("work"); got != 0 {
		t.Errorf("Consumers: got %d, want 0", got)
	}
	busy.Cancel() // after Close: no effect
	if err := busy.Err(); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Err after a late Cancel: got %v, want %v", err, broker.ErrClosed)
	}
}

func TestCallsAfterCloseFail(t *testing.T) {
	b, _ := newBackend(t)
	declare(t, b, spec("work"))
	if b.Closed() {
		t.Errorf("Closed before Close: got true, want false")
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second close: got %v, want nil", err)
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"Declare", func() error { return b.Declare(t.Context(), spec("work")) }},
		{"Declare new", func() error { return b.Declare(t.Context(), spec("new")) }},
		{"Publish", func() error { return b.Publish(t.Context(), msg("work", "1", 0)) }},
		{"Hold", func() error { return b.Hold(t.Context(), msg("work", "1", 0), time.Second) }},
		{"DeadLetter", func() error {
			return b.DeadLetter(t.Context(), broker.DeadLetter{Message: msg("work", "1", 0), Reason: "r"})
		}},
		{"Consume", func() error {
			c, err := b.Consume(t.Context(), "work", 1)
			if c != nil {
				t.Errorf("Consume after close: got a consumer, want nil")
			}
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			wantErr(t, c.name, c.call(), broker.ErrClosed)
		})
	}
	counts(t, b, "work", 0, 0)
	wantIDs(t, b.Queues(), "work", "work.dead")
}

func TestAHoldThatWouldFireAfterCloseIsDropped(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	publish(t, b, msg("work", "pending", 0))
	hold(t, b, msg("work", "held", 0), 30*time.Second)
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	counts(t, b, "work", 1, 0)
	mock.Add(time.Minute)
	counts(t, b, "work", 1, 0)
}

func TestAHoldThatFiresAfterCloseDeliversNothing(t *testing.T) {
	b, mock := newBackend(t)
	declare(t, b, spec("work"))
	c, err := b.Consume(t.Context(), "work", 1)
	if err != nil {
		t.Fatal(err)
	}
	hold(t, b, msg("work", "held", 0), time.Second)
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	mock.Add(time.Second)
	ended(t, c)
	if got := b.InFlight("work"); got != 0 {
		t.Errorf("InFlight: got %d, want 0", got)
	}
}

// Eight publishers and held messages released by the clock race four
// acking consumers; every message is acked exactly once, and no message is
// ever counted both held and pending.
func TestConcurrentPublishConsumeAndHold(t *testing.T) {
	const (
		publishers = 8
		perPub     = 1000
		consumers  = 4
		holds      = 200
		total      = publishers*perPub + holds
	)
	b, mock := newBackend(t)
	declare(t, b, spec("work"))

	var (
		mu    sync.Mutex
		acked = map[string]int{}
		done  = make(chan struct{})
		cwg   sync.WaitGroup
	)
	cs := make([]broker.Consumer, consumers)
	for i := range cs {
		cs[i] = consume(t, b, "work", 1+i*3)
		cwg.Go(func() {
			for d := range cs[i].Deliveries() {
				if err := d.Ack(context.Background()); err != nil {
					t.Errorf("ack %s: %v", d.Message().ID, err)
					continue
				}
				mu.Lock()
				acked[d.Message().ID]++
				if len(acked) == total && acked[d.Message().ID] == 1 {
					close(done)
				}
				mu.Unlock()
			}
		})
	}

	var pwg sync.WaitGroup
	for p := range publishers {
		pwg.Go(func() {
			for i := range perPub {
				m := msg("work", fmt.Sprintf("p%d-%d", p, i), uint8(i%11))
				if err := b.Publish(context.Background(), m); err != nil {
					t.Errorf("publish %s: %v", m.ID, err)
					return
				}
			}
		})
	}

	check := func(when string) {
		pending := b.Pending("work")
		held := b.Held("work")
		if pending+held > total {
			t.Errorf("%s: got pending %d + held %d = %d, want at most %d", when, pending, held, pending+held, total)
		}
	}
	for i := range holds {
		ttl := time.Duration(i%10+1) * 100 * time.Millisecond
		if err := b.Hold(t.Context(), msg("work", fmt.Sprintf("h-%d", i), uint8(i%3)), ttl); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		if i%10 == 9 {
			mock.Add(100 * time.Millisecond)
			check(fmt.Sprintf("after hold %d", i))
		}
	}
	pwg.Wait()
	mock.Add(time.Second) // everything held is due
	check("at the end")

	select {
	case <-done:
	case <-time.After(30 * time.Second):
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		t.Fatalf("got %d distinct messages acked, want %d (pending %d, held %d, in flight %d)",
			n, total, b.Pending("work"), b.Held("work"), b.InFlight("work"))
	}
	for _, c := range cs {
		c.Cancel()
	}
	cwg.Wait()

	for id, n := range acked {
		if n != 1 {
			t.Errorf("message %s: got %d acks, want 1", id, n)
		}
	}
	if got := b.AckedCount("work"); got != total {
		t.Errorf("AckedCount: got %d, want %d", got, total)
	}
	counts(t, b, "work", 0, 0)
	if got := b.InFlight("work"); got != 0 {
		t.Errorf("InFlight: got %d, want 0", got)
	}
}

func TestAckedKeepsOnlyTheNewest(t *testing.T) {
	b := memory.New(&memory.Options{KeepAcked: 3})
	ctx := t.Context()
	if err := b.Declare(ctx, broker.QueueSpec{Name: "keep", Durable: true}); err != nil {
		t.Fatal(err)
	}
	c, err := b.Consume(ctx, "keep", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cancel()
	for i := range 10 {
		if err := b.Publish(ctx, broker.Message{Queue: "keep", ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		if err := (<-c.Deliveries()).Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for _, m := range b.Acked("keep") {
		ids = append(ids, m.ID)
	}
	if got := strings.Join(ids, ","); got != "7,8,9" {
		t.Errorf("acked: got %s, want 7,8,9", got)
	}
	if got := b.AckedCount("keep"); got != 10 {
		t.Errorf("AckedCount: got %d, want 10", got)
	}

	// The bound is over all queues: acks on another queue push these out.
	if err := b.Declare(ctx, broker.QueueSpec{Name: "other", Durable: true}); err != nil {
		t.Fatal(err)
	}
	other, err := b.Consume(ctx, "other", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Cancel()
	for i := range 2 {
		if err := b.Publish(ctx, broker.Message{Queue: "other", ID: fmt.Sprint("o", i)}); err != nil {
			t.Fatal(err)
		}
		if err := (<-other.Deliveries()).Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.Acked("keep"); len(got) != 1 || got[0].ID != "9" {
		t.Errorf("acked on keep after two acks on other: got %v, want only 9", got)
	}
	if got := b.Acked("other"); len(got) != 2 || got[0].ID != "o0" || got[1].ID != "o1" {
		t.Errorf("acked on other: got %v, want o0, o1", got)
	}
	if got := b.AckedCount("keep"); got != 10 {
		t.Errorf("AckedCount after acks on other: got %d, want 10", got)
	}
	none := memory.New(&memory.Options{KeepAcked: -1})
	if err := none.Declare(ctx, broker.QueueSpec{Name: "none"}); err != nil {
		t.Fatal(err)
	}
	c, err = none.Consume(ctx, "none", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cancel()
	if err := none.Publish(ctx, broker.Message{Queue: "none", ID: "only"}); err != nil {
		t.Fatal(err)
	}
	if err := (<-c.Deliveries()).Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if got := none.Acked("none"); len(got) != 0 {
		t.Errorf("KeepAcked -1: got %v", got)
	}
	if got := none.AckedCount("none"); got != 1 {
		t.Errorf("KeepAcked -1, AckedCount: got %d, want 1", got)
	}
	if got := none.AckedCount("no-such-queue"); got != 0 {
		t.Errorf("AckedCount of an unknown queue: got %d, want 0", got)
	}
}

// A queue's MessageTTL (x-message-ttl) drops what waited on it longer, as
// RabbitMQ does: the work queue has no dead-letter exchange, so an expired
// message is gone. A message taken up in time does not expire while it
// is in flight, and one given back keeps its first expiry.
func TestMessageTTLDropsWhatWaitedTooLong(t *testing.T) {
	b, mock := newBackend(t)
	ctx := t.Context()
	if err := b.Declare(ctx, broker.QueueSpec{Name: "ttl", MessageTTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	publish := func(id string) {
		if err := b.Publish(ctx, broker.Message{Queue: "ttl", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	publish("old")
	mock.Add(6 * time.Second)
	publish("young")
	mock.Add(5 * time.Second) // old waited 11 s, young 5 s
	if got := b.Pending("ttl"); got != 1 {
		t.Errorf("pending: got %d, want 1 (old expired)", got)
	}
	if n, err := b.Depth(ctx, "ttl"); err != nil || n != 1 {
		t.Errorf("depth: got %d, %v, want 1", n, err)
	}
	c, err := b.Consume(ctx, "ttl", 1)
	if err != nil {
		t.Fatal(err)
	}
	d := <-c.Deliveries()
	if d.Message().ID != "young" {
		t.Fatalf("delivered %q, want young", d.Message().ID)
	}
	mock.Add(10 * time.Second) // in flight: it does not expire
	if err := d.Requeue(ctx); err != nil {
		t.Fatal(err)
	}
	// Given back after its expiry (it landed 15 s ago): dropped.
	if got := b.Pending("ttl"); got != 0 {
		t.Errorf("pending after the requeue: got %d, want 0", got)
	}
	publish("new")
	select {
	case d := <-c.Deliveries():
		if d.Message().ID != "new" {
			t.Errorf("delivered %q, want new", d.Message().ID)
		}
	default:
		t.Error("a fresh message was not delivered")
	}
	c.Cancel()
}

// A ctx made by clock.Mock's WithTimeout reads its error without the lock
// its timer writes it under (benbjohnson/clock v1.3.5): the backend asks
// whether a ctx has ended by its Done channel first, so that a timeout
// that fires as a call begins is no data race under go test -race.
func TestACallWhoseMockTimeoutFiresAsItBeginsIsNoRace(t *testing.T) {
	b, mock := newBackend(t)
	if err := b.Declare(t.Context(), spec("q")); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		ctx, cancel := mock.WithTimeout(context.Background(), time.Second)
		moved := make(chan struct{})
		go func() { mock.Add(time.Second); close(moved) }()
		err := b.Publish(ctx, broker.Message{Queue: "q", ID: fmt.Sprint(i), Body: []byte("{}")})
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("publish %d: %v; want nil or its ctx's deadline", i, err)
		}
		<-moved
		cancel()
	}
}
