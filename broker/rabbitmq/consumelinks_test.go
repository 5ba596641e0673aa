package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
)

// spreadJob goes to the queue it names, q0000 when it names none.
type spreadJob struct {
	Q string `json:"q"`
}

func (spreadJob) Kind() string { return "spread" }
func (j spreadJob) Queue() queuey.Queue {
	if j.Q == "" {
		return queuey.Queue{Name: "q0000"}
	}
	return queuey.Queue{Name: j.Q}
}

// spreadRig is a worker of n queues, each job of which says its queue on
// handled.
type spreadRig struct {
	t        *testing.T
	prefix   string
	names    []string
	producer *queuey.Producer
	handled  chan string
	stop     context.CancelFunc
	ran      chan error
}

// newSpreadRig runs a worker of n queues on a backend dialed with opts,
// until the test ends.
func newSpreadRig(t *testing.T, n int, opts *rabbitmq.Options) *spreadRig {
	t.Helper()
	r := &spreadRig{t: t, prefix: unique("spread"), handled: make(chan string, 4*n)}
	t.Cleanup(func() { deletePrefixed(t, r.prefix) })
	b := rabbittest.Dial(t, opts)
	t.Cleanup(func() { _ = b.Close() })
	set := queuey.QueueSet{Prefix: r.prefix}
	for i := range n {
		r.names = append(r.names, fmt.Sprintf("q%04d", i))
		set.Queues = append(set.Queues, queuey.Queue{Name: r.names[i], Prefetch: 1})
	}
	var err error
	if r.producer, err = queuey.NewProducer(t.Context(), b, set, nil); err != nil {
		t.Fatal(err)
	}
	w, err := queuey.NewWorker(b, set, &queuey.WorkerConfig{Concurrency: 8, Logger: opts.Logger})
	if err != nil {
		t.Fatal(err)
	}
	err = queuey.Handle(w, func(_ context.Context, j spreadJob, _ queuey.JobContext) error {
		r.handled <- j.Q
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	r.stop, r.ran = stop, make(chan error, 1)
	go func() { r.ran <- w.Run(ctx) }()
	t.Cleanup(r.shutdown)
	return r
}

func (r *spreadRig) shutdown() {
	if r.stop == nil {
		return
	}
	r.stop()
	r.stop = nil
	if err := <-r.ran; err != nil {
		r.t.Errorf("worker: %v", err)
	}
}

// roundTrip enqueues a job on every queue and waits until each has run.
func (r *spreadRig) roundTrip(within time.Duration) {
	r.t.Helper()
	jobs := make([]queuey.Job, len(r.names))
	for i, name := range r.names {
		jobs[i] = spreadJob{Q: name}
	}
	if _, err := r.producer.EnqueueBatch(r.t.Context(), jobs); err != nil {
		r.t.Fatal(err)
	}
	left := map[string]bool{}
	for _, name := range r.names {
		left[name] = true
	}
	deadline := time.After(within)
	for len(left) > 0 {
		select {
		case q := <-r.handled:
			delete(left, q)
		case <-deadline:
			r.t.Fatalf("after %v, %d of %d queues had not run their job", within, len(left), len(r.names))
		}
	}
}

// consumeConnections are the backend's consume connections, as the broker
// lists them: by connection_name, their pid and how many channels each
// has open.
func consumeConnections(t *testing.T, name string) map[string]struct {
	pid      string
	channels int
} {
	t.Helper()
	named := regexp.MustCompile(`"(` + regexp.QuoteMeta(name) + ` \(consume(?: \d+)?\))"`)
	out := map[string]struct {
		pid      string
		channels int
	}{}
	for _, line := range strings.Split(rabbitmqctl(t, "list_connections", "pid", "channels", "client_properties", "--quiet"), "\n") {
		m := named.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := strings.Fields(line)
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("list_connections: %q: %v", line, err)
		}
		out[m[1]] = struct {
			pid      string
			channels int
		}{f[0], n}
	}
	return out
}

// More queues than one connection has channels: with 50 channels a consume
// connection (one kept for the backend's own), 200 queues go over five
// connections, every one consumes, and when the broker closes one of them
// its queues come back on it. On one connection (before), 49 consumed and
// the others restarted until the worker gave up.
func TestAWorkerSpreadsItsQueuesOverConsumeConnectionsAndOneLostComesBack(t *testing.T) {
	t.Parallel()
	name := unique("spread-conn")
	opts := &rabbitmq.Options{ConnectionName: name, ReconnectMin: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	rabbitmq.SetConsumeChannelMax(opts, 50)
	const queues = 200
	r := newSpreadRig(t, queues, opts)
	r.roundTrip(60 * time.Second)

	conns := consumeConnections(t, name)
	if len(conns) != 5 {
		t.Fatalf("%d consume connections (%v), want 5: 200 consumers at 49 a connection", len(conns), conns)
	}
	total := 0
	for n, c := range conns {
		if c.channels > 50 {
			t.Errorf("%s has %d channels, more than the 50 it asked for", n, c.channels)
		}
		total += c.channels
	}
	if total != queues {
		t.Errorf("%d consumer channels over the connections, want %d", total, queues)
	}

	lost := name + " (consume 3)"
	rabbitmqctl(t, "close_connection", conns[lost].pid, "queuey test: an extra consume connection lost")
	r.roundTrip(60 * time.Second)
	after := consumeConnections(t, name)
	if after[lost].pid == "" || after[lost].pid == conns[lost].pid {
		t.Errorf("%s: pid %q after the close, was %q: not dialled again", lost, after[lost].pid, conns[lost].pid)
	}
	for q, info := range listQueues(t, r.prefix) {
		if !strings.HasSuffix(q, ".dead") && info.Consumers != 1 {
			t.Errorf("queue %s has %d consumers, want 1", q, info.Consumers)
		}
	}
}

// The finding's own case, on the broker's own channel_max (2,047): 2,100
// queues on one worker. It loads the broker that every test shares, so
// it runs only with QUEUEY_SCALE=1; the test above proves the same with
// fewer channels a connection.
func TestAWorkerConsumesMoreQueuesThanTheBrokersChannelMax(t *testing.T) {
	if os.Getenv("QUEUEY_SCALE") != "1" {
		t.Skip("2,100 queues on the shared broker; run with QUEUEY_SCALE=1 (the test above runs the same with 50 channels a connection)")
	}
	r := newSpreadRig(t, 2100, &rabbitmq.Options{ConnectionName: unique("scale"), Logger: slog.New(slog.DiscardHandler)})
	r.roundTrip(3 * time.Minute)
}

// A backend serves 16 consume connections of channel_max less one
// consumers; a worker with more queues is refused at NewWorker.
func TestAWorkerWithMoreQueuesThanTheBackendServesIsRefused(t *testing.T) {
	t.Parallel()
	b := rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = b.Close() })
	if got, want := b.MaxConsumers(), 16*2046; got != want {
		t.Errorf("MaxConsumers on the broker's channel_max: %d, want %d", got, want)
	}

	opts := &rabbitmq.Options{ConnectionName: unique("limit"), Logger: slog.New(slog.DiscardHandler)}
	rabbitmq.SetConsumeChannelMax(opts, 2) // one consumer a connection
	small := rabbittest.Dial(t, opts)
	t.Cleanup(func() { _ = small.Close() })
	if got := small.MaxConsumers(); got != 16 {
		t.Fatalf("MaxConsumers with 2 channels a connection: %d, want 16", got)
	}
	set := queuey.QueueSet{Prefix: unique("limit")}
	for i := range 17 {
		set.Queues = append(set.Queues, queuey.Queue{Name: fmt.Sprintf("q%02d", i)})
	}
	_, err := queuey.NewWorker(small, set, nil)
	if !errors.Is(err, queuey.ErrInvalidQueue) || !strings.Contains(err.Error(), "17 queues") || !strings.Contains(err.Error(), "(16)") {
		t.Errorf("NewWorker of 17 queues on a backend of 16 consumers: %v, want ErrInvalidQueue naming both", err)
	}
	set.Queues = set.Queues[:16]
	if _, err := queuey.NewWorker(small, set, nil); err != nil {
		t.Errorf("NewWorker of 16 queues on a backend of 16 consumers: %v", err)
	}
}

// Consumers past MaxConsumers (several callers on one backend) are
// refused at Consume, and a consumer cancelled gives its channel back.
func TestAConsumePastMaxConsumersIsRefused(t *testing.T) {
	t.Parallel()
	opts := &rabbitmq.Options{ConnectionName: unique("limit"), Logger: slog.New(slog.DiscardHandler)}
	rabbitmq.SetConsumeChannelMax(opts, 2) // one consumer a connection
	small := rabbittest.Dial(t, opts)
	t.Cleanup(func() { _ = small.Close() })
	q := unique("limit") + ".work"
	t.Cleanup(func() { rabbittest.DeleteQueues(t, q, broker.DeadQueueName(q)) })
	if err := small.Declare(t.Context(), broker.QueueSpec{Name: q}); err != nil {
		t.Fatal(err)
	}
	var cs []broker.Consumer
	for range 16 {
		c, err := small.Consume(t.Context(), q, 1)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	if _, err := small.Consume(t.Context(), q, 1); !errors.Is(err, rabbitmq.ErrTooManyConsumers) {
		t.Errorf("the 17th Consume: %v, want ErrTooManyConsumers", err)
	}
	cs[7].Cancel() // its channel given back: room for one more
	c, err := small.Consume(t.Context(), q, 1)
	if err != nil {
		t.Fatalf("a Consume after a Cancel: %v", err)
	}
	c.Cancel()
	for _, c := range cs {
		c.Cancel()
	}
}
