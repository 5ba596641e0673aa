package inspect_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/inspect"
)

var set = queuey.QueueSet{Prefix: "app", Queues: []queuey.Queue{{Name: "emails"}, {Name: "api"}}}

// populate gives app.emails 3 ready messages, 1 held by a consumer, 2 in
// a hold queue of 30 s, 1 dead letter and 1 suspect; app.api nothing.
func populate(t *testing.T, b broker.Backend) {
	t.Helper()
	ctx := t.Context()
	emails := "app.emails"
	specs := []broker.QueueSpec{{Name: emails, MaxPriority: 10, Durable: true}, {Name: "app.api", MaxPriority: 10, Durable: true},
		{Name: broker.SuspectQueueName(emails), Durable: true, Plain: true}}
	if err := b.Declare(ctx, specs...); err != nil {
		t.Fatal(err)
	}
	msg := func(q string) broker.Message { return broker.Message{Queue: q, ID: "j", Type: "k", Body: []byte(`{}`)} }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		must(b.Publish(ctx, msg(emails)))
	}
	for range 2 {
		must(b.Hold(ctx, msg(emails), 30*time.Second))
	}
	must(b.DeadLetter(ctx, broker.DeadLetter{Message: msg(emails), Reason: "fatal"}))
	must(b.Publish(ctx, msg(broker.SuspectQueueName(emails))))
	c, err := b.Consume(ctx, emails, 1)
	must(err)
	t.Cleanup(c.Stop)
	select {
	case <-c.Deliveries(): // held, unacked, until the consumer stops
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
}

func TestTheMemoryBackendTellsEverythingWithoutABrokerRequest(t *testing.T) {
	b := memory.New(&memory.Options{Clock: clock.NewMock()})
	defer b.Close()
	populate(t, b)
	snap, err := inspect.For(b, &inspect.Management{URL: "http://127.0.0.1:1"}).Inspect(t.Context(), inspect.Names(set))
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Complete || snap.Requests != 0 || len(snap.Limits) != 0 {
		t.Errorf("Complete, Requests, Limits = %v, %d, %q; want true, 0, none", snap.Complete, snap.Requests, snap.Limits)
	}
	want := []inspect.Depth{
		{Queue: "emails", BrokerName: "app.emails", Type: "classic", Ready: 3, Unacked: 1, Consumers: 1, Held: 2, Dead: 1, Suspects: 1},
		{Queue: "api", BrokerName: "app.api", Type: "classic"},
	}
	if diff := cmp.Diff(want, snap.Depths(set)); diff != "" {
		t.Errorf("Depths (-want +got):\n%s", diff)
	}
}

// countingBackend counts Depth calls.
type countingBackend struct {
	broker.Backend
	calls int
	fail  error
}

func (c *countingBackend) Depth(ctx context.Context, q string) (int, error) {
	c.calls++
	if c.fail != nil {
		return 0, c.fail
	}
	return c.Backend.Depth(ctx, q)
}

func TestWithoutTheManagementAPIEachQueueCostsThreeDepthCalls(t *testing.T) {
	mem := memory.New(&memory.Options{Clock: clock.NewMock()})
	defer mem.Close()
	populate(t, mem)
	b := &countingBackend{Backend: mem}
	snap, err := inspect.For(b, nil).Inspect(t.Context(), inspect.Names(set))
	if err != nil {
		t.Fatal(err)
	}
	if b.calls != 6 || snap.Requests != 6 || snap.Complete {
		t.Errorf("calls, Requests, Complete = %d, %d, %v; want 6, 6, false", b.calls, snap.Requests, snap.Complete)
	}
	if diff := cmp.Diff([]string{inspect.WithoutManagement}, snap.Limits); diff != "" {
		t.Errorf("Limits (-want +got):\n%s", diff)
	}
	// app.api's suspects queue was never declared: unknown, not 0, since
	// a look that is not complete cannot tell a missing queue from one
	// not asked for; its dead-letter queue is declared with it.
	want := []inspect.Depth{
		{Queue: "emails", BrokerName: "app.emails", Ready: 3, Unacked: -1, Consumers: -1, Held: -1, Dead: 1, Suspects: 1},
		{Queue: "api", BrokerName: "app.api", Unacked: -1, Consumers: -1, Held: -1, Suspects: -1},
	}
	if diff := cmp.Diff(want, snap.Depths(set)); diff != "" {
		t.Errorf("Depths (-want +got):\n%s", diff)
	}
}

func TestADepthCallThatFailsFailsTheLook(t *testing.T) {
	mem := memory.New(nil)
	defer mem.Close()
	boom := errors.New("connection lost")
	_, err := inspect.For(&countingBackend{Backend: mem, fail: boom}, nil).Inspect(t.Context(), inspect.Names(set))
	if !errors.Is(err, boom) {
		t.Errorf("Inspect: got %v, want %v", err, boom)
	}
}
