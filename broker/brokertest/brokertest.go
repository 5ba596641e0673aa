// Package brokertest is the conformance suite every broker.Backend must
// pass: the behaviour queuey relies on, written once against the interface
// and run unchanged against the memory backend and a real RabbitMQ.
//
// A backend's test calls Run with a Config that makes fresh backends:
//
//	func TestConformance(t *testing.T) {
//		brokertest.Run(t, brokertest.Config{
//			New:    func(t *testing.T) broker.Backend { return memory.New(nil) },
//			Bubble: true,
//		})
//	}
//
// The tests wait for hold queues with ordinary timers. Inside a
// testing/synctest bubble (Config.Bubble) those waits are virtual and the
// suite runs in milliseconds; against a real broker they are real, and kept
// to a few seconds in all.
package brokertest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey/broker"
)

// Config says how to test one backend.
type Config struct {
	// New returns a fresh, connected backend. The suite closes it.
	New func(t *testing.T) broker.Backend
	// Bubble runs each test inside a testing/synctest bubble, for a backend
	// whose timers run on the process's clock (memory.New with the real
	// clock), so that hold TTLs pass in virtual time.
	Bubble bool
	// Cleanup, when set, deletes the queues a test declared or held into,
	// on a real broker. It is called after the backend is closed.
	Cleanup func(t *testing.T, queues []string)
	// Type is the topology the suite declares its queues with: Classic
	// (the zero value) or Quorum (quorum queues are always durable, so
	// every queue is then declared durable).
	Type broker.QueueType
	// Slack is how long past a hold's TTL the suite waits for the release
	// (a real broker expires messages a little late). Default 2 s.
	Slack time.Duration
}

// env is one test's backend and the names it used.
type env struct {
	t       *testing.T
	b       broker.Backend
	prefix  string
	created []string
	slack   time.Duration
	qtype   broker.QueueType
}

// queue returns a unique queue name for this test and remembers it (and its
// dead-letter queue) for cleanup.
func (e *env) queue(name string) string {
	q := e.prefix + "." + name
	e.created = append(e.created, q, broker.DeadQueueName(q))
	if e.qtype == broker.Quorum {
		e.created = append(e.created, broker.LaneQueueName(q))
	}
	return q
}

// topology is spec on the suite's topology (Config.Type).
func (e *env) topology(spec broker.QueueSpec) broker.QueueSpec {
	spec.Type = e.qtype
	if e.qtype == broker.Quorum {
		spec.Durable = true
	}
	return spec
}

// declare declares specs on the suite's topology.
func (e *env) declare(specs ...broker.QueueSpec) {
	e.t.Helper()
	for i := range specs {
		specs[i] = e.topology(specs[i])
	}
	if err := e.b.Declare(e.t.Context(), specs...); err != nil {
		e.t.Fatalf("declare: %v", err)
	}
}

func (e *env) publish(msgs ...broker.Message) {
	e.t.Helper()
	for _, m := range msgs {
		if err := e.b.Publish(e.t.Context(), m); err != nil {
			e.t.Fatalf("publish %s: %v", m.ID, err)
		}
	}
}

func (e *env) hold(m broker.Message, ttl time.Duration) {
	e.t.Helper()
	e.created = append(e.created, broker.HoldQueueName(m.Queue, ttl))
	if err := e.b.DeclareHold(e.t.Context(), m.Queue, ttl); err != nil {
		e.t.Fatalf("declare the hold of %s for %v: %v", m.ID, ttl, err)
	}
	if err := e.b.Hold(e.t.Context(), m, ttl); err != nil {
		e.t.Fatalf("hold %s for %v: %v", m.ID, ttl, err)
	}
}

func (e *env) consume(queue string, prefetch int) broker.Consumer {
	e.t.Helper()
	c, err := e.b.Consume(e.t.Context(), queue, prefetch)
	if err != nil {
		e.t.Fatalf("consume %q: %v", queue, err)
	}
	e.t.Cleanup(c.Cancel)
	return c
}

// recv waits up to within for the next delivery.
func (e *env) recv(c broker.Consumer, within time.Duration) broker.Delivery {
	e.t.Helper()
	select {
	case d, ok := <-c.Deliveries():
		if !ok {
			e.t.Fatalf("consumer ended: %v", c.Err())
		}
		return d
	case <-time.After(within):
		e.t.Fatalf("no delivery within %v", within)
		return nil
	}
}

// none checks that nothing is delivered for d.
func (e *env) none(c broker.Consumer, d time.Duration) {
	e.t.Helper()
	select {
	case got, ok := <-c.Deliveries():
		if ok {
			e.t.Fatalf("unexpected delivery %s (%s)", got.Message().ID, got.Message().Body)
		}
	case <-time.After(d):
	}
}

func (e *env) ack(d broker.Delivery) {
	e.t.Helper()
	if err := d.Ack(e.t.Context()); err != nil {
		e.t.Fatalf("ack %s: %v", d.Message().ID, err)
	}
}

// ids receives n deliveries, acks them, and returns their ids in order.
func (e *env) ids(c broker.Consumer, n int) []string {
	e.t.Helper()
	var out []string
	for range n {
		d := e.recv(c, e.slack)
		out = append(out, d.Message().ID)
		e.ack(d)
	}
	return out
}

// msg builds a message for queue with an id derived from name.
func msg(queue, name string, priority uint8) broker.Message {
	return broker.Message{
		Queue:    queue,
		ID:       name,
		Type:     "conformance",
		Priority: priority,
		Attempt:  1,
		Body:     []byte(fmt.Sprintf(`{"name":%q}`, name)),
	}
}

// Run runs the suite as subtests of t.
func Run(t *testing.T, cfg Config) {
	if cfg.New == nil {
		t.Fatal("brokertest: Config.New is required")
	}
	for _, tc := range slices.Concat(tests, broadcastTests, cancelTests) {
		t.Run(tc.name, func(t *testing.T) { runOne(t, cfg, tc.run) })
	}
	for _, tc := range keyTests {
		t.Run(tc.name, func(t *testing.T) {
			runOne(t, cfg, func(e *env) {
				k, ok := e.b.(broker.KeyLocker)
				if !ok {
					t.Fatalf("%T keeps no uniqueness keys: unique jobs need a broker.KeyLocker", e.b)
				}
				tc.run(e, k)
			})
		})
	}
}

// runOne runs one test of the suite on a fresh backend.
func runOne(t *testing.T, cfg Config, run func(e *env)) {
	t.Parallel() // each test has a backend and queues of its own
	body := func(t *testing.T) {
		e := &env{t: t, b: cfg.New(t), prefix: "qt." + randomHex(), slack: cfg.Slack, qtype: cfg.Type}
		if e.slack == 0 {
			e.slack = 2 * time.Second
		}
		t.Cleanup(func() {
			if err := e.b.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			if cfg.Cleanup != nil {
				cfg.Cleanup(t, e.created)
			}
		})
		run(e)
	}
	if cfg.Bubble {
		synctest.Test(t, body)
	} else {
		body(t)
	}
}

func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func wantIDs(t *testing.T, got []string, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delivery order differs (-want +got):\n%s", diff)
	}
}

// wantPriorityOrder checks the order of a priority queue's deliveries to
// a consumer with a prefetch of 1: want, whose first lanes have a
// priority, the highest first, FIFO within each level. On a quorum queue
// those are on the lane, which the consumer prefers among what the
// broker has sent it; the broker sends the lane's next one only after a
// round of its log, so a backlog delivery already there may go first.
// There each queue must be FIFO, and the lane's k-th delivery come
// within the first 2k+2: it overtakes the backlog, one for one at worst.
func (e *env) wantPriorityOrder(got []string, lanes int, want ...string) {
	e.t.Helper()
	if e.qtype != broker.Quorum {
		wantIDs(e.t, got, want...)
		return
	}
	pos := map[string]int{}
	for i, id := range got {
		pos[id] = i
	}
	for i, id := range want {
		at, ok := pos[id]
		switch {
		case !ok:
			e.t.Errorf("deliveries %v: %s is missing", got, id)
		case i < lanes && at > 2*i+1:
			e.t.Errorf("deliveries %v: %s came at %d, behind more than one backlog delivery per lane delivery (want %v)", got, id, at, want)
		case i > 0 && i != lanes && at < pos[want[i-1]]:
			e.t.Errorf("deliveries %v: %s went before %s, out of FIFO order (want %v)", got, id, want[i-1], want)
		}
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
