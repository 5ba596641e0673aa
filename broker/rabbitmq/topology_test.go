package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

type topoJob struct{}

func (topoJob) Kind() string        { return "topo" }
func (topoJob) Queue() queuey.Queue { return queuey.Queue{Name: "emails"} }

type plainJob struct{}

func (plainJob) Kind() string        { return "plain" }
func (plainJob) Queue() queuey.Queue { return queuey.Queue{Name: "plain"} }

// The topology of ARCHITECTURE.md §1 ("Waiting: hold queues"), read back
// from the broker itself.
func TestTopologyReadBackFromTheBroker(t *testing.T) {
	t.Parallel()
	prefix := unique("topo")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.Queue{
		{Name: "emails"},
		{Name: "plain", MaxPriority: queuey.NoPriorities, Transient: true},
	}}
	p, err := queuey.NewProducer(t.Context(), b, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Defer(t.Context(), topoJob{}, 29200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// Long enough that it is still held when rabbitmqctl, slow to start on
	// a loaded machine, reads the queues back.
	if _, err := p.EnqueueAfter(t.Context(), plainJob{}, 19500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	emails, plain := prefix+".emails", prefix+".plain"
	want := map[string]queueInfo{
		emails:           {Name: emails, Durable: true, Arguments: map[string]any{"x-max-priority": 10.0}},
		emails + ".dead": {Name: emails + ".dead", Durable: true, Arguments: map[string]any{}},
		emails + ".deferred.30000": {Name: emails + ".deferred.30000", Durable: true, Messages: 1, Arguments: map[string]any{
			"x-message-ttl": 30000.0, "x-expires": 60000.0, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": emails,
		}},
		plain:           {Name: plain, Durable: false, Arguments: map[string]any{}},
		plain + ".dead": {Name: plain + ".dead", Durable: true, Arguments: map[string]any{}},
		plain + ".deferred.20000": {Name: plain + ".deferred.20000", Durable: false, Messages: 1, Arguments: map[string]any{
			"x-message-ttl": 20000.0, "x-expires": 40000.0, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": plain,
		}},
	}
	got := listQueues(t, prefix)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("topology on the broker differs (-want +got):\n%s", diff)
	}
}

// A returned message is never reported as published, with many publishes
// in flight on the same channels at once.
func TestUnroutablePublishesAreNeverReportedAsSent(t *testing.T) {
	t.Parallel()
	prefix := unique("returns")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, &rabbitmqOptionsFewChannels)
	defer b.Close()
	q := prefix + ".work"
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		t.Fatal(err)
	}
	const each = 200
	var wg sync.WaitGroup
	errs := make(chan error, 8*each)
	for g := range 8 {
		wg.Go(func() {
			for i := range each {
				target, routable := q, i%2 == 0
				if !routable {
					target = prefix + ".missing"
				}
				err := b.Publish(context.Background(), broker.Message{Queue: target, ID: fmt.Sprintf("%d-%d", g, i), Body: []byte("{}")})
				switch {
				case routable && err != nil:
					errs <- fmt.Errorf("routable publish %d-%d failed: %w", g, i, err)
				case !routable && !errors.Is(err, broker.ErrUnroutable):
					errs <- fmt.Errorf("unroutable publish %d-%d: got %v, want ErrUnroutable", g, i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := listQueues(t, q)[q].Messages; got != 8*each/2 {
		t.Errorf("messages on the queue: got %d, want %d", got, 8*each/2)
	}
}

// x-expires counts declares, not publishes: feeding one hold queue for 3×
// its TTL loses nothing because it is redeclared often enough.
func TestAHoldQueueFedForThreeTTLsLosesNothing(t *testing.T) {
	t.Parallel()
	prefix := unique("feed")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	q := prefix + ".work"
	ctx := t.Context()
	if err := b.Declare(ctx, broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		t.Fatal(err)
	}
	c, err := b.Consume(ctx, q, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cancel()
	const n = 1000
	got := make(chan int, 1)
	go func() {
		seen := 0
		for d := range c.Deliveries() {
			_ = d.Ack(ctx)
			if seen++; seen == n {
				break
			}
		}
		got <- seen
	}()
	tick := time.NewTicker(3 * time.Millisecond) // 1,000 holds over about 3 s
	defer tick.Stop()
	p := workProducer(t, b, prefix, "work")
	for i := range n {
		<-tick.C
		if _, err := p.EnqueueAfter(ctx, workJob{ID: fmt.Sprint(i)}, time.Second); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
	}
	select {
	case seen := <-got:
		if seen != n {
			t.Errorf("arrived: got %d, want %d", seen, n)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("not every held message arrived within 15 s")
	}
}

// A hold queue deleted behind the backend's back is declared again on the
// next hold, not only after TTL/2.
func TestADeletedHoldQueueIsDeclaredAgainAtOnce(t *testing.T) {
	t.Parallel()
	prefix := unique("holddel")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	q := prefix + ".work"
	ctx := t.Context()
	if err := b.Declare(ctx, broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		t.Fatal(err)
	}
	p := workProducer(t, b, prefix, "work")
	if _, err := p.EnqueueAfter(ctx, workJob{ID: "1"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	rabbitmqctl(t, "delete_queue", broker.HoldQueueName(q, time.Minute))
	if _, err := p.EnqueueAfter(ctx, workJob{ID: "2"}, time.Minute); err != nil {
		t.Errorf("hold after the hold queue was deleted: %v", err)
	}
	if n := heldIn(t, rawChannel(t), q, time.Minute); n != 1 {
		t.Errorf("the hold queue declared again has %d messages; want the second job in it", n)
	}
}

// A job held while its work queue is gone (deleted by an operator, or not
// declared again yet) is not reported held for nothing: when its wait
// ended, the broker would dead-letter it to a queue that does not exist
// and drop it. The work queue is declared again, as the producer knows it.
func TestAJobHeldWhileItsWorkQueueIsGoneArrives(t *testing.T) {
	t.Parallel()
	prefix := unique("holdgone")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	set := queuey.QueueSet{Prefix: prefix, Queues: []queuey.Queue{{Name: "emails"}}, DeferGranularity: 100 * time.Millisecond}
	p, err := queuey.NewProducer(t.Context(), b, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := prefix + ".emails"
	if _, err := rawChannel(t).QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	const n = 40
	ids := map[string]int{}
	for i := range n {
		var err error
		var id string
		if i%2 == 0 {
			id, err = p.EnqueueAfter(t.Context(), topoJob{}, 200*time.Millisecond)
		} else {
			id, err = p.Defer(t.Context(), topoJob{}, 200*time.Millisecond)
		}
		if err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		ids[id] = i
	}
	c, err := b.Consume(t.Context(), q, n)
	if err != nil {
		t.Fatalf("consume the work queue: %v", err)
	}
	defer c.Cancel()
	// Each job arrives; the first may arrive twice (published again, as
	// the queue was gone when it went out).
	deadline := time.After(15 * time.Second)
	for got := map[string]bool{}; len(got) < n; {
		select {
		case d := <-c.Deliveries():
			got[d.Message().ID] = true
			_ = d.Ack(t.Context()) // a duplicate must not hold a prefetch slot
		case <-deadline:
			var missing []int
			for id, i := range ids {
				if !got[id] {
					missing = append(missing, i)
				}
			}
			t.Fatalf("%d of the %d jobs held while their work queue was gone arrived; missing: holds %v", len(got), n, missing)
		}
	}
}

// The quorum topology of ARCHITECTURE.md §1 ("Topologies"), read back
// from the broker: quorum work, dead-letter and lane queues, and the
// delay levels' arguments. (Where a wait goes through them is shown by
// the conformance suite's holds on the quorum topology; the message
// counts list_queues gives for a quorum queue lag by seconds.)
func TestQuorumTopologyReadBackFromTheBroker(t *testing.T) {
	t.Parallel()
	prefix := unique("quorumtopo")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	set := queuey.QueueSet{Prefix: prefix, Type: queuey.Quorum, Queues: []queuey.Queue{{Name: "emails"}}}
	p, err := queuey.NewProducer(t.Context(), b, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Defer(t.Context(), topoJob{}, 29200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	emails := prefix + ".emails"
	quorum := map[string]any{"x-queue-type": "quorum"}
	want := map[string]queueInfo{
		emails:            {Name: emails, Durable: true, Arguments: quorum},
		emails + ".dead":  {Name: emails + ".dead", Durable: true, Arguments: quorum},
		emails + ".first": {Name: emails + ".first", Durable: true, Arguments: quorum},
	}
	if diff := cmp.Diff(want, listQueues(t, prefix)); diff != "" {
		t.Errorf("quorum topology on the broker differs (-want +got):\n%s", diff)
	}
	level := listQueues(t, broker.DelayLevelName(4))[broker.DelayLevelName(4)]
	wantArgs := map[string]any{"x-queue-type": "quorum", "x-message-ttl": 16000.0, "x-dead-letter-exchange": broker.DelayLevelName(3),
		"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
	if diff := cmp.Diff(wantArgs, level.Arguments); diff != "" {
		t.Errorf("delay level 4: arguments (-want +got):\n%s", diff)
	}
}

// A queue declared classic and then quorum (or the other way) is refused
// with PRECONDITION_FAILED, said with the fix.
func TestChangingAQueuesTypeIsRefusedWithTheFix(t *testing.T) {
	t.Parallel()
	prefix := unique("retype")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	q := prefix + ".work"
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, Durable: true}); err != nil {
		t.Fatal(err)
	}
	err := b.Declare(t.Context(), broker.QueueSpec{Name: q, Durable: true, Type: broker.Quorum})
	if !errors.Is(err, broker.ErrPreconditionFailed) || !strings.Contains(err.Error(), "Type to match") {
		t.Errorf("declaring a classic queue as quorum: %v; want ErrPreconditionFailed with the fix", err)
	}
}

// A delay level deleted behind the backend's back (its queue, by hand) is
// declared again by the next hold into it, and the held job arrives.
func TestADeletedDelayLevelIsDeclaredAgain(t *testing.T) {
	t.Parallel()
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	q := unique("levelgone") + ".work"
	spec := broker.QueueSpec{Name: q, Durable: true, Type: broker.Quorum}
	if err := b.Declare(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rabbittest.DeleteQueues(t, q, broker.DeadQueueName(q)) })
	if _, err := rawChannel(t).QueueDelete(broker.DelayLevelName(0), false, false, false); err != nil {
		t.Fatal(err)
	}
	msg := broker.Message{Queue: q, ID: broker.NewJobID(), Type: "t", Attempt: 1, Body: []byte(`{}`)}
	if err := b.Hold(t.Context(), msg, time.Second); !errors.Is(err, broker.ErrNoHold) { // level 0 alone
		t.Fatalf("hold with delay level 0 gone: %v; want ErrNoHold", err)
	}
	if err := declareAndHold(t.Context(), b, msg, time.Second); err != nil {
		t.Fatalf("hold after the delay levels were declared again: %v", err)
	}
	if err := firstDelivery(t, b, q, msg.ID, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// firstDelivery consumes queue and reports, as an error, when its first
// delivery is not the job id or does not come within.
func firstDelivery(t *testing.T, b *rabbitmq.Backend, queue, id string, within time.Duration) error {
	t.Helper()
	c, err := b.Consume(t.Context(), queue, 1)
	if err != nil {
		return err
	}
	defer c.Cancel()
	select {
	case d := <-c.Deliveries():
		if d.Message().ID != id {
			return fmt.Errorf("got %s, want the held job %s", d.Message().ID, id)
		}
		return nil
	case <-time.After(within):
		return fmt.Errorf("the held job did not arrive within %v", within)
	}
}

// Jobs that wait for a quorum queue deleted meanwhile go to the orphans'
// queue when their wait ends, and the level they left from goes on
// serving other queues. (Before, a level's dead-letter worker held each
// of them, unroutable, and with 32 held it took nothing more: every wait
// through that level, for every queue, was stuck for good.)
func TestWaitsForADeletedQueueGoToTheOrphansAndTheLevelGoesOn(t *testing.T) {
	t.Parallel()
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	gone, alive := unique("orphaned")+".work", unique("alive")+".work"
	for _, q := range []string{gone, alive} {
		if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, Durable: true, Type: broker.Quorum}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rabbittest.DeleteQueues(t, q, broker.DeadQueueName(q)) })
	}
	const orphans, wait = 40, 2 * time.Second // more than the worker's 32; level 1 alone
	ids := map[string]bool{}
	for range orphans { // all held within the wait: the delay levels were declared with the queues
		msg := broker.Message{Queue: gone, ID: broker.NewJobID(), Type: "t", Attempt: 1, Body: []byte(`{}`)}
		if err := b.Hold(t.Context(), msg, wait); err != nil {
			t.Fatal(err)
		}
		ids[msg.ID] = true
	}
	rabbittest.DeleteQueues(t, gone, broker.DeadQueueName(gone))
	want := broker.Message{Queue: alive, ID: broker.NewJobID(), Type: "t", Attempt: 1, Body: []byte(`{}`)}
	if err := b.Hold(t.Context(), want, wait); err != nil {
		t.Fatal(err)
	}
	if err := firstDelivery(t, b, alive, want.ID, 15*time.Second); err != nil {
		t.Fatalf("a job held 2 s behind 40 jobs for a deleted queue: %v", err)
	}
	if missing := takeOrphans(t, ids); len(missing) > 0 {
		t.Errorf("%d of the %d jobs waiting for the deleted queue are not among the orphans: %v", len(missing), orphans, missing)
	}
}

// takeOrphans reads the orphans' queue until every job of ids was taken
// (acked), or for 10 s; others' orphans are put back. It returns the ids
// not found.
func takeOrphans(t *testing.T, ids map[string]bool) []string {
	t.Helper()
	ch := rawChannel(t)
	deliveries, err := ch.Consume(broker.DelayOrphans, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	left := maps.Clone(ids)
	deadline := time.After(10 * time.Second)
	for len(left) > 0 {
		select {
		case d := <-deliveries:
			if left[d.MessageId] {
				delete(left, d.MessageId)
				_ = d.Ack(false)
			} else {
				_ = d.Nack(false, true)
			}
		case <-deadline:
			return slices.Sorted(maps.Keys(left))
		}
	}
	return nil
}
