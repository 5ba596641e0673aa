// Package workertest is the worker-level suite: what a running Worker,
// Producer and DeadLetters do together (the queue pause, runtime retry
// overrides, a job's own retry policy, the dead-letter hook, dead-letter
// list, show and replay, correlation ids), written once and run unchanged
// against the memory backend and a real RabbitMQ, as broker/brokertest
// does for the backends themselves.
//
// The tests wait with ordinary timers and channels. Inside a
// testing/synctest bubble (Config.Bubble) those waits are virtual; against
// a real broker they are real, and kept short.
package workertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
)

// Config says how to run the suite against one backend.
type Config struct {
	// New returns a fresh, connected backend. The suite closes it.
	New func(t *testing.T) broker.Backend
	// Bubble runs each test inside a testing/synctest bubble, for the
	// memory backend on the real clock, so that its waits are virtual.
	Bubble bool
	// Cleanup, when set, deletes every queue whose name starts with
	// prefix, on a real broker. It is called after the backend is closed.
	Cleanup func(t *testing.T, prefix string)
	// Type is the QueueSet's Type: the topology the suite runs on.
	Type queuey.QueueType
}

// Run runs every test of the suite as a subtest of t.
func Run(t *testing.T, cfg Config) {
	tests := []struct {
		name string
		test func(*env)
	}{
		{"APausedQueueWaitsAndItsDeferredJobRunsFirst", pausedQueueWaits},
		{"RetryPoliciesCanBeOverriddenAtRuntime", retryOverrides},
		{"AJobsOwnRetryPolicyWins", ownRetryPolicy},
		{"TheDeadLetterHookIsToldWhy", deadLetterHook},
		{"DeadLettersAreListedShownAndReplayed", deadLetterReplay},
		{"ACorrelationIDTravelsThroughRetriesAndDeferrals", correlationID},
		{"ABodyOverTheWorkersLimitIsDeadLetteredUnread", tooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each test has a backend and queues of its own
			if cfg.Bubble {
				synctest.Test(t, func(t *testing.T) { tc.test(newEnv(t, cfg)) })
				return
			}
			tc.test(newEnv(t, cfg))
		})
	}
}

// The suite's two queues. limited has a prefetch of 4; neither retries
// unless a test says so.
const (
	limited = "limited"
	other   = "other"
)

// granularity is the suite's retry and deferral rounding, and deferFor
// the delay of a plan's deferrals.
const (
	granularity = 100 * time.Millisecond
	deferFor    = 100 * time.Millisecond
)

// maxBytes is the suite's worker's MaxMessageBytes.
const maxBytes = 64 << 10

// within is how long a test waits for what it expects before failing.
const within = 20 * time.Second

// plan is what a job does when it runs, in this order of precedence.
type plan struct {
	Name     string        `json:"name"`
	Pause    time.Duration `json:"pause,omitempty"`    // pause its queue on the first run
	Defers   int           `json:"defers,omitempty"`   // defer (deferFor) this many times
	Fatal    bool          `json:"fatal,omitempty"`    // fail fatally until the test cures it
	Fail     int           `json:"fail,omitempty"`     // fail this many attempts
	Attempts int           `json:"attempts,omitempty"` // ownPolicyJob: its own MaxAttempts
}

type limitedJob struct{ plan }

func (limitedJob) Kind() string        { return "limited_job" }
func (limitedJob) Queue() queuey.Queue { return queuey.Queue{Name: limited} }

type otherJob struct{ plan }

func (otherJob) Kind() string        { return "other_job" }
func (otherJob) Queue() queuey.Queue { return queuey.Queue{Name: other} }

// ownPolicyJob decides its retry policy from its content.
type ownPolicyJob struct{ plan }

func (ownPolicyJob) Kind() string        { return "own_policy_job" }
func (ownPolicyJob) Queue() queuey.Queue { return queuey.Queue{Name: other} }
func (j ownPolicyJob) RetryPolicy() queuey.RetryPolicy {
	return queuey.FixedRetries(j.Attempts, granularity)
}

// orphanJob has no handler.
type orphanJob struct{ plan }

func (orphanJob) Kind() string        { return "orphan_job" }
func (orphanJob) Queue() queuey.Queue { return queuey.Queue{Name: other} }

// run is one handler call as the suite saw it.
type run struct {
	queuey.JobContext
	Name string
	At   time.Time
}

// env is one test's backend, producer, worker and the log of what ran.
type env struct {
	t        *testing.T
	backend  broker.Backend
	set      queuey.QueueSet
	producer *queuey.Producer
	worker   *queuey.Worker
	cured    atomic.Bool // once set, fatal plans succeed

	mu      sync.Mutex
	runs    []run
	dead    []queuey.DeadLetterEvent // told to the dead-letter hook
	settled []settlement             // deliveries settled, in order
	changed chan struct{}            // closed and replaced when any of them grows
}

// settlement is one delivery's outcome, once the broker has it.
type settlement struct {
	JobID string
	queuey.Outcome
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	prefix := "wt." + hex.EncodeToString(b)
	if cfg.Cleanup != nil {
		t.Cleanup(func() { cfg.Cleanup(t, prefix) })
	}
	e := &env{t: t, backend: cfg.New(t), changed: make(chan struct{})}
	t.Cleanup(func() { _ = e.backend.Close() })
	noRetries := queuey.NoRetries()
	e.set = queuey.QueueSet{
		Prefix: prefix,
		Queues: []queuey.Queue{
			{Name: limited, Prefetch: 4, Retry: &noRetries},
			{Name: other, Prefetch: 4, Retry: &noRetries},
		},
		RetryGranularity: granularity,
		DeferGranularity: granularity,
		Type:             cfg.Type,
	}
	var err error
	if e.producer, err = queuey.NewProducer(t.Context(), e.backend, e.set, nil); err != nil {
		t.Fatal(err)
	}
	e.worker, err = queuey.NewWorker(e.backend, e.set, &queuey.WorkerConfig{
		Concurrency:     1, // one job at a time: the order of runs is the queue's
		MaxMessageBytes: maxBytes,
		UnknownKindWait: -1, // the orphan is dead-lettered at once (deadLetterHook)
		Logger:          slog.New(slog.DiscardHandler),
		OnDeadLetter:    e.deadLettered,
		Hooks:           &queuey.Hooks{Deliver: e.delivered},
	})
	if err != nil {
		t.Fatal(err)
	}
	must(t, queuey.Handle(e.worker, func(ctx context.Context, j limitedJob, jc queuey.JobContext) error { return e.handle(j.plan, jc) }))
	must(t, queuey.Handle(e.worker, func(ctx context.Context, j otherJob, jc queuey.JobContext) error { return e.handle(j.plan, jc) }))
	must(t, queuey.Handle(e.worker, func(ctx context.Context, j ownPolicyJob, jc queuey.JobContext) error { return e.handle(j.plan, jc) }))
	return e
}

func (e *env) handle(p plan, jc queuey.JobContext) error {
	e.mu.Lock()
	e.runs = append(e.runs, run{JobContext: jc, Name: p.Name, At: time.Now()})
	e.notifyLocked()
	e.mu.Unlock()
	switch {
	case p.Pause > 0 && jc.Deferrals == 0:
		return queuey.PauseQueue(p.Pause, "429: retry after "+p.Pause.String())
	case jc.Deferrals < p.Defers:
		return queuey.Defer(deferFor, "rate limited")
	case p.Fatal && !e.cured.Load():
		return queuey.Fatalf("%s cannot run", p.Name)
	case jc.Attempt <= p.Fail:
		return fmt.Errorf("%s failed on attempt %d", p.Name, jc.Attempt)
	}
	return nil
}

func (e *env) deadLettered(_ context.Context, ev queuey.DeadLetterEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dead = append(e.dead, ev)
	e.notifyLocked()
}

func (e *env) delivered(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
	id := d.Job.JobID
	return ctx, func(out queuey.Outcome) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.settled = append(e.settled, settlement{JobID: id, Outcome: out})
		e.notifyLocked()
	}
}

func (e *env) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// start runs the worker until the test ends.
func (e *env) start() {
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- e.worker.Run(ctx) }()
	e.t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			e.t.Errorf("worker: %v", err)
		}
	})
}

func (e *env) enqueue(j queuey.Job, opts ...queuey.EnqueueOption) string {
	e.t.Helper()
	id, err := e.producer.Enqueue(e.t.Context(), j, opts...)
	if err != nil {
		e.t.Fatalf("enqueue %v: %v", j, err)
	}
	return id
}

// until waits for done to hold of the runs and settlements so far, and
// returns the runs.
func (e *env) until(what string, done func(runs []run, settled []settlement) bool) []run {
	e.t.Helper()
	deadline := time.After(within)
	for {
		e.mu.Lock()
		runs, settled, changed := slices.Clone(e.runs), slices.Clone(e.settled), e.changed
		e.mu.Unlock()
		if done(runs, settled) {
			return runs
		}
		select {
		case <-changed:
		case <-deadline:
			e.t.Fatalf("waited %v for %s; runs so far:\n%s", within, what, describe(runs))
		}
	}
}

// runsOf waits until the job id has run n times and returns those runs.
func (e *env) runsOf(id string, n int) []run {
	e.t.Helper()
	return of(id, e.until(fmt.Sprintf("%d runs of %s", n, id), func(runs []run, _ []settlement) bool {
		return len(of(id, runs)) >= n
	}))
}

// deadLetters waits until n deliveries have been dead-lettered (the dead
// letters are on the dead-letter queue) and returns what the hook was told.
func (e *env) deadLetters(n int) []queuey.DeadLetterEvent {
	e.t.Helper()
	e.until(fmt.Sprintf("%d dead letters", n), func(_ []run, settled []settlement) bool {
		dead := 0
		for _, s := range settled {
			if s.Result == queuey.DeadLettered {
				dead++
			}
		}
		return dead >= n
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.dead)
}

func of(id string, runs []run) []run {
	var out []run
	for _, r := range runs {
		if r.JobID == id {
			out = append(out, r)
		}
	}
	return out
}

// attempts lists the runs' (attempt, deferrals) pairs, for comparison.
func attempts(runs []run) [][2]int {
	var out [][2]int
	for _, r := range runs {
		out = append(out, [2]int{r.Attempt, r.Deferrals})
	}
	return out
}

func describe(runs []run) string {
	s := ""
	for _, r := range runs {
		s += fmt.Sprintf("  %s %s attempt %d deferrals %d priority %d at %s\n",
			r.Name, r.Queue, r.Attempt, r.Deferrals, r.Priority, r.At.Format("15:04:05.000"))
	}
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
