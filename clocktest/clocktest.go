package clocktest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
)

// Epoch is where the harness's mock clock starts.
var Epoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Options adjust a Harness. A nil Options means every default.
type Options struct {
	// Worker configures the worker. The harness sets its Clock, adds the
	// run log's middleware last, and defaults Concurrency to 1 so that the
	// run order is the order the backend hands jobs out in.
	Worker queuey.WorkerConfig
	// Logger receives the worker's and producer's log lines. Default: none.
	Logger *slog.Logger
	// WrapBackend, when set, wraps the memory backend for the worker and
	// the producer: a test injects faults (a refused publish, a failing
	// ack) through it. Harness.Backend stays the memory backend, for
	// inspection.
	WrapBackend func(*memory.Backend) broker.Backend
}

// Harness is the system under test, in virtual time.
type Harness struct {
	// T is the test, inside the bubble.
	T *testing.T
	// Clock is the mock clock every timer of the system reads.
	Clock *clock.Mock
	// Backend is the in-memory broker; its inspection helpers tell what is
	// pending, held, in flight, acked and dead-lettered.
	Backend *memory.Backend
	// Producer publishes to Backend; its queues are declared.
	Producer *queuey.Producer
	// Worker consumes Backend. Register handlers before the first Advance,
	// WaitFor or Start.
	Worker *queuey.Worker
	// Log records every handler run.
	Log *RunLog

	cancel context.CancelFunc
	done   chan error
	err    error
	ended  bool
}

// Run runs fn in a new synctest bubble with a harness for set, and stops
// the harness when fn returns.
func Run(t *testing.T, set queuey.QueueSet, opts *Options, fn func(t *testing.T, h *Harness)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		fn(t, New(t, set, opts))
	})
}

// New builds a harness for set. It must be called inside a synctest bubble
// (synctest.Test); Run does that for you. The harness is stopped, and its
// backend closed, when t's test ends.
func New(t *testing.T, set queuey.QueueSet, opts *Options) *Harness {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	mock := clock.NewMock()
	mock.Set(Epoch)
	h := &Harness{T: t, Clock: mock, Backend: memory.New(&memory.Options{Clock: mock}), Log: &RunLog{}}

	var backend broker.Backend = h.Backend
	if opts.WrapBackend != nil {
		backend = opts.WrapBackend(h.Backend)
	}
	var err error
	h.Producer, err = queuey.NewProducer(t.Context(), backend, set, &queuey.ProducerConfig{Clock: mock, Logger: logger})
	if err != nil {
		t.Fatalf("clocktest: producer: %v", err)
	}
	wc := opts.Worker
	wc.Clock, wc.Logger = mock, logger
	if wc.Concurrency == 0 {
		wc.Concurrency = 1
	}
	wc.Middleware = append(slices.Clone(wc.Middleware), h.Log.Middleware(mock))
	h.Worker, err = queuey.NewWorker(backend, set, &wc)
	if err != nil {
		t.Fatalf("clocktest: worker: %v", err)
	}
	t.Cleanup(func() {
		if h.ended { // the test stopped it and saw the result
			_ = h.Backend.Close()
			return
		}
		if err := h.Stop(); err != nil {
			t.Errorf("clocktest: worker stopped with: %v", err)
		}
		_ = h.Backend.Close()
	})
	return h
}

// Start starts the worker if it is not running yet, and waits until the
// system is idle.
func (h *Harness) Start() {
	h.T.Helper()
	if h.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.Worker.Run(ctx) }()
	synctest.Wait()
}

// Advance starts the worker if needed, moves the clock forward by d, firing
// every timer that falls due on the way in order, and returns when the
// system is idle again: every job that was due has run and settled.
func (h *Harness) Advance(d time.Duration) {
	h.T.Helper()
	h.Start()
	synctest.Wait() // what the test just did settles at the current time
	h.Clock.Add(d)
	synctest.Wait()
}

// Idle returns when every goroutine of the system is blocked: nothing more
// happens until the clock moves.
func (h *Harness) Idle() { synctest.Wait() }

// WaitFor starts the worker if needed and lets virtual time pass, 100 ms at a
// time, until cond holds; after 1,000 steps it fails the test with
// "timed out waiting for: <desc>".
func (h *Harness) WaitFor(desc string, cond func() bool) {
	h.T.Helper()
	h.Start()
	for range 1000 {
		if cond() {
			return
		}
		h.Advance(100 * time.Millisecond)
	}
	if !cond() {
		h.T.Fatalf("timed out waiting for: %s", desc)
	}
}

// BeginStop asks the worker to stop and returns once the system is idle,
// without moving the clock: handlers still running go on, so a test can
// look at a stop in progress. Stop then finishes it.
func (h *Harness) BeginStop() {
	if h.done == nil || h.ended {
		return
	}
	h.cancel()
	synctest.Wait()
}

// Stop stops the worker gracefully, advancing the clock while it waits for
// handlers that wait on it, and returns what Run returned. Later calls
// return the same.
func (h *Harness) Stop() error {
	if h.done == nil || h.ended {
		return h.err
	}
	h.cancel()
	for range 1000 {
		synctest.Wait()
		select {
		case h.err = <-h.done:
			h.ended = true
			return h.err
		default:
			h.Clock.Add(time.Second) // a shutdown waiting on its timeout
		}
	}
	h.T.Fatalf("clocktest: the worker did not stop within 1,000 s of virtual time")
	return nil
}

// Entry is one handler run, as the handler saw it.
type Entry struct {
	queuey.JobContext
	// At is when it started, on the mock clock.
	At time.Time
}

// RunLog records every handler run. It is safe for concurrent use.
type RunLog struct {
	mu   sync.Mutex
	runs []Entry
}

// Middleware records the runs of a worker into l, stamped by c. The
// harness installs it on its own worker; add it to another worker (a second
// worker on the same backend) to log that one's runs too.
func (l *RunLog) Middleware(c clock.Clock) queuey.Middleware {
	return func(ctx context.Context, jc queuey.JobContext, next func(context.Context) error) error {
		l.mu.Lock()
		l.runs = append(l.runs, Entry{JobContext: jc, At: c.Now()})
		l.mu.Unlock()
		return next(ctx)
	}
}

// Runs lists every run so far, in start order.
func (l *RunLog) Runs() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

// Of lists the runs of one job.
func (l *RunLog) Of(jobID string) []Entry {
	return slices.DeleteFunc(l.Runs(), func(r Entry) bool { return r.JobID != jobID })
}

// Order lists the job ids of every run, in start order.
func (l *RunLog) Order() []string {
	var ids []string
	for _, r := range l.Runs() {
		ids = append(ids, r.JobID)
	}
	return ids
}

// Len counts the runs.
func (l *RunLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.runs)
}
