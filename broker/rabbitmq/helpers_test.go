package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// unique returns a queue-name prefix no other test uses.
func unique(name string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return "qt." + name + "." + hex.EncodeToString(b)
}

// rabbitmqctl runs a broker command with a timeout and returns its output.
func rabbitmqctl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// queueInfo is one row of `rabbitmqctl list_queues name arguments durable messages consumers`.
type queueInfo struct {
	Name      string
	Arguments map[string]any
	Durable   bool
	Messages  int
	Consumers int
}

// listQueues reads back the queues whose names start with prefix. A
// queue being declared or deleted shows its counts as "" for a moment: the
// listing is read again if one of prefix's does.
func listQueues(t *testing.T, prefix string) map[string]queueInfo {
	t.Helper()
	for try := 1; ; try++ {
		out := rabbitmqctl(t, "list_queues", "name", "arguments", "durable", "messages", "consumers", "--formatter", "json", "--quiet")
		got, err := queuesIn(out, prefix)
		if errors.Is(err, errQueueInTransit) && try < 10 {
			continue
		}
		if err != nil {
			t.Fatalf("list_queues output: %v\n%s", err, out)
		}
		return got
	}
}

// errQueueInTransit: a queue of the prefix asked for was listed without
// its counts (being declared or deleted).
var errQueueInTransit = errors.New("a queue is listed without its counts")

// queuesIn reads the queues whose names start with prefix out of
// list_queues' JSON, out.
func queuesIn(out, prefix string) (map[string]queueInfo, error) {
	var rows []struct {
		Name      string          `json:"name"`
		Arguments [][]any         `json:"arguments"`
		Durable   bool            `json:"durable"`
		Messages  json.RawMessage `json:"messages"`
		Consumers json.RawMessage `json:"consumers"`
	}
	if err := json.Unmarshal([]byte(out[max(strings.Index(out, "["), 0):]), &rows); err != nil {
		return nil, err
	}
	got := map[string]queueInfo{}
	for _, r := range rows {
		if !strings.HasPrefix(r.Name, prefix) {
			continue
		}
		info := queueInfo{Name: r.Name, Arguments: map[string]any{}, Durable: r.Durable}
		if json.Unmarshal(r.Messages, &info.Messages) != nil || json.Unmarshal(r.Consumers, &info.Consumers) != nil {
			return nil, fmt.Errorf("%w: %s", errQueueInTransit, r.Name)
		}
		for _, a := range r.Arguments { // [name, type, value]
			info.Arguments[a[0].(string)] = a[2]
		}
		got[r.Name] = info
	}
	return got, nil
}

// A queue of another test, listed while it is deleted, is no reason to
// fail; one of the prefix asked for is read again.
func TestQueuesInSkipsQueuesOfOthersInTransit(t *testing.T) {
	out := `[
{"name":"qt.other.q1.dead","arguments":[],"durable":true,"messages":"","consumers":""}
,{"name":"qt.mine.work","arguments":[["x-max-priority","long",10]],"durable":true,"messages":3,"consumers":1}
]`
	got, err := queuesIn(out, "qt.mine")
	if err != nil {
		t.Fatalf("queuesIn: %v; want qt.mine's queues, another's in transit skipped", err)
	}
	want := queueInfo{Name: "qt.mine.work", Arguments: map[string]any{"x-max-priority": 10.0}, Durable: true, Messages: 3, Consumers: 1}
	if diff := cmp.Diff(map[string]queueInfo{"qt.mine.work": want}, got); diff != "" {
		t.Errorf("queuesIn (-want +got):\n%s", diff)
	}
	if _, err := queuesIn(out, "qt.other"); !errors.Is(err, errQueueInTransit) {
		t.Errorf("queuesIn of a prefix whose queue is in transit: %v; want errQueueInTransit", err)
	}
}

// deletePrefixed deletes every queue whose name starts with prefix: one
// listing by rabbitmqctl, the deletes over AMQP (a rabbitmqctl call starts
// an Erlang VM, which tests in parallel cannot afford one per queue).
func deletePrefixed(t *testing.T, prefix string) {
	t.Helper()
	var names []string
	for name := range listQueues(t, prefix) {
		names = append(names, name)
	}
	rabbittest.DeleteQueues(t, names...)
}

// rabbitmqOptionsFewChannels puts many publishes on each confirm channel of
// the pool.
var rabbitmqOptionsFewChannels = rabbitmq.Options{PublishChannels: 2}

// rawChannel is a channel of a plain amqp091 connection of the test's
// own, as another program would have; it is closed when the test ends.
func rawChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	return rabbitmq.RawChannel(t, rabbittest.URL())
}

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
	ID string `json:"id"`
	To string `json:"to,omitempty"`
}

func (workJob) Kind() string { return "work" }
func (j workJob) Queue() queuey.Queue {
	if j.To == "" {
		return queuey.Queue{Name: "work"}
	}
	return queuey.Queue{Name: j.To}
}

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

// heldIn is how many messages the hold queue of q for ttl has, as raw
// sees it.
func heldIn(t *testing.T, raw *amqp.Channel, q string, ttl time.Duration) int {
	t.Helper()
	held, err := raw.QueueDeclarePassive(broker.HoldQueueName(q, ttl), false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return held.Messages
}
