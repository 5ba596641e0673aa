package rabbitmq_test

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
)

// declareAndHold makes a hold as the transport is asked to: its hold is
// declared, then msg is published into it.
func declareAndHold(ctx context.Context, b *rabbitmq.Backend, msg broker.Message, ttl time.Duration) error {
	if err := b.DeclareHold(ctx, msg.Queue, ttl); err != nil {
		return err
	}
	return b.Hold(ctx, msg, ttl)
}

// workJob is a job for a queue of a set made by workProducer: "work"
// unless To names another.
type workJob struct {
	ID  string `json:"id"`
	To  string `json:"to,omitempty"`
	Pad string `json:"pad,omitempty"`
}

func (workJob) Kind() string          { return "work" }
func (j workJob) Queue() queuey.Queue { return queuey.Queue{Name: cmp.Or(j.To, "work")} }

// workProducer is a producer for the work queues named (each
// "<prefix>.<name>", durable, priorities up to 10) that b has declared
// already: its waits go through a producer's holds, declares and checks
// included, as a user's do.
func workProducer(t *testing.T, b *rabbitmq.Backend, prefix string, names ...string) *queuey.Producer {
	t.Helper()
	set := queuey.QueueSet{Prefix: prefix}
	for _, n := range names {
		set.Queues = append(set.Queues, queuey.Queue{Name: n})
	}
	p, err := queuey.NewUndeclaredProducer(b, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// prefixOf is the prefix of a work queue named "<prefix>.work".
func prefixOf(q string) string { return strings.TrimSuffix(q, ".work") }

// The transport holds only into a hold that is there, for a work queue
// that is there: a hold queue never declared is broker.ErrNoHold, a work
// queue gone is broker.ErrNoQueue, and neither holds anything.
func TestAHoldIntoWhatIsNotThereHoldsNothing(t *testing.T) {
	t.Parallel()
	b, q := dialWithWorkQueue(t, "holdnothing")
	msg := broker.Message{Queue: q, ID: "1", Body: []byte("{}")}
	if err := b.Hold(t.Context(), msg, time.Minute); !errors.Is(err, broker.ErrNoHold) {
		t.Fatalf("Hold into a hold queue never declared: %v; want ErrNoHold", err)
	}
	if err := b.DeclareHold(t.Context(), q, time.Minute); err != nil {
		t.Fatal(err)
	}
	raw := rawChannel(t)
	if _, err := raw.QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(t.Context(), msg, time.Minute); !errors.Is(err, broker.ErrNoQueue) || errors.Is(err, broker.ErrNoHold) {
		t.Fatalf("Hold with its work queue gone: %v; want ErrNoQueue", err)
	}
	held, err := raw.QueueDeclarePassive(broker.HoldQueueName(q, time.Minute), false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if held.Messages != 0 {
		t.Errorf("the hold queue has %d messages after two holds that failed; want 0", held.Messages)
	}
}
