// Package rabbittest is what tests against a real RabbitMQ share: the
// broker's URL, a dial that says how to get a broker when there is none,
// the deletion of the queues a test made, and the CPU time of the
// broker's node for benchmarks.
package rabbittest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker/rabbitmq"
)

// NeedsBroker is added to a failure to reach the broker: without one the
// tests fail, rather than skip, and say how to get one.
const NeedsBroker = "these tests need RabbitMQ: start a local one with " +
	"`rabbitmq-server -detached && rabbitmqctl await_startup`, or set QUEUEY_AMQP_URL to one that runs elsewhere"

// URL is the broker the tests use: QUEUEY_AMQP_URL, or the local one.
func URL() string {
	return cmp.Or(os.Getenv("QUEUEY_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
}

// Dial connects a backend to URL within 10 s, or fails the test.
func Dial(t testing.TB, opts *rabbitmq.Options) *rabbitmq.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := rabbitmq.Dial(ctx, URL(), opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, NeedsBroker)
	}
	return b
}

// DeleteQueues deletes queues, whatever they hold, on a connection of its
// own. A queue already gone (a hold queue expires by itself) is fine; any
// other failure is reported on t.
func DeleteQueues(t testing.TB, queues ...string) {
	t.Helper()
	conn, err := amqp.Dial(URL())
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	for _, q := range queues {
		ch, err := conn.Channel() // a failed delete closes its channel
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		_, err = ch.QueueDelete(q, false, false, false)
		var ae *amqp.Error
		if err != nil && !(errors.As(err, &ae) && ae.Code == amqp.NotFound) {
			t.Errorf("cleanup: delete %s: %v", q, err)
		}
		_ = ch.Close()
	}
}

// NodeCPU returns a reader of the CPU time, user and system, that the
// broker's node has used so far: its OS process, as the management API on
// 127.0.0.1:15672 names it, read from /proc. The node must run on this
// host, on Linux; t fails otherwise.
func NodeCPU(t testing.TB) func() time.Duration {
	t.Helper()
	pid := nodePID(t)
	return func() time.Duration {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("the broker node's CPU: %v (is it on this host?)", err)
		}
		// Fields after the command's closing parenthesis: state is the
		// first, utime the 12th and stime the 13th, in clock ticks.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(u+st) * time.Second / 100 // USER_HZ
	}
}

// nodePID is the OS process of the broker's node, as its management API
// says.
func nodePID(t testing.TB) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:15672/api/nodes?columns=os_pid", nil)
	req.SetBasicAuth("guest", "guest")
	req.Close = true // no connection is kept: tests look for goroutines left behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []struct {
		PID string `json:"os_pid"`
	}
	// A plugin enabled a moment ago lists [[]] until its first statistics.
	if err := json.Unmarshal(body, &nodes); err != nil || len(nodes) == 0 || nodes[0].PID == "" {
		t.Fatalf("the broker's node: the management API answered %d %.200q, with no os_pid "+
			"(enabled a moment ago? it lists its node within seconds)", resp.StatusCode, body)
	}
	pid, _ := strconv.Atoi(nodes[0].PID)
	return pid
}
