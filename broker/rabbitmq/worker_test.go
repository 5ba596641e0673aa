package rabbitmq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
	"github.com/queuey-go/queuey/internal/workertest"
)

// job is the worker tests' job; its queue's settings come from each test's
// QueueSet, by name.
type job struct {
	Name     string        `json:"name"`
	Defers   int           `json:"defers,omitempty"`
	Fail     int           `json:"fail,omitempty"`
	Work     time.Duration `json:"work,omitempty"`
	Backoff  time.Duration `json:"backoff,omitempty"`
	Attempts int           `json:"attempts,omitempty"`
	Fatal    bool          `json:"fatal,omitempty"`
}

func (job) Kind() string        { return "job" }
func (job) Queue() queuey.Queue { return queuey.Queue{Name: "work"} }

// RetryPolicy lets a job carry its own backoff.
func (j job) RetryPolicy() queuey.RetryPolicy {
	return queuey.RetryPolicy{MaxAttempts: max(j.Attempts, 1), Backoff: queuey.FixedBackoff(j.Backoff)}
}

type run struct {
	queuey.JobContext
	Name string
	At   time.Time
}

// rig is a worker and producer on the real broker with a log of runs.
type rig struct {
	t        *testing.T
	prefix   string
	backend  *rabbitmq.Backend
	producer *queuey.Producer
	worker   *queuey.Worker

	mu      sync.Mutex
	runs    []run
	changed chan struct{} // closed and replaced at every run
	want    int
	stop    context.CancelFunc
	ran     chan error
}

func newRig(t *testing.T, q queuey.Queue, opts *rabbitmq.Options) *rig {
	t.Helper()
	return newRigWith(t, q, opts, nil)
}

// newRigWith is newRig with the worker's config changed by configure.
func newRigWith(t *testing.T, q queuey.Queue, opts *rabbitmq.Options, configure func(*queuey.WorkerConfig)) *rig {
	t.Helper()
	r := &rig{t: t, prefix: unique("worker"), changed: make(chan struct{})}
	t.Cleanup(func() { deletePrefixed(t, r.prefix) })
	if opts == nil {
		opts = &rabbitmq.Options{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r.backend = rabbittest.Dial(t, opts)
	t.Cleanup(func() { _ = r.backend.Close() })
	set := queuey.QueueSet{Prefix: r.prefix, Queues: []queuey.Queue{q}, RetryGranularity: 100 * time.Millisecond, DeferGranularity: 100 * time.Millisecond}
	var err error
	if r.producer, err = queuey.NewProducer(t.Context(), r.backend, set, nil); err != nil {
		t.Fatal(err)
	}
	wcfg := &queuey.WorkerConfig{Concurrency: 1, Logger: slog.New(slog.DiscardHandler)}
	if configure != nil {
		configure(wcfg)
	}
	r.worker, err = queuey.NewWorker(r.backend, set, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	err = queuey.Handle(r.worker, func(ctx context.Context, j job, jc queuey.JobContext) error {
		r.record(j.Name, jc)
		if j.Work > 0 {
			select {
			case <-time.After(j.Work): // the job's own work
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		switch {
		case jc.Deferrals < j.Defers:
			return queuey.Defer(time.Second, "rate limited")
		case jc.Attempt <= j.Fail:
			return fmt.Errorf("%s failed", j.Name)
		case j.Fatal:
			return queuey.Fatalf("%s cannot be done", j.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) record(name string, jc queuey.JobContext) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, run{JobContext: jc, Name: name, At: time.Now()})
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *rig) enqueue(j job) string {
	r.t.Helper()
	id, err := r.producer.Enqueue(r.t.Context(), j)
	if err != nil {
		r.t.Fatal(err)
	}
	return id
}

// start runs the worker until the test ends; wait returns after want runs.
func (r *rig) start(want int) {
	r.want = want
	ctx, stop := context.WithCancel(context.Background())
	r.stop, r.ran = stop, make(chan error, 1)
	go func() { r.ran <- r.worker.Run(ctx) }()
	r.t.Cleanup(r.shutdown)
}

func (r *rig) shutdown() {
	if r.stop == nil {
		return
	}
	r.stop()
	r.stop = nil
	if err := <-r.ran; err != nil {
		r.t.Errorf("worker: %v", err)
	}
}

func (r *rig) wait(within time.Duration) []run {
	r.t.Helper()
	return r.until(fmt.Sprintf("%d runs", r.want), within, func(runs []run) bool { return len(runs) >= r.want })
}

// until waits up to within for cond to hold of the runs so far, and
// returns them.
func (r *rig) until(what string, within time.Duration, cond func([]run) bool) []run {
	r.t.Helper()
	deadline := time.After(within)
	for {
		r.mu.Lock()
		runs, changed := slices.Clone(r.runs), r.changed
		r.mu.Unlock()
		if cond(runs) {
			return runs
		}
		select {
		case <-changed:
		case <-deadline:
			r.t.Fatalf("waited %v for %s; %d runs so far", within, what, len(runs))
		}
	}
}

func names(runs []run) string {
	var s []string
	for _, r := range runs {
		s = append(s, r.Name)
	}
	return strings.Join(s, " ")
}

func TestADeferredJobOvertakesABacklogOfTwenty(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 1}, nil)
	r.enqueue(job{Name: "limited", Defers: 1})
	for i := range 20 {
		r.enqueue(job{Name: fmt.Sprintf("b%02d", i), Work: 100 * time.Millisecond})
	}
	r.start(22)
	runs := r.wait(30 * time.Second)
	at := slices.IndexFunc(runs[1:], func(x run) bool { return x.Name == "limited" }) + 1
	if at == 0 {
		t.Fatalf("the deferred job did not run again: %s", names(runs))
	}
	second := runs[at]
	if second.Attempt != 1 || second.Deferrals != 1 || second.Priority != 10 {
		t.Errorf("second run: attempt %d deferrals %d priority %d, want 1, 1, 10", second.Attempt, second.Deferrals, second.Priority)
	}
	// Released after 1 s while the backlog takes 2 s: it must not wait for
	// the rest of the backlog.
	if behind := len(runs) - 1 - at; behind < 5 {
		t.Errorf("only %d backlog jobs ran after the deferred job; it did not overtake: %s", behind, names(runs))
	}
	if wait := second.At.Sub(runs[0].At); wait < time.Second {
		t.Errorf("the deferred job came back after %v, before its 1 s", wait)
	}
}

func TestWithoutPrioritiesADeferredJobComesBackFIFOOnTheBroker(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 1, MaxPriority: queuey.NoPriorities}, nil)
	r.enqueue(job{Name: "limited", Defers: 1})
	for i := range 20 {
		r.enqueue(job{Name: fmt.Sprintf("b%02d", i), Work: 100 * time.Millisecond})
	}
	r.start(22)
	runs := r.wait(30 * time.Second)
	last := runs[len(runs)-1]
	if last.Name != "limited" || last.Priority != 0 || last.Deferrals != 1 {
		t.Errorf("last run: %s priority %d deferrals %d, want limited at priority 0 with 1 deferral (order %s)",
			last.Name, last.Priority, last.Deferrals, names(runs))
	}
}

func TestAShortRetryIsNotStuckBehindALongOne(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 2}, nil)
	r.enqueue(job{Name: "six", Fail: 1, Attempts: 2, Backoff: 6 * time.Second})
	r.enqueue(job{Name: "one", Fail: 1, Attempts: 2, Backoff: time.Second})
	r.start(4)
	runs := r.wait(30 * time.Second)
	if got := names(runs); got != "six one one six" {
		t.Errorf("run order: got %q, want %q", got, "six one one six")
	}
	if d := runs[2].At.Sub(runs[1].At); d < time.Second || d > 4*time.Second {
		t.Errorf("the 1 s retry came back after %v", d)
	}
}

// The worker's connection is closed by the broker three times while jobs
// run: it reconnects by itself, loses nothing, and only jobs in flight at a
// cut run twice.
func TestTheWorkerSurvivesClosedConnections(t *testing.T) {
	t.Parallel()
	name := unique("conn")
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 4}, &rabbitmq.Options{ConnectionName: name, ReconnectMin: 50 * time.Millisecond})
	const jobs = 40
	for i := range jobs {
		r.enqueue(job{Name: fmt.Sprintf("j%02d", i), Work: 50 * time.Millisecond})
	}
	r.start(-1)
	for cut := range 3 {
		waitForRuns(t, r, (cut+1)*8)
		closeConnection(t, name)
	}
	r.until(fmt.Sprintf("all %d jobs", jobs), 30*time.Second, func(runs []run) bool { return distinct(runs) == jobs })
	// A job whose ack was lost with a cut has run once and comes back to
	// run again: the queue is empty once those have, with the worker up.
	left := drained(t, r.prefix+".work", 15*time.Second)
	runs := r.until("the runs so far", time.Second, func([]run) bool { return true }) // a snapshot
	if dup := len(runs) - jobs; dup > 3*4 {
		t.Errorf("%d duplicate runs, more than the prefetch (4) per cut", dup)
	}
	r.shutdown()
	if left != 0 {
		t.Errorf("messages left on the queue: %d", left)
	}
	t.Logf("%d runs for %d jobs across 3 closed connections", len(runs), jobs)
}

// drained reads queue's messages (ready and unacked) from the broker until
// there are none, or within has passed, and returns the last count.
func drained(t *testing.T, queue string, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := listQueues(t, queue)[queue].Messages
		if left == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

func waitForRuns(t *testing.T, r *rig, n int) {
	t.Helper()
	r.until(fmt.Sprintf("%d runs", n), 20*time.Second, func(runs []run) bool { return len(runs) >= n })
}

func distinct(runs []run) int {
	seen := map[string]bool{}
	for _, r := range runs {
		seen[r.JobID] = true
	}
	return len(seen)
}

// closeConnection closes, from the broker's side, the backend's
// connections: the one named name and its consumers' (name + " (consume)").
func closeConnection(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		closed := 0
		for _, line := range strings.Split(rabbitmqctl(t, "list_connections", "pid", "client_properties", "--quiet"), "\n") {
			if strings.Contains(line, name) {
				pid := strings.Fields(line)[0]
				rabbitmqctl(t, "close_connection", pid, "queuey fault test")
				closed++
			}
		}
		if closed > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection named %s", name)
		}
		<-time.After(100 * time.Millisecond) // the reconnect is under way
	}
}

// TestFaultBrokerRestartKeepsHeldJobs stops and starts the broker's
// application, which cuts every connection on this machine's broker: it
// runs only when QUEUEY_FAULTS=1 (make faults runs it alone).
func TestFaultBrokerRestartKeepsHeldJobs(t *testing.T) {
	if os.Getenv("QUEUEY_FAULTS") != "1" {
		t.Skip("restarts the broker; make faults runs it alone with QUEUEY_FAULTS=1")
	}
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 4}, &rabbitmq.Options{ReconnectMin: 200 * time.Millisecond, ReconnectMax: time.Second})
	const jobs = 10
	due := map[string]time.Time{}
	for i := range jobs {
		// The hold starts when the broker takes the message, before the
		// confirm comes back: due counts from before the call.
		sent := time.Now()
		id, err := r.producer.Defer(t.Context(), job{Name: fmt.Sprintf("h%d", i)}, 8*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		due[id] = sent.Add(8 * time.Second)
	}
	r.start(jobs)
	rabbitmqctl(t, "stop_app")
	rabbitmqctl(t, "start_app")
	rabbitmqctl(t, "await_startup")
	runs := r.wait(60 * time.Second)
	for _, run := range runs {
		if run.At.Before(due[run.JobID]) {
			t.Errorf("%s ran %v early", run.Name, due[run.JobID].Sub(run.At))
		}
	}
	if got := distinct(runs); got != jobs {
		t.Errorf("held jobs that ran after the restart: got %d, want %d", got, jobs)
	}
}

// A work queue deleted behind the worker's back is declared again and
// consumed again; the worker keeps running.
func TestADeletedWorkQueueIsDeclaredAgain(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 1}, nil)
	r.start(2)
	r.enqueue(job{Name: "before"})
	waitForRuns(t, r, 1)
	q := r.prefix + ".work"
	rabbitmqctl(t, "delete_queue", q)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, ok := listQueues(t, q)[q]; ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not declared again", q)
		}
		<-time.After(100 * time.Millisecond)
	}
	r.enqueue(job{Name: "after"})
	if got := names(r.wait(20 * time.Second)); got != "before after" {
		t.Errorf("runs: got %q, want %q", got, "before after")
	}
}

// A hold queue someone else declared with other arguments (a TTL of 5 s
// where queuey's says 1 s) refuses every deferral and retry held in it.
// Each job runs once, no earlier than the delay it asked for can come
// (it never comes: the job is not run again), its hold is tried five
// times at a growing backoff, and then it is in the dead letters with the
// broker's refusal for a reason; nothing is left on the queue.
func TestAHoldQueueDeclaredWithOtherArgumentsEndsInTheDeadLetters(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, queuey.Queue{Name: "work", Prefetch: 2}, nil, func(c *queuey.WorkerConfig) {
		c.Concurrency, c.RepublishDelay = 2, 20*time.Millisecond
	})
	q := r.prefix + ".work"
	declareAsAnother(t, broker.HoldQueueName(q, time.Second), amqp.Table{"x-message-ttl": int32(5000)})
	deferred := r.enqueue(job{Name: "deferred", Defers: 1})
	retried := r.enqueue(job{Name: "retried", Fail: 1, Attempts: 3, Backoff: time.Second})
	r.start(2)
	r.wait(20 * time.Second)
	dead := readDeadLetters(t, r.backend, q, 2, 30*time.Second)
	for _, id := range []string{deferred, retried} {
		if why := dead[id]; !strings.Contains(why, "could not be held") || !strings.Contains(why, "different arguments") {
			t.Errorf("dead letter of %s: reason %q, want the refused hold", id, why)
		}
	}
	if n := len(r.wait(0)); n != 2 {
		t.Errorf("%d runs, want 2: each job once", n)
	}
	if got := r.worker.SettleFailures(); got != 10 {
		t.Errorf("settle failures: %d, want 10 (five tries each)", got)
	}
	if n, err := r.backend.Depth(t.Context(), q); err != nil || n != 0 {
		t.Errorf("depth of %s: %d, %v; want 0", q, n, err)
	}
}

// A dead-letter queue deleted under a running worker is declared again at
// the next dead letter, which lands in it; the job ran once.
func TestADeletedDeadLetterQueueIsDeclaredAgain(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 1}, nil)
	q := r.prefix + ".work"
	r.start(1)
	rabbitmqctl(t, "delete_queue", broker.DeadQueueName(q))
	id := r.enqueue(job{Name: "fatal", Fatal: true})
	r.wait(20 * time.Second)
	dead := readDeadLetters(t, r.backend, q, 1, 20*time.Second)
	if why := dead[id]; !strings.Contains(why, "fatal error") {
		t.Errorf("dead letter: reason %q, want the job's fatal error", why)
	}
	if n := len(r.wait(0)); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

// declareAsAnother declares queue with args through a connection of its own, as
// another program would.
func declareAsAnother(t *testing.T, queue string, args amqp.Table) {
	t.Helper()
	if _, err := rawChannel(t).QueueDeclare(queue, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
}

// readDeadLetters waits up to within for n dead letters of queue and
// returns their reasons by message id, acking them.
func readDeadLetters(t *testing.T, b *rabbitmq.Backend, queue string, n int, within time.Duration) map[string]string {
	t.Helper()
	deadline := time.After(within)
	c, err := b.Consume(t.Context(), broker.DeadQueueName(queue), n)
	for errors.Is(err, broker.ErrNoQueue) { // not declared again yet
		select {
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no dead-letter queue after %v", within)
		}
		c, err = b.Consume(t.Context(), broker.DeadQueueName(queue), n)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cancel()
	reasons := map[string]string{}
	for len(reasons) < n {
		select {
		case d := <-c.Deliveries():
			m := d.Message()
			reasons[m.ID] = m.Headers[broker.HeaderDeathReason]
			_ = d.Ack(t.Context())
		case <-deadline:
			t.Fatalf("%d of %d dead letters after %v: %v", len(reasons), n, within, reasons)
		}
	}
	return reasons
}

// A body that is not an envelope is moved to the dead letters verbatim,
// with its reason, and the queue keeps flowing.
func TestAMalformedBodyIsDeadLetteredVerbatim(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 1}, nil)
	q := r.prefix + ".work"
	garbage := []byte("\x00{not an envelope")
	if err := r.backend.Publish(t.Context(), broker.Message{Queue: q, Body: garbage}); err != nil {
		t.Fatal(err)
	}
	r.enqueue(job{Name: "fine"})
	r.start(1)
	if got := names(r.wait(20 * time.Second)); got != "fine" {
		t.Errorf("runs: got %q, want fine", got)
	}
	dead, err := r.backend.Consume(t.Context(), broker.DeadQueueName(q), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Cancel()
	select {
	case d := <-dead.Deliveries():
		m := d.Message()
		if !bytes.Equal(m.Body, garbage) || !strings.HasPrefix(m.Headers[broker.HeaderDeathReason], "malformed envelope") {
			t.Errorf("dead letter: body %q reason %q, want the garbage verbatim and a malformed-envelope reason", m.Body, m.Headers[broker.HeaderDeathReason])
		}
		_ = d.Ack(t.Context())
	case <-time.After(10 * time.Second):
		t.Fatal("no dead letter")
	}
}

// TestFaultAMemoryAlarmBlocksPublishesUntilTheirDeadline sets the broker's
// memory watermark so low that it blocks every publisher, which would
// disturb other tests: it runs only with QUEUEY_FAULTS=1.
func TestFaultAMemoryAlarmBlocksPublishesUntilTheirDeadline(t *testing.T) {
	b, q := alarmRig(t, "alarm")
	restore := blockPublishing(t, b, q)
	restore()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := b.Publish(ctx, broker.Message{Queue: q, ID: "after", Body: []byte("{}")}); err != nil {
		t.Errorf("publish after the alarm cleared: %v", err)
	}
}

// The worker-level suite (pause, retry overrides, dead-letter hook and
// replay, correlation ids) on the real broker, as on the memory backend.
func TestWorkerSuite(t *testing.T) {
	t.Parallel()
	workertest.Run(t, workertest.Config{
		New: func(t *testing.T) broker.Backend {
			return rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
		},
		Cleanup: deletePrefixed,
	})
}

// The same on the quorum topology, on the one broker.
func TestWorkerSuiteQuorum(t *testing.T) {
	t.Parallel()
	workertest.Run(t, workertest.Config{
		New: func(t *testing.T) broker.Backend {
			return rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
		},
		Cleanup: deletePrefixed,
		Type:    queuey.Quorum,
	})
}

// TestFaultDeclaresDepthAndCloseDoNotWaitOutAnAlarm: a broker that blocks a
// connection stops reading it, so a call that waits for the broker's
// answer would wait for the alarm to clear. A hold that must declare its
// queue and a depth query end with their ctx (ErrBlocked), and closing the
// backend does not wait. It raises a broker-wide alarm: QUEUEY_FAULTS=1
// only.
func TestFaultDeclaresDepthAndCloseDoNotWaitOutAnAlarm(t *testing.T) {
	b, q := alarmRig(t, "alarmclose")
	blockPublishing(t, b, q)
	within := func(what string, call func(ctx context.Context) error) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- call(ctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, rabbitmq.ErrBlocked) {
				t.Errorf("%s under the alarm: got %v, want ErrBlocked", what, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s under the alarm did not end with its 1 s ctx", what)
		}
	}
	within("a hold that declares its queue", func(ctx context.Context) error {
		return declareAndHold(ctx, b, broker.Message{Queue: q, ID: "held", Body: []byte("{}")}, 7*time.Second)
	})
	within("a depth query", func(ctx context.Context) error {
		_, err := b.Depth(ctx, q)
		return err
	})
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
		t.Logf("Close returned after %v under the alarm", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second): // 10 s with no deadline; over 5 s with one the heartbeats pushed back
		t.Fatal("Close did not return within 5 s while the broker blocked the connection")
	}
}

// alarmRig is a backend and a declared work queue for a test that raises
// a broker-wide alarm, which would disturb other tests: it skips unless
// QUEUEY_FAULTS=1. The backend is closed, and the queues deleted, when the
// test ends.
func alarmRig(t *testing.T, name string) (*rabbitmq.Backend, string) {
	t.Helper()
	if os.Getenv("QUEUEY_FAULTS") != "1" {
		t.Skip("raises a broker-wide alarm; make faults runs it alone with QUEUEY_FAULTS=1")
	}
	prefix := unique(name)
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { b.Close() })
	q := prefix + ".work"
	if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, MaxPriority: 10, Durable: true}); err != nil {
		t.Fatal(err)
	}
	return b, q
}

// blockPublishing raises a memory alarm (the watermark so low that the
// broker blocks every publisher) and publishes to q until b's publishing
// connection is blocked: a publish ends with ErrBlocked. The alarm is
// cleared by the func returned, or when the test ends.
func blockPublishing(t *testing.T, b *rabbitmq.Backend, q string) (restore func()) {
	t.Helper()
	rabbitmqctl(t, "set_vm_memory_high_watermark", "0.000001")
	restore = sync.OnceFunc(func() { rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4") })
	t.Cleanup(restore)
	var err error
	for range 50 { // the alarm reaches the connection within moments
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		err = b.Publish(ctx, broker.Message{Queue: q, ID: "blocked", Body: []byte("{}")})
		cancel()
		if err != nil {
			break
		}
	}
	if !errors.Is(err, rabbitmq.ErrBlocked) {
		t.Fatalf("publish under a memory alarm: got %v, want ErrBlocked", err)
	}
	return restore
}

// countingHandler is a slog.Handler that counts the records whose message
// contains text, and drops every record.
type countingHandler struct {
	text string
	n    *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h countingHandler) WithGroup(string) slog.Handler            { return h }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.text) {
		h.n.Add(1)
	}
	return nil
}

// rawEnvelope is a body as another producer might write it, edited.
func rawEnvelope(queue string, edit func(map[string]any)) []byte {
	m := map[string]any{
		"job_id": broker.NewJobID(), "job_type": "job", "queue": queue, "attempt": 1,
		"enqueued_at_ms": time.Now().UnixMilli(), "payload": map[string]any{"name": "raw"},
	}
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// Values past AMQP's limits, from the wire or from a handler, are refused
// or cut where they would have to travel in a frame; none of them takes
// the connection down, and each dead letter is published once.
func TestValuesPastAMQPLimitsAreDeadLetteredWithoutLosingTheConnection(t *testing.T) {
	t.Parallel()
	var lost atomic.Int64
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 4}, &rabbitmq.Options{Logger: slog.New(countingHandler{text: "connection lost", n: &lost})})
	q := r.prefix + ".work"
	ch := rawChannel(t)
	huge := strings.Repeat("é", 100_000) // 200 KB
	bodies := map[string][]byte{
		"huge-type": rawEnvelope(q, func(m map[string]any) { m["job_type"] = huge }),
		"huge-id":   rawEnvelope(q, func(m map[string]any) { m["job_id"] = huge }),
		"long-corr": rawEnvelope(q, func(m map[string]any) { m["correlation_id"] = strings.Repeat("c", 300) }),
	}
	for id, body := range bodies {
		if err := ch.Publish("", q, false, false, amqp.Publishing{MessageId: id, Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	bigError := r.enqueue(job{Name: huge, Fatal: true}) // its error text is 200 KB
	r.enqueue(job{Name: "fine"})
	r.start(2)
	r.until("the fine job", 30*time.Second, func(runs []run) bool { return slices.ContainsFunc(runs, func(r run) bool { return r.Name == "fine" }) })
	reasons := readDeadLetters(t, r.backend, q, 4, 30*time.Second)
	for _, id := range []string{"huge-type", "huge-id", "long-corr", bigError} {
		reason, ok := reasons[id]
		if !ok || len(reason) > broker.MaxReasonBytes || !utf8.ValidString(reason) {
			t.Errorf("dead letter %.20s: reason of %d bytes (valid UTF-8 %v), present %v; want one of at most %d", id, len(reason), utf8.ValidString(reason), ok, broker.MaxReasonBytes)
		}
	}
	if !strings.HasPrefix(reasons["long-corr"], "malformed envelope: correlation_id") {
		t.Errorf("long correlation id: reason %q, want a malformed envelope naming correlation_id", reasons["long-corr"])
	}
	if n := lost.Load(); n != 0 {
		t.Errorf("the backend lost its connection %d times, want 0", n)
	}
}

// A raw body carrying a CC header (RabbitMQ's sender-selected
// distribution) is dead-lettered once, without the header: copied as a
// string, the broker refused it, and the delivery came back for ever.
func TestABodyWithACCHeaderIsDeadLetteredOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t, queuey.Queue{Name: "work", Prefetch: 1}, nil)
	q := r.prefix + ".work"
	other := r.prefix + ".elsewhere"
	if _, err := rawChannel(t).QueueDeclare(other, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	headers := amqp.Table{"CC": []any{other}, "x-tenant": "acme"}
	if err := rawChannel(t).Publish("", q, false, false, amqp.Publishing{MessageId: "cc", Headers: headers, Body: []byte("not an envelope")}); err != nil {
		t.Fatal(err)
	}
	r.enqueue(job{Name: "fine"})
	r.start(1)
	r.wait(30 * time.Second)
	if reasons := readDeadLetters(t, r.backend, q, 1, 30*time.Second); !strings.HasPrefix(reasons["cc"], "malformed envelope") {
		t.Errorf("dead letters: %q, want the CC message, malformed", reasons)
	}
	if n, err := r.backend.Depth(t.Context(), other); err != nil || n != 1 {
		t.Errorf("the CC'd queue holds %d (%v), want only the broker's own copy of the first publish", n, err)
	}
}

// A work queue deleted and declared again by someone else without
// x-max-priority, under a running worker: the worker says so at ERROR,
// naming the queue, the argument and what to do, once as it consumes the
// queue again (not once per job), and goes on running its jobs.
func TestAWorkQueueDeclaredAgainWithoutPrioritiesIsReportedAtError(t *testing.T) {
	t.Parallel()
	logs := &logSink{changed: make(chan struct{})}
	r := newRigWith(t, queuey.Queue{Name: "work", Prefetch: 1}, &rabbitmq.Options{Logger: slog.New(logs.handler("backend"))},
		func(c *queuey.WorkerConfig) { c.Logger = slog.New(logs.handler("worker")) })
	q := r.prefix + ".work"
	r.start(7)
	r.enqueue(job{Name: "before"})
	waitForRuns(t, r, 1)
	declareWithoutPriorities(t, q)
	mismatch := func(rec logRecord) bool {
		return rec.Level == slog.LevelError && strings.Contains(rec.Text, q) &&
			strings.Contains(rec.Text, "x-max-priority") && strings.Contains(rec.Text, "MaxPriority")
	}
	rec := logs.until(t, "an ERROR naming the queue, x-max-priority and the Queue's MaxPriority", 20*time.Second, mismatch)
	t.Logf("logged: %s", rec.Text)
	said := logs.count(mismatch)
	for i := range 6 {
		r.enqueue(job{Name: fmt.Sprintf("after%d", i)})
	}
	if got := names(r.wait(20 * time.Second)); got != "before after0 after1 after2 after3 after4 after5" {
		t.Errorf("runs: got %q, want before and the six after, in order", got)
	}
	if n := logs.count(mismatch); n != said {
		t.Errorf("the mismatch was said %d times before six jobs ran and %d after: it must not be said per job", said, n)
	}
	if args := listQueues(t, q)[q].Arguments; args["x-max-priority"] != nil {
		t.Errorf("%s has x-max-priority %v; the worker must not have replaced the queue", q, args["x-max-priority"])
	}
}

// declareWithoutPriorities deletes queue and declares it again, durable
// and without arguments, as an operator would. A worker that declares it
// first (with its priorities) gets it deleted again, until this
// declaration is the one that stands.
func declareWithoutPriorities(t *testing.T, queue string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ch := rawChannel(t)
		if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
			t.Fatal(err)
		}
		_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
		var amqpErr *amqp.Error
		switch {
		case err == nil:
			return
		case !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed:
			t.Fatal(err)
		case time.Now().After(deadline):
			t.Fatalf("%s was declared again by the worker every time: %v", queue, err)
		}
	}
}

// logRecord is a log line as logSink keeps it: its level, and its message
// followed by its attributes as " key=value".
type logRecord struct {
	Level slog.Level
	Text  string
}

// logSink keeps every record its handlers are given.
type logSink struct {
	mu      sync.Mutex
	records []logRecord
	changed chan struct{} // closed and replaced at every record
}

// handler is a slog.Handler into the sink whose records say from=source.
func (s *logSink) handler(source string) slog.Handler {
	return sinkHandler{s: s, attrs: []slog.Attr{slog.String("from", source)}}
}

// until waits up to within for a record for which cond holds, and returns
// the first; it fails the test with every record kept otherwise.
func (s *logSink) until(t *testing.T, what string, within time.Duration, cond func(logRecord) bool) logRecord {
	t.Helper()
	deadline := time.After(within)
	for {
		s.mu.Lock()
		records, changed := slices.Clone(s.records), s.changed
		s.mu.Unlock()
		if i := slices.IndexFunc(records, cond); i >= 0 {
			return records[i]
		}
		select {
		case <-changed:
		case <-deadline:
			for _, rec := range records {
				t.Logf("%s %s", rec.Level, rec.Text)
			}
			t.Fatalf("waited %v for %s; %d records (above)", within, what, len(records))
		}
	}
}

// count is how many records so far cond holds for.
func (s *logSink) count(cond func(logRecord) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, rec := range s.records {
		if cond(rec) {
			n++
		}
	}
	return n
}

type sinkHandler struct {
	s     *logSink
	attrs []slog.Attr
}

func (h sinkHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h sinkHandler) WithGroup(string) slog.Handler            { return h }
func (h sinkHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return sinkHandler{s: h.s, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h sinkHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.records = append(h.s.records, logRecord{Level: r.Level, Text: b.String()})
	close(h.s.changed)
	h.s.changed = make(chan struct{})
	return nil
}

// A consumer whose queue is deleted is cancelled by the broker: its Err
// says so (not a lost connection), and its channel is closed rather than
// left open on the consumers' connection, one more each time.
func TestAConsumerCancelledByTheBrokerSaysSoAndClosesItsChannel(t *testing.T) {
	t.Parallel()
	prefix := unique("cancelled")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, &rabbitmq.Options{ConnectionName: prefix, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = b.Close() })
	q := prefix + ".work"
	for range 3 {
		if err := b.Declare(t.Context(), broker.QueueSpec{Name: q, MaxPriority: 10}); err != nil {
			t.Fatal(err)
		}
		c, err := b.Consume(t.Context(), q, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rawChannel(t).QueueDelete(q, false, false, false); err != nil {
			t.Fatal(err)
		}
		select {
		case _, ok := <-c.Deliveries():
			if ok {
				t.Fatal("a delivery from an empty queue")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the consumer of a deleted queue did not end")
		}
		if err := c.Err(); !errors.Is(err, rabbitmq.ErrConsumerCancelled) || errors.Is(err, rabbitmq.ErrConnectionLost) {
			t.Fatalf("Err = %v, want ErrConsumerCancelled", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for n := consumeChannels(t, prefix); n != 0; n = consumeChannels(t, prefix) {
		if time.Now().After(deadline) {
			t.Fatalf("%d channels left open on the consumers' connection by three cancelled consumers", n)
		}
		<-time.After(50 * time.Millisecond) // the closes are under way
	}
}

// consumeChannels is how many channels the consumers' connection of the
// backend named name has open, as the broker counts them.
func consumeChannels(t *testing.T, name string) int {
	t.Helper()
	for _, line := range strings.Split(rabbitmqctl(t, "list_connections", "client_properties", "channels", "--quiet"), "\n") {
		if strings.Contains(line, name+" (consume)") {
			f := strings.Fields(line)
			var n int
			if _, err := fmt.Sscan(f[len(f)-1], &n); err != nil {
				t.Fatalf("list_connections: %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no connection named %q (consume)", name)
	return 0
}

type tickJob struct{}

func (tickJob) Kind() string        { return "tick" }
func (tickJob) Queue() queuey.Queue { return queuey.Queue{Name: "ticks"} }

// A schedule of a quorum queue set fires on the broker and keeps its
// state on a quorum queue, which outlives the node it was declared on.
func TestAScheduleOfAQuorumSetKeepsItsStateOnAQuorumQueue(t *testing.T) {
	t.Parallel()
	prefix := unique("qsched")
	t.Cleanup(func() { deletePrefixed(t, prefix) })
	b := rabbittest.Dial(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	defer b.Close()
	set := queuey.QueueSet{Prefix: prefix, Type: queuey.Quorum, Queues: []queuey.Queue{{Name: "ticks"}}}
	w, err := queuey.NewWorker(b, set, &queuey.WorkerConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ticks := make(chan struct{}, 16)
	if err := queuey.Handle(w, func(context.Context, tickJob, queuey.JobContext) error { ticks <- struct{}{}; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := w.AddSchedule(queuey.Schedule{Name: "every-second", Job: tickJob{}, Every: time.Second}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	for i := range 2 {
		select {
		case <-ticks:
		case <-time.After(10 * time.Second):
			t.Errorf("tick %d did not run within 10 s", i+1)
		}
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	var states int
	for name, q := range listQueues(t, prefix) {
		if strings.Contains(name, ".schedule.") {
			states++
			if q.Arguments["x-queue-type"] != "quorum" || q.Arguments["x-single-active-consumer"] != true {
				t.Errorf("state queue %s: arguments %v, want a quorum queue with a single active consumer", name, q.Arguments)
			}
		}
	}
	if states != 1 {
		t.Errorf("%d state queues, want 1", states)
	}
}
