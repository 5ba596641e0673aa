package rabbitmq_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// ledgerOf returns prefix's ledger and roll, deleted when the test ends
// (after the backend, closed by a defer, is).
func ledgerOf(t *testing.T, prefix string) (ledger, roll string) {
	t.Helper()
	ledger, roll = broker.CancelLedgerName(prefix), broker.CancelFollowersName(prefix)
	t.Cleanup(func() { rabbittest.DeleteQueues(t, ledger, roll) })
	return ledger, roll
}

// readRecords reads n records from l, each within 5 s.
func readRecords(t *testing.T, l broker.Listener, n int) []string {
	t.Helper()
	var got []string
	for range n {
		select {
		case m, ok := <-l.Messages():
			if !ok {
				t.Fatalf("the follower ended after %d records: %v", len(got), l.Err())
			}
			got = append(got, string(m))
		case <-time.After(5 * time.Second):
			t.Fatalf("read %d records, then nothing within 5s", len(got))
		}
	}
	return got
}

// The ledger is a durable stream, bounded in age and size; its roll is a
// classic, non-durable queue that expires, consumed by each follower.
func TestALedgerIsAStreamItsFollowersAreOnARoll(t *testing.T) {
	t.Parallel()
	prefix := unique("ledger")
	ledger, roll := ledgerOf(t, prefix)
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	f, err := b.FollowCancels(t.Context(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	queues := listQueues(t, ledger)
	for name, info := range listQueues(t, prefix) {
		queues[name] = info
	}
	if !queues[ledger].Durable {
		t.Errorf("the ledger %s is not durable", ledger)
	}
	want := map[string]any{"x-queue-type": "stream", "x-max-age": "2233884s",
		"x-max-length-bytes": float64(256 << 20), "x-stream-max-segment-size-bytes": float64(8 << 20)}
	for k, v := range want {
		if got := queues[ledger].Arguments[k]; got != v {
			t.Errorf("ledger argument %s: %v, want %v", k, got, v)
		}
	}
	if queues[roll].Durable || queues[roll].Arguments["x-expires"] != float64(60000) || queues[roll].Arguments["x-queue-type"] != "classic" {
		t.Errorf("the roll %s: durable %t, arguments %v; want a classic, non-durable queue with x-expires 60000",
			roll, queues[roll].Durable, queues[roll].Arguments)
	}
	if n := queues[roll].Consumers; n != 1 {
		t.Errorf("the roll has %d consumers, want 1", n)
	}
}

// A follower whose connection the broker closes ends with
// ErrConnectionLost; following again, on the next connection, reads the
// ledger from the start.
func TestAFollowerEndsWithItsConnectionAndFollowsAgainFromTheStart(t *testing.T) {
	t.Parallel()
	name := unique("lostfollower")
	ledgerOf(t, name)
	b := rabbittest.Dial(t, &rabbitmq.Options{ConnectionName: name, ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	defer b.Close()
	ctx := t.Context()
	for _, body := range []string{"a", "b"} {
		if err := b.AppendCancel(ctx, name, []byte(body), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	f, err := b.FollowCancels(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := readRecords(t, f, 2); strings.Join(got, ",") != "a,b" {
		t.Fatalf("read %v, want [a b]", got)
	}

	closeConnection(t, name)
	select {
	case _, ok := <-f.Messages():
		if ok {
			t.Fatal("a record after the connection was closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower did not end with its connection")
	}
	if !errors.Is(f.Err(), rabbitmq.ErrConnectionLost) {
		t.Errorf("Err: %v, want ErrConnectionLost", f.Err())
	}

	again, err := b.FollowCancels(ctx, name) // waits for the next connection
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := b.AppendCancel(ctx, name, []byte("c"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := readRecords(t, again, 3); strings.Join(got, ",") != "a,b,c" {
		t.Errorf("read %v after following again, want [a b c]", got)
	}
}

// A follower whose reader does not read drops nothing: the broker stops
// sending it, and it reads everything once its reader does.
func TestAFollowerThatIsNotReadDropsNothing(t *testing.T) {
	t.Parallel()
	prefix := unique("slowfollower")
	ledgerOf(t, prefix)
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	ctx := t.Context()
	f, err := b.FollowCancels(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const records = 600 // more than the follower's buffer and its prefetch together (512)
	for i := range records {
		if err := b.AppendCancel(ctx, prefix, fmt.Appendf(nil, "%d", i), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for i, got := range readRecords(t, f, records) {
		if got != fmt.Sprint(i) {
			t.Fatalf("record %d reads %q: a follower keeps every record, in order", i, got)
		}
	}
}

// A prefix whose ledger or roll RabbitMQ cannot name is refused before
// anything is sent.
func TestALedgerRabbitMQCannotNameIsRefused(t *testing.T) {
	t.Parallel()
	b := rabbittest.Dial(t, nil)
	defer b.Close()
	ctx := t.Context()
	// Its roll is one byte over 255.
	long := "qt." + strings.Repeat("x", broker.MaxNameBytes-len(".cancellations.followers")-len("qt.")+1)
	for _, prefix := range []string{long, "amq", "qt.\xff"} {
		err := b.AppendCancel(ctx, prefix, []byte("x"), time.Hour)
		if !errors.Is(err, broker.ErrInvalidName) {
			t.Errorf("append to %.20q…: %v, want ErrInvalidName", prefix, err)
		}
		_, err = b.FollowCancels(ctx, prefix)
		if !errors.Is(err, broker.ErrInvalidName) {
			t.Errorf("follow %.20q…: %v, want ErrInvalidName", prefix, err)
		}
		_, err = b.CancelFollowers(ctx, prefix)
		if !errors.Is(err, broker.ErrInvalidName) {
			t.Errorf("count the followers of %.20q…: %v, want ErrInvalidName", prefix, err)
		}
	}
	if queues := listQueues(t, long); len(queues) != 0 {
		t.Errorf("queues declared for a refused ledger: %v", queues)
	}
}

// A follower whose roll or stream is deleted ends, with
// ErrConsumerCancelled: one the roll no longer counts, or that reads no
// ledger, must not go on.
func TestAFollowerEndsWhenItsRollOrStreamIsDeleted(t *testing.T) {
	t.Parallel()
	for _, which := range []string{"roll", "stream"} {
		t.Run(which, func(t *testing.T) {
			prefix := unique("deleted" + which)
			ledger, roll := ledgerOf(t, prefix)
			b := rabbittest.Dial(t, nil)
			defer b.Close()
			f, err := b.FollowCancels(t.Context(), prefix)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			gone := map[string]string{"roll": roll, "stream": ledger}[which]
			if _, err := rawChannel(t).QueueDelete(gone, false, false, false); err != nil {
				t.Fatal(err)
			}
			select {
			case _, ok := <-f.Messages():
				if ok {
					t.Fatalf("a record after the %s was deleted", which)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the follower did not end with its %s", which)
			}
			if !errors.Is(f.Err(), rabbitmq.ErrConsumerCancelled) {
				t.Errorf("Err %v, want ErrConsumerCancelled", f.Err())
			}
		})
	}
}
