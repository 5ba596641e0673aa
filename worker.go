package queuey

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/supervisor"
)

// DefaultRepublishDelay is WorkerConfig.RepublishDelay's default.
const DefaultRepublishDelay = time.Second

// DefaultShutdownTimeout is how long a stopping worker waits for running
// handlers before cancelling their ctx.
const DefaultShutdownTimeout = 30 * time.Second

// DefaultUnknownKindWait is WorkerConfig.UnknownKindWait's default.
const DefaultUnknownKindWait = time.Hour

// WorkerConfig configures a Worker. A nil config means every default.
type WorkerConfig struct {
	// Queues names the queues (Queue.Name) this worker consumes. Default:
	// every queue of the set.
	Queues []string
	// Concurrency caps the handlers running at once across all queues.
	// Default: the sum of the consumed queues' prefetch.
	Concurrency int
	// JobTimeout is the timeout of queues that set none. Default: none.
	JobTimeout time.Duration
	// ShutdownTimeout bounds the wait for running handlers once Run's ctx
	// ends; then their ctx is cancelled, and they have as long again to
	// return (see Run). Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Middleware wraps every handler run, the first outermost.
	Middleware []Middleware
	// Hooks observe every delivery and republish (package trace uses them).
	Hooks *Hooks
	// OnDeadLetter, when set, is called before each dead-letter publish,
	// with why: a place to alert. It runs on the worker's goroutine that
	// settles the job, so keep it quick. A panic in it is logged as an
	// error; the dead letter goes ahead.
	OnDeadLetter func(ctx context.Context, dl DeadLetterEvent)
	// PoisonAfter dead-letters, as poison, a job that kills its worker
	// process. The jobs a dead worker held come back together, the
	// broker cannot say which one killed it, so they are not counted:
	// they go to the queue's suspects queue (<q>.suspects) and run there
	// one at a time, alone on their queue: the worker takes none of the
	// queue's deliveries meanwhile (other queues run on). A job that was
	// running alone when its worker died is counted (the count travels in
	// the message); at PoisonAfter counts it is dead-lettered. So a job
	// that kills its worker every time goes after PoisonAfter+1 crashes,
	// and a bystander is counted only if it was running alone on its
	// queue: a crash that another queue's job causes then counts it once.
	// Deliveries a stop or a pause gives back unstarted, and jobs a stop
	// cuts short, are published again unchanged and acked rather than
	// requeued, so that they do not come back as if from a crash.
	// Default 0: off.
	PoisonAfter int
	// MaxMessageBytes dead-letters, verbatim and without decoding it, a
	// delivery whose body is larger (cause CauseTooLarge): a worker need
	// not read a body of any size the broker accepts. Default
	// DefaultMaxMessageBytes, the producer's; negative: no limit.
	MaxMessageBytes int
	// RepublishDelay is the first wait before a retry, deferral or dead
	// letter whose publish failed (the broker refused a hold queue, say)
	// is published again. The wait doubles at each try, up to 30 s, with
	// jitter; the delivery stays unacked meanwhile and its handler does
	// not run again. After five tries a hold goes to the dead letters
	// (cause CauseHoldRefused) and a dead letter goes on being tried. A
	// worker that stops meanwhile gives the delivery back to the broker,
	// and it runs again (at least once).
	// Default DefaultRepublishDelay.
	RepublishDelay time.Duration
	// UnknownKindWait is how long a job of a kind this worker has no
	// handler for waits for a worker that has one, as during a rolling
	// deploy, when only the new version handles a new kind. Such a job is
	// not run: it is held back (outcome Unhandled) and offered again a
	// minute later (rounded up to RetryGranularity), behind the backlog
	// (priority 0), with its attempt and deferrals unchanged; it is
	// logged at WARN each time. Once it has waited UnknownKindWait since a
	// worker first held it back, it is dead-lettered (cause
	// CauseNoHandler, the wait in the reason) and logged at ERROR.
	// Default DefaultUnknownKindWait; negative: dead-letter it at once.
	UnknownKindWait time.Duration
	// Clock drives timeouts, backoffs and restarts. A *clock.Mock's
	// timeout contexts (a job's JobTimeout) are made so that their error
	// can be read while the mock ends them (the mock's own read it
	// without a lock: a data race under -race). Default: the real clock.
	Clock clock.Clock
	// Rand seeds every random choice of the worker: the jitter of retry
	// backoffs (Backoff.Jitter), of republish backoffs (RepublishDelay)
	// and of restarts after a crash. NewWorker draws from it, on the
	// caller's goroutine, to seed the worker's own sources, one per use,
	// and keeps no reference to it: it need not be safe for concurrent
	// use. The same seed gives each use the same sequence of draws; which
	// job gets which draw follows the order in which jobs fail, which is
	// fixed when one job runs at a time (Concurrency 1, one queue) and up
	// to the scheduler otherwise. Default: nil, randomly seeded sources.
	// Package clocktest sets it from Options.Seed.
	Rand *rand.Rand
	// Logger receives the job log lines. Default slog.Default().
	Logger *slog.Logger
}

// Worker consumes queues and runs their jobs' handlers. Register handlers
// with Handle, then call Run once.
type Worker struct {
	backend         broker.Backend
	set             *queueSet
	queues          []*queueConfig
	schedules       []*scheduleActor // AddSchedule's, before Run
	concurrency     int
	shutdownTimeout time.Duration
	poisonAfter     int
	hookCalls       hookCaller // calls hooks, each guarded (the scheduler's)
	clock           clock.Clock
	log             *slog.Logger
	jitter          jitterSources // WorkerConfig.Rand's

	jobs        *jobRunner             // what the handler goroutines run
	hold        *holdActor             // set by Run before its queue actors start
	cancels     *cancelsActor          // nil when the backend keeps no ledger of cancellations
	queueActors map[string]*queueActor // by Queue.Name, of w.queues
	settler     *settler               // carries out the settlements
	abandoned   atomic.Int64           // queues (and handlers of lost consumers) a stop gave up on

	mu    sync.Mutex
	state workerState
}

type workerState int

const (
	workerIdle workerState = iota
	workerRunning
	workerDone
)

// NewWorker validates set and cfg and returns a worker for backend. It
// declares nothing until Run.
func NewWorker(backend broker.Backend, set QueueSet, cfg *WorkerConfig) (*Worker, error) {
	if backend == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidQueue)
	}
	s, err := resolve(set)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &WorkerConfig{}
	}
	if err := checkWorkerConfig(cfg); err != nil {
		return nil, err
	}
	w := newWorker(backend, s, cfg)
	if w.queues, err = workerQueues(s, cfg.Queues); err != nil {
		return nil, err
	}
	if err := checkConsumers(backend, len(w.queues)); err != nil {
		return nil, err
	}
	for _, q := range w.queues {
		w.concurrency += q.prefetch
		w.queueActors[q.Name] = newQueueActor(w, q)
	}
	if cfg.Concurrency > 0 {
		w.concurrency = cfg.Concurrency
	}
	if w.cancels = newCancelsActor(w); w.cancels != nil {
		w.jobs.cancels = w.cancels
		for _, a := range w.queueActors {
			a.gated = true // until the ledger is read
		}
	}
	return w, nil
}

// checkWorkerConfig refuses the negative values of cfg that have no
// meaning.
func checkWorkerConfig(cfg *WorkerConfig) error {
	if cfg.Concurrency < 0 || cfg.JobTimeout < 0 || cfg.ShutdownTimeout < 0 || cfg.RepublishDelay < 0 || cfg.PoisonAfter < 0 {
		return fmt.Errorf("%w: concurrency %d, job timeout %v, shutdown timeout %v, republish delay %v and poison after %d must not be negative",
			ErrInvalidQueue, cfg.Concurrency, cfg.JobTimeout, cfg.ShutdownTimeout, cfg.RepublishDelay, cfg.PoisonAfter)
	}
	return nil
}

// checkConsumers refuses a worker that would have n consumers (a queue
// or a schedule each) on a backend that serves fewer at once.
func checkConsumers(backend broker.Backend, n int) error {
	if l, ok := backend.(broker.ConsumerLimit); ok && n > l.MaxConsumers() {
		return fmt.Errorf("%w: the worker would consume %d queues at once (one per queue and schedule), more than the %s backend serves (%d); "+
			"give some of them to another worker (WorkerConfig.Queues) on another backend", ErrInvalidQueue, n, backend.Name(), l.MaxConsumers())
	}
	return nil
}

// newWorker returns a worker of set for backend with cfg's settings, or
// their defaults; it has no queues yet. It draws from cfg.Rand.
func newWorker(backend broker.Backend, set *queueSet, cfg *WorkerConfig) *Worker {
	w := &Worker{
		backend:         backend,
		set:             set,
		shutdownTimeout: cmp.Or(cfg.ShutdownTimeout, DefaultShutdownTimeout),
		poisonAfter:     cfg.PoisonAfter,
		clock:           orRealClock(cfg.Clock),
		jitter:          newJitter(cfg.Rand),
		log:             orDefaultLogger(cfg.Logger),
		queueActors:     map[string]*queueActor{},
	}
	w.hookCalls = hookCaller{hooks: cfg.Hooks, backend: backend.Name(), set: set, log: w.log}
	given := &givenBack{}
	unknownKindWait := cmp.Or(cfg.UnknownKindWait, DefaultUnknownKindWait)
	w.settler = &settler{
		backend: backend, set: set, clock: w.clock, hooks: w.hookCalls,
		onDeadLetter:    cfg.OnDeadLetter,
		unknownKindWait: unknownKindWait,
		republishDelay:  cmp.Or(cfg.RepublishDelay, DefaultRepublishDelay),
		republishJitter: w.jitter.republish,
		poisonAfter:     w.poisonAfter,
		givenBack:       given,
	}
	w.jobs = &jobRunner{
		backend: backend, set: set, handlers: map[string]handler{},
		middleware: slices.Clone(cfg.Middleware), hookCalls: w.hookCalls,
		clock: w.clock, log: w.log, retryJitter: w.jitter.retry,
		jobTimeout:      cfg.JobTimeout,
		poisonAfter:     w.poisonAfter,
		maxBytes:        cmp.Or(cfg.MaxMessageBytes, DefaultMaxMessageBytes),
		unknownKindWait: unknownKindWait,
		overrides:       &retryOverrideSet{},
		settler:         w.settler,
		givenBack:       given,
	}
	return w
}

// workerQueues are the queues of s a worker configured with names
// (WorkerConfig.Queues) consumes: every queue when names is empty, else
// the queues named, each once, in the order first named.
func workerQueues(s *queueSet, names []string) ([]*queueConfig, error) {
	if len(names) == 0 {
		return s.ordered, nil
	}
	var queues []*queueConfig
	for _, name := range names {
		q, ok := s.byName[name]
		if !ok {
			return nil, fmt.Errorf("%w: worker queue %q is not in the queue set", ErrUnknownQueue, name)
		}
		if !slices.Contains(queues, q) {
			queues = append(queues, q)
		}
	}
	return queues, nil
}

// Concurrency is the cap on handlers running at once.
func (w *Worker) Concurrency() int { return w.concurrency }

// InFlight is how many deliveries of the queue named name (Queue.Name)
// the worker holds unsettled: the fill of its queue actor's mailbox,
// waiting for a handler, running, or being settled; at most the queue's
// prefetch. A queue that stays at its prefetch waits for handlers (raise
// Concurrency, or accept it as backpressure); one that stays well below
// waits for the broker (a larger prefetch lets more travel at once). It
// is 0 for a queue the worker does not consume.
func (w *Worker) InFlight(name string) int {
	if a, ok := w.queueActors[name]; ok {
		return int(a.gauges.inFlight.Load())
	}
	return 0
}

// SettleFailures counts the failed tries to tell the broker a job's
// outcome: a failed ack (the job comes back: duplicate work), or a failed
// publish of a retry, deferral or dead letter (tried again; see
// RepublishDelay).
func (w *Worker) SettleFailures() uint64 { return w.settler.failures.Load() }

// Run declares the consumed queues, starts one supervised queue actor per
// queue and the hold actor, and runs jobs until ctx ends. Then it stops
// gracefully: it stops pulling, gives deliveries not yet started back to the
// broker, waits up to ShutdownTimeout for running handlers, then cancels
// their ctx and waits up to ShutdownTimeout more for them to return (with
// PoisonAfter, 10 s more, for their jobs to be published again), and
// returns nil. A handler that ignores its cancelled ctx cannot be stopped:
// Run then returns ErrHandlersStillRunning, leaving it running, its job
// unsettled (the broker hands it out again; at least once).
//
// It returns an error when it cannot start, when the backend is closed
// under it, or when a queue actor crashes more often than its supervisor
// allows. A worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.startRunning(); err != nil {
		return err
	}
	defer w.markDone()
	if err := w.declareQueues(ctx); err != nil {
		return err
	}

	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	// A buffer for every delivery the queue actors may hold lets a handler
	// goroutine that is done take its next task without waiting for its
	// queue actor to wake; as many publishes in flight at the hold actor
	// as those deliveries, twice (a restarted queue actor's and those of
	// the run before it), keep every one of them moving.
	buffer := 0
	for _, q := range w.queues {
		buffer += q.prefetch
	}
	w.hold = newHoldActor(holder{backend: w.backend, set: w.set, log: w.log, clock: w.clock}, 2*buffer, w.settler.publishAndAck)
	w.settler.hold = w.hold
	defer w.hold.Stop()
	tasks, quit := make(chan task, buffer), make(chan struct{})
	pool := w.startPool(tasks, quit)
	w.log.Info("worker starting", "queues", len(w.queues), "concurrency", w.concurrency, "handlers", len(w.jobs.handlers))
	err := w.supervisor(ctx, fail, tasks).Run(ctx)
	close(quit) // the pool's channel stays open: a queue actor abandoned by the supervisor may still send
	w.waitPool(pool)
	err = w.stopError(ctx, err)
	w.log.Info("worker stopped", "settle_failures", w.SettleFailures(), "error", err)
	return err
}

// startRunning moves w from idle to running: a worker runs once, and
// only with a handler or a schedule.
func (w *Worker) startRunning() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.state != workerIdle:
		return ErrWorkerStopped
	case len(w.jobs.handlers) == 0 && len(w.schedules) == 0:
		return ErrNoHandlers
	}
	w.state = workerRunning
	return nil
}

// markDone records that w's Run has returned: it does not run again.
func (w *Worker) markDone() {
	w.mu.Lock()
	w.state = workerDone
	w.mu.Unlock()
}

// declareQueues declares the queues w consumes, with their suspects
// queues when PoisonAfter is on.
func (w *Worker) declareQueues(ctx context.Context) error {
	specs := make([]broker.QueueSpec, 0, len(w.queues))
	for _, q := range w.queues {
		specs = append(specs, q.spec())
		if w.poisonAfter > 0 {
			specs = append(specs, q.suspects())
		}
	}
	if err := w.backend.Declare(ctx, specs...); err != nil {
		return fmt.Errorf("declare queues: %w", err)
	}
	return nil
}

// startPool starts the Concurrency handler goroutines, which take tasks
// until quit is closed.
func (w *Worker) startPool(tasks <-chan task, quit <-chan struct{}) *sync.WaitGroup {
	pool := new(sync.WaitGroup)
	for slot := range w.concurrency {
		pool.Go(func() { w.jobs.serve(slot, tasks, quit) })
	}
	return pool
}

// stopError is what Run returns once its supervisor has returned err:
// err, else the cause a queue actor cancelled ctx with, else
// ErrHandlersStillRunning when a stop abandoned handlers, else nil.
func (w *Worker) stopError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, ctx.Err()) {
		err = cause
	}
	if n := w.abandoned.Load(); n > 0 && err == nil {
		err = fmt.Errorf("%w: in %d queue(s), after ShutdownTimeout (%v) and their ctx's cancellation; their jobs were not settled, and the broker hands them out again",
			ErrHandlersStillRunning, n, w.shutdownTimeout)
	}
	return err
}

// supervisor is the worker's supervision tree: the hold actor, then one
// queue actor per consumed queue, then one schedule actor per schedule,
// each restarted alone when it crashes. They stop in reverse order: the
// schedules (a leader gives its lead back) first, the queue actors, which
// wait for their handlers' holds, before the hold actor.
func (w *Worker) supervisor(ctx context.Context, fail context.CancelCauseFunc, tasks chan task) *supervisor.Supervisor {
	children := []supervisor.Child{{Name: "hold", Run: w.hold.Run, Restart: supervisor.Permanent}}
	if w.cancels != nil && len(w.consumed()) > 0 { // a worker that runs no job has nothing to cancel
		children = append(children, supervisor.Child{Name: "cancels", Run: w.cancels.Run, Restart: supervisor.Permanent})
	}
	for _, q := range w.consumed() {
		a := w.queueActors[q.Name]
		a.pool, a.fail, a.stopping = tasks, fail, ctx
		children = append(children, supervisor.Child{Name: "queue:" + q.broker, Run: a.Run, Restart: supervisor.Permanent})
	}
	for _, a := range w.schedules {
		children = append(children, supervisor.Child{Name: "schedule:" + a.s.Name, Run: a.Run, Restart: supervisor.Permanent})
	}
	// A queue actor gives its handlers 2×ShutdownTimeout, and with
	// PoisonAfter giveBackTimeout more (waitOut); this is a backstop.
	backstop := 3 * w.shutdownTimeout
	if w.poisonAfter > 0 {
		backstop += giveBackTimeout
	}
	return supervisor.New(supervisor.Spec{Name: "worker", Clock: w.clock, Logger: w.log, ShutdownTimeout: backstop, Rand: w.jitter.restart.Float64}, children...)
}

// consumed are the queues w takes jobs from: its queues, or none when it
// has no handler at all (a worker that only leads schedules would hold
// every job back for want of one).
func (w *Worker) consumed() []*queueConfig {
	if len(w.jobs.handlers) == 0 {
		return nil
	}
	return w.queues
}

// waitPool waits for the handler goroutines to end, ShutdownTimeout at
// most: those of a consumer that was lost run on, cancelled, after their
// queue actor restarted. One that ignores its ctx is abandoned as in a
// queue actor's stop; those already abandoned are not waited for.
func (w *Worker) waitPool(pool *sync.WaitGroup) {
	if w.abandoned.Load() > 0 {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pool.Wait()
	}()
	timer := w.clock.Timer(w.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		w.log.Error("handlers cancelled when their consumer was lost ignored their ctx; abandoning them", "waited", w.shutdownTimeout)
		w.abandoned.Add(1)
	}
}

// SetQueueRetryPolicy replaces, while the worker runs, the retry policy of
// the queue named name (Queue.Name); nil goes back to the queue's own. It
// applies from the next failure on.
func (w *Worker) SetQueueRetryPolicy(name string, p *RetryPolicy) error {
	if _, ok := w.set.byName[name]; !ok {
		return fmt.Errorf("%w: queue %q is not in the worker's queue set", ErrUnknownQueue, name)
	}
	return w.jobs.overrides.set(false, name, p)
}

// SetKindRetryPolicy sets, while the worker runs, the retry policy of jobs
// of kind; nil removes it. It wins over the queue's policy, and a job's
// own RetryPolicy wins over it.
func (w *Worker) SetKindRetryPolicy(kind string, p *RetryPolicy) error {
	if err := checkKind(kind); err != nil {
		return err
	}
	return w.jobs.overrides.set(true, kind, p)
}
