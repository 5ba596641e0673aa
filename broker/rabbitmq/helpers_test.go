package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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

// listQueues reads back the queues whose names start with prefix.
func listQueues(t *testing.T, prefix string) map[string]queueInfo {
	t.Helper()
	out := rabbitmqctl(t, "list_queues", "name", "arguments", "durable", "messages", "consumers", "--formatter", "json", "--quiet")
	var rows []struct {
		Name      string  `json:"name"`
		Arguments [][]any `json:"arguments"`
		Durable   bool    `json:"durable"`
		Messages  int     `json:"messages"`
		Consumers int     `json:"consumers"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "["):]), &rows); err != nil {
		t.Fatalf("list_queues output: %v\n%s", err, out)
	}
	got := map[string]queueInfo{}
	for _, r := range rows {
		if !strings.HasPrefix(r.Name, prefix) {
			continue
		}
		info := queueInfo{Name: r.Name, Arguments: map[string]any{}, Durable: r.Durable, Messages: r.Messages, Consumers: r.Consumers}
		for _, a := range r.Arguments { // [name, type, value]
			info.Arguments[a[0].(string)] = a[2]
		}
		got[r.Name] = info
	}
	return got
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

// rabbitmqOptionsFewChannels puts many publishes on each confirm channel.
var rabbitmqOptionsFewChannels = rabbitmq.Options{PublishChannels: 2}

// rawChannel is a channel of a plain amqp091 connection of the test's
// own, as another program would have; it is closed when the test ends.
func rawChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(rabbittest.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}
