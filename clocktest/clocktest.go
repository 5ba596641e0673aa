package clocktest

import (
	"context"
	"log/slog"
	"net/http"
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
	// run log's middleware last, defaults Concurrency to 1 so that the
	// run order is the order the backend hands jobs out in, and sets Rand
	// from Seed unless it is set.
	Worker queuey.WorkerConfig
	// Seed seeds every random choice of the worker (WorkerConfig.Rand):
	// the jitter of retry backoffs, of republish backoffs and of restarts.
	// 0 takes the seed from the environment variable QUEUEY_SEED
	// (SeedEnv) when it is set, and otherwise picks a random seed for the
	// run. A test that fails logs its seed and how to rerun with it
	// ("clocktest: seed 42; rerun with QUEUEY_SEED=42"); Harness.Seed
	// has it. With one job running at a time (Concurrency 1, the default,
	// and one queue), a seed fixes every run time; with more, which job
	// gets which draw follows the scheduler. Ignored when Worker.Rand is
	// set.
	Seed uint64
	// Watchdog bounds, in real time, each wait of Run's harness for the
	// system to go idle (and, at the end, for the bubble's goroutines to
	// exit). Past it, if goroutines of the bubble are blocked where the
	// bubble cannot see them (real I/O: a network connection, a file, a
	// syscall), the wait would never end: the watchdog ends the test
	// process with a message that says why, what to do (NewHTTPServer in
	// place of httptest.NewServer), and their stacks. A wait in which a
	// goroutine is still running is let be. Default DefaultWatchdog;
	// negative: no watchdog. A harness made with New has none.
	Watchdog time.Duration
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
	Clock *Clock
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
	// Seed is the seed of the worker's random choices (Options.Seed); 0
	// when Options.Worker.Rand was given.
	Seed uint64

	wd      *watchdog     // Run's; nil for New
	servers []*HTTPServer // closed after the worker stopped
	cancel  context.CancelFunc
	done    chan error
	err     error
	ended   bool
}

// Run runs fn in a new synctest bubble with a harness for set, and stops
// the harness when fn returns. A watchdog (Options.Watchdog) ends the test
// process, with a message that says why, if the system is stuck on real
// I/O.
func Run(t *testing.T, set queuey.QueueSet, opts *Options, fn func(t *testing.T, h *Harness)) {
	t.Helper()
	var limit time.Duration
	if opts != nil {
		limit = opts.Watchdog
	}
	wd := startWatchdog(t.Name(), limit)
	defer wd.stop()
	synctest.Test(t, func(t *testing.T) {
		wd.enter()
		t.Cleanup(wd.end) // the last cleanup: synctest.Test then waits for the bubble's goroutines
		fn(t, newHarness(t, set, opts, wd))
	})
}

// New builds a harness for set. It must be called inside a synctest bubble
// (synctest.Test); Run does that for you, and watches the harness
// (Options.Watchdog), which New cannot do from inside the bubble. The
// harness is stopped, and its backend closed, when t's test ends.
func New(t *testing.T, set queuey.QueueSet, opts *Options) *Harness {
	t.Helper()
	return newHarness(t, set, opts, nil)
}

// newHarness is New, watched by wd (nil: not watched).
func newHarness(t *testing.T, set queuey.QueueSet, opts *Options, wd *watchdog) *Harness {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	mock := NewClock()
	h := &Harness{T: t, Clock: mock, Backend: memory.New(&memory.Options{Clock: mock}), Log: &RunLog{}, wd: wd}
	wc := h.workerConfig(opts, logger)

	var backend broker.Backend = h.Backend
	if opts.WrapBackend != nil {
		backend = opts.WrapBackend(h.Backend)
	}
	var err error
	h.Producer, err = queuey.NewProducer(t.Context(), backend, set, &queuey.ProducerConfig{Clock: mock, Logger: logger})
	if err != nil {
		t.Fatalf("clocktest: producer: %v", err)
	}
	h.Worker, err = queuey.NewWorker(backend, set, &wc)
	if err != nil {
		t.Fatalf("clocktest: worker: %v", err)
	}
	t.Cleanup(h.end)
	return h
}

// workerConfig is the worker's configuration: opts.Worker on the harness's
// clock, logger, run log and seed. The seed is logged if the test fails.
func (h *Harness) workerConfig(opts *Options, logger *slog.Logger) queuey.WorkerConfig {
	h.T.Helper()
	wc := opts.Worker
	wc.Clock, wc.Logger = h.Clock, logger
	if wc.Concurrency == 0 {
		wc.Concurrency = 1
	}
	wc.Middleware = append(slices.Clone(wc.Middleware), h.Log.Middleware(h.Clock))
	seed, from, err := pickSeed(opts)
	if err != nil {
		h.T.Fatal(err)
	}
	if from != seedNone {
		h.Seed, wc.Rand = seed, seeded(seed)
	}
	logSeedOnFailure(h.T, seed, from) // registered first, it runs after h.end
	h.wd.tell(seedLine(seed, from))
	return wc
}

// end stops the harness at the end of the test, unless the test did, then
// closes its HTTP servers and its backend.
func (h *Harness) end() {
	if !h.ended {
		if err := h.Stop(); err != nil {
			h.T.Errorf("clocktest: worker stopped with: %v", err)
		}
	}
	for _, s := range slices.Backward(h.servers) {
		s.Close()
	}
	_ = h.Backend.Close()
}

// NewHTTPServer starts an HTTPServer for handler (see NewHTTPServer) that
// the harness closes when the test ends, once the worker has stopped. A
// handler that calls it through its Client runs in virtual time, as any.
func (h *Harness) NewHTTPServer(handler http.Handler) *HTTPServer {
	s := NewHTTPServer(handler)
	h.servers = append(h.servers, s)
	return s
}

// wait returns when every goroutine of the system is blocked, under the
// watchdog's eye.
func (h *Harness) wait() { h.wd.waiting(synctest.Wait) }

// move moves the clock forward by d, under the watchdog's eye: the mock
// clock yields, between timers, by sleeping in the bubble's time, which
// stands still while a goroutine of the bubble is blocked on real I/O.
func (h *Harness) move(d time.Duration) { h.wd.waiting(func() { h.Clock.Add(d) }) }

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
	h.wait()
}

// Advance starts the worker if needed, moves the clock forward by d, firing
// every timer that falls due on the way in order, and returns when the
// system is idle again: every job that was due has run and settled.
func (h *Harness) Advance(d time.Duration) {
	h.T.Helper()
	h.Start()
	h.wait() // what the test just did settles at the current time
	h.move(d)
	h.wait()
}

// Idle returns when every goroutine of the system is blocked: nothing more
// happens until the clock moves.
func (h *Harness) Idle() { h.wait() }

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
	h.wait()
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
		h.wait()
		select {
		case h.err = <-h.done:
			h.ended = true
			return h.err
		default:
			h.move(time.Second) // a shutdown waiting on its timeout
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
