package queuey

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/mailbox"
)

// jobRunner is what the worker's handler goroutines run: it reads a
// delivery, runs its handler under the middleware, the job timeout and the
// Deliver hook, decides what the result makes of the job (settle.go) and
// reports that to the queue actor that handed the delivery out. It holds
// the worker's configuration that running a job reads, and nothing of the
// worker's run (its queue actors, its stop): Worker is the facade over it.
// Handle fills handlers before Run; from Run on they are only read.
type jobRunner struct {
	backend         broker.Backend
	set             *queueSet
	handlers        map[string]handler // by kind
	middleware      []Middleware
	hookCalls       hookCaller // the worker's hooks (the Deliver hook too), each call guarded
	clock           clock.Clock
	log             *slog.Logger
	retryJitter     *rand.Rand    // retry backoffs' (Backoff.Jitter)
	jobTimeout      time.Duration // of queues that set none
	poisonAfter     int
	maxBytes        int           // negative: no limit
	unknownKindWait time.Duration // negative: dead-letter at once
	overrides       *retryOverrideSet
	cancels         *cancelsActor // nil when the backend keeps no ledger of cancellations
	settler         *settler      // settles acks and requeues at once, and a suspect run alone
	givenBack       *givenBack    // deliveries requeued after a failed republish (PoisonAfter)
}

// task is a message to the worker's handler goroutines: run one delivery
// up to what is to become of it, and report that to its queue actor.
type task struct {
	ctx      context.Context // the queue actor's handler ctx: ends at a hard stop or with the consumer
	holdBack <-chan struct{} // closed once the queue actor starts nothing more (a pause, a stop)
	q        *queueConfig
	d        broker.Delivery
	alone    bool                       // take a job from the suspects queue and run it alone (poison.go); d is nil
	inbox    *mailbox.Mailbox[queueMsg] // its queue actor's
	run      int                        // the queue actor's run that handed it out
	slot     int                        // the handler goroutine's, in cancelsActor.running
}

// serve is one of the worker's handler goroutines: it performs tasks until
// quit is closed. Its queue actor's inbox has room for every task it
// handed out, so the report never waits.
func (r *jobRunner) serve(slot int, tasks <-chan task, quit <-chan struct{}) {
	for {
		select {
		case t := <-tasks:
			t.slot = slot
			m := r.perform(t)
			_ = t.inbox.Put(context.Background(), m) // never closed, never full
			if s, ok := m.(taskToSettle); ok && s.paused != nil {
				waitPaused(t.ctx, s.paused) // a PauseQueue: its queue's next tasks are held back first
			}
		case <-quit:
			return
		}
	}
}

// heldBack reports a task its queue actor no longer wants started: it
// paused or is stopping since it handed the task out, or lost its consumer.
func (t task) heldBack() bool {
	select {
	case <-t.holdBack:
		return true
	default:
		return t.ctx.Err() != nil
	}
}

// giveBackTasks empties the pool's buffer at a stop: each task goes back
// to its queue actor unstarted, so that deliveries not started return to
// the broker at once, not once a handler goroutine is free to refuse them.
func giveBackTasks(pool chan task) {
	for t, ok := tryRecv(pool); ok; t, ok = tryRecv(pool) {
		_ = t.inbox.Put(context.Background(), taskNotStarted{run: t.run, d: t.d, alone: t.alone})
	}
}

// perform carries out one task and says how it went. It never waits for
// the broker: a delivery that only needs an ack (a success) or a requeue
// is settled at once, by a write the broker does not answer; one that
// needs a publish first (a retry, a deferral, a dead letter, a copy) goes
// to the queue actor, which has the hold actor make it and ack the
// delivery on its confirm.
func (r *jobRunner) perform(t task) queueMsg {
	if t.heldBack() {
		return taskNotStarted{run: t.run, d: t.d, alone: t.alone}
	}
	if t.alone {
		return r.runSuspect(t)
	}
	var s settlement // filled in place: a settlement is large, and one returned is copied at each call
	r.process(t, &s)
	if s.action == actAck || s.action == actRequeue {
		r.settler.settled(&s) // on this goroutine's stack: no allocation for most jobs
		return taskSettled{run: t.run}
	}
	m := taskToSettle{run: t.run, s: s.kept()}
	if s.pausing {
		m.paused = make(chan struct{})
	}
	return m
}

// waitPaused waits until the queue actor has paused (it closes paused),
// or ctx ends.
func waitPaused(ctx context.Context, paused chan struct{}) {
	select {
	case <-paused:
	case <-ctx.Done():
	}
}

// process runs one delivery up to what is to become of it, s, telling
// the Deliver hook.
func (r *jobRunner) process(t task, s *settlement) {
	started := r.clock.Now()
	var rd readDelivery
	r.read(t, started, &rd)
	ctx, hook := r.deliverHook(t.ctx, t.q, &rd, started)
	*s = r.execute(ctx, t, &rd)
	if s.msg.Headers == nil && s.action != actAck && s.action != actRequeue {
		s.msg.Headers = carriedHeaders(rd.msg.Headers)
	}
	s.ctx, s.d, s.q, s.hook, s.inbox, s.run = ctx, t.d, t.q, hook, t.inbox, t.run
}

// readDelivery is what was read of a delivery: its message, and its
// envelope and the JobContext its handler is to see, unless its body
// could not be read (err).
type readDelivery struct {
	msg broker.Message
	env broker.Envelope
	jc  JobContext
	err error // over the size limit, or not an envelope
}

// read reads t's delivery, started at started, into rd.
func (r *jobRunner) read(t task, started time.Time, rd *readDelivery) {
	rd.msg = t.d.Message()
	if r.maxBytes >= 0 && len(rd.msg.Body) > r.maxBytes {
		rd.err = &tooLargeError{size: len(rd.msg.Body), limit: r.maxBytes}
	} else if rd.env, rd.err = broker.DecodeMessage(rd.msg); rd.err == nil {
		rd.jc = r.jobContext(t.q, rd.env, t.d, started)
	}
}

// deliverHook tells the Deliver hook about a delivery, which may change
// rd.jc; it returns the ctx the job runs with and the hook's call, to be
// told the outcome (nil without a Deliver hook).
func (r *jobRunner) deliverHook(ctx context.Context, q *queueConfig, rd *readDelivery, started time.Time) (context.Context, *deliveryHook) {
	if hooks := r.hookCalls.hooks; hooks == nil || hooks.Deliver == nil {
		return ctx, nil
	}
	due := rd.msg.DueAt
	if due.IsZero() && !rd.msg.FromHold && rd.err == nil {
		due = rd.env.EnqueuedAt() // due when enqueued (see broker.Message.DueAt)
	}
	h := &deliveryHook{r: r, info: DeliveryInfo{System: r.backend.Name(), Queue: q.Name, BrokerQueue: q.broker, Job: rd.jc,
		Headers: rd.msg.Headers, DueAt: due, Started: started}}
	hookCtx := h.call(ctx)
	rd.jc = h.info.Job
	return hookCtx, h
}

// deliveryHook is one delivery's call of the Deliver hook: what the hook
// was told and the func it gave for the outcome. It is one allocation per
// delivery, where closures around the two would be three.
type deliveryHook struct {
	r      *jobRunner
	info   DeliveryInfo
	finish func(Outcome) // nil once told, or when the hook gave none
}

// call calls the Deliver hook and returns the ctx the job runs with: ctx
// itself when the hook returns none or panics (hookCaller.guard), with any value,
// nil too (recovered as nil under GODEBUG=panicnil=1).
func (h *deliveryHook) call(ctx context.Context) (hookCtx context.Context) {
	hookCtx = ctx
	defer h.r.hookCalls.recover("Deliver")
	c, finish := h.r.hookCalls.hooks.Deliver(ctx, &h.info)
	h.finish = finish
	if c != nil {
		hookCtx = c
	}
	return hookCtx
}

// outcome tells the hook's outcome func how the delivery ended, once.
func (h *deliveryHook) outcome(out Outcome) {
	finish := h.finish
	h.finish = nil
	if finish == nil {
		return
	}
	defer h.r.hookCalls.recover("Deliver's outcome func")
	finish(out)
}

// execute decides what becomes of a delivery, running its handler when it
// can run: a body that cannot be read, a job that came back from a crash
// too often or a payload that does not decode is dead-lettered without
// running; a job of an unknown kind is held back (unhandled).
func (r *jobRunner) execute(ctx context.Context, t task, rd *readDelivery) settlement {
	if rd.err != nil {
		return r.unreadable(t.q, rd)
	}
	env := rd.env
	env.Queue = t.q.broker // republish where it came from, whatever the body says
	f := &jobFacts{log: jobLog{l: r.log, id: env.JobID, kind: env.JobType, queue: t.q.broker, attempt: env.Attempt}, env: env, jc: rd.jc}
	if c := r.cancels; c != nil {
		j := c.watch(ctx, t.slot, env.JobID) // before the look: see cancelsActor
		defer c.unwatch(t.slot, j)
		ctx = j
		if c.isCancelled(env.JobID) {
			return r.cancelled(f, false, nil)
		}
	}
	if r.poisonAfter > 0 && t.d.Redelivered() && !r.givenBack.take(rd.msg.ID) {
		return r.countRedelivery(f, t.q, rd.msg, t.alone)
	}
	h, ok := r.handlers[env.JobType]
	if !ok {
		return r.unhandled(f, rd.msg.Headers)
	}
	job, err := h.decode(env.Payload)
	if err != nil {
		f.log.Error("payload did not match the handler's job type; dead-lettering", "error", err)
		return deadLetterOf(f, original(env), CauseDecode, "decode error: "+err.Error(), err)
	}
	return r.runHandler(ctx, t, h, job, f)
}

// runHandler runs job's handler and decides, by the job's retry policy,
// what its result makes of it.
func (r *jobRunner) runHandler(ctx context.Context, t task, h handler, job decodedJob, f *jobFacts) settlement {
	policy := r.retryPolicy(t.q, f.env.JobType, h, job)
	f.jc.MaxAttempts = policy.maxAttempts()
	if t.alone {
		f.log.Info("running a job that was in flight when a worker crashed, alone")
	}
	f.log.Debug("running job", "deferrals", f.jc.Deferrals, "priority", f.jc.Priority)
	started := r.clock.Now()
	err := r.call(ctx, t.q, h, job, f.jc)
	ran := r.clock.Since(started)
	var s settlement
	j, _ := ctx.(*jobCtx)
	switch told := j != nil && j.told(); {
	case told && err != nil:
		s = r.cancelled(f, true, err)
	case told:
		r.cancels.forget(f.env.JobID) // it succeeded all the same: it ended
		fallthrough
	default:
		s = r.decide(ctx, t.q, f, policy, err)
	}
	s.out.Ran, s.out.HandlerDuration = true, ran
	return s
}

// unreadable dead-letters, verbatim, a body that is over the size limit or
// is not an envelope.
func (r *jobRunner) unreadable(q *queueConfig, rd *readDelivery) settlement {
	f := &jobFacts{log: jobLog{l: r.log, queue: q.broker}, jc: rd.jc}
	msg := rd.msg
	msg.Queue = q.broker
	msg.Headers = maps.Clone(msg.Headers) // the delivery's own are read-only
	if tooLarge, ok := errors.AsType[*tooLargeError](rd.err); ok {
		f.log.Error("message body is over the worker's size limit; dead-lettering it verbatim, unread", "bytes", tooLarge.size, "limit", tooLarge.limit)
		return deadLetterOf(f, msg, CauseTooLarge, tooLarge.Error(), rd.err)
	}
	f.log.Error("message body is not a valid envelope; dead-lettering it verbatim", "error", rd.err)
	detail := rd.err.Error()
	if m, ok := errors.AsType[*broker.MalformedError](rd.err); ok {
		detail = m.Detail()
	}
	return deadLetterOf(f, msg, CauseMalformed, "malformed envelope: "+detail, rd.err)
}

// jobContext is what the handler of env will see.
func (r *jobRunner) jobContext(q *queueConfig, env broker.Envelope, d broker.Delivery, now time.Time) JobContext {
	return JobContext{
		JobID:         env.JobID,
		Kind:          env.JobType,
		Queue:         q.Name,
		BrokerQueue:   q.broker,
		Attempt:       int(env.Attempt),
		MaxAttempts:   q.retry.maxAttempts(), // a job's own policy is applied once it is decoded
		Deferrals:     int(env.Deferrals),
		Priority:      int(env.Priority),
		EnqueuedAt:    env.EnqueuedAt(),
		Age:           max(0, now.Sub(env.EnqueuedAt())),
		CorrelationID: env.CorrelationID,
		Redelivered:   d.Redelivered(),
		Chain:         chainStepOf(env),
	}
}

// call runs the handler under the middleware, the job timeout and a panic
// guard.
func (r *jobRunner) call(ctx context.Context, q *queueConfig, h handler, job decodedJob, jc JobContext) error {
	timeout := cmp.Or(q.JobTimeout, r.jobTimeout)
	runCtx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = r.clock.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var err error
	if len(r.middleware) == 0 {
		err = runGuarded(runCtx, h, job, jc) // no closures to allocate
	} else {
		err = r.callThroughMiddleware(runCtx, h, job, jc)
	}
	if err == nil {
		return nil
	}
	if timeout > 0 && errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		return &timeoutError{limit: timeout.String(), err: err}
	}
	if p, ok := errors.AsType[*panicError](err); ok {
		r.log.Error("handler panicked", "job_id", jc.JobID, "kind", jc.Kind, "panic", fmt.Sprint(p.value), "stack", string(p.stack))
	}
	return err
}

// callThroughMiddleware runs the handler under the worker's middleware. It
// is apart from call so that the closures, which capture jc, move only
// this call's copy of it to the heap. A middleware's panic is the run's,
// as the handler's is.
func (r *jobRunner) callThroughMiddleware(ctx context.Context, h handler, job decodedJob, jc JobContext) (err error) {
	returned := false
	defer func() { err = panicked(recover(), returned, err) }()
	run := func(ctx context.Context) error { return runGuarded(ctx, h, job, jc) }
	for i := len(r.middleware) - 1; i >= 0; i-- {
		m, next := r.middleware[i], run
		run = func(ctx context.Context) error { return m(ctx, jc, next) }
	}
	err = run(ctx)
	returned = true
	return err
}

// runGuarded runs the handler, turning a panic into a *panicError.
func runGuarded(ctx context.Context, h handler, job decodedJob, jc JobContext) (err error) {
	returned := false
	defer func() { err = panicked(recover(), returned, err) }()
	err = h.run(ctx, job, jc)
	returned = true
	return err
}

// panicked is a run's error once it is over: a *panicError when it did
// not return, err when it did. A run that neither returned nor gave
// recover a value panicked with nil under GODEBUG=panicnil=1, where
// recover gives nil for it: a panic all the same, whose run must not
// count as done.
func panicked(r any, returned bool, err error) error {
	if r == nil && !returned {
		r = new(runtime.PanicNilError)
	}
	if r == nil {
		return err
	}
	return &panicError{value: r, stack: debug.Stack()}
}

// hookCaller calls the worker's hooks for its handler goroutines, its
// settler and its scheduler, each call guarded: a panic in a hook is an
// error log, for a bug in instrumentation must not take the worker down
// with every delivery in flight. The job goes on as if the hook were not
// there.
type hookCaller struct {
	hooks   *Hooks
	backend string // the backend's name, for the Publish hook
	set     *queueSet
	log     *slog.Logger
}

// guard calls a hook (call), recovering from its panic.
func (h hookCaller) guard(which string, call func()) {
	defer h.recover(which)
	call()
}

// recover, deferred, logs a hook's panic, so that the worker goes on
// without the hook (guard).
func (h hookCaller) recover(which string) {
	if r := recover(); r != nil {
		h.log.Error("hook panicked; going on without it", "hook", which, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	}
}

// publish tells the Publish hook about a publish of the worker's (guard):
// it returns what to call with the result.
func (h hookCaller) publish(ctx context.Context, msg *broker.Message, intent publishIntent) func(error) {
	if h.hooks == nil || h.hooks.Publish == nil {
		return func(error) {}
	}
	done := func(error) {}
	h.guard("Publish", func() { done = h.hooks.beforePublish(ctx, h.backend, h.set, msg, intent) })
	return func(err error) { h.guard("Publish's result func", func() { done(err) }) }
}

// tooLargeError: a body over WorkerConfig.MaxMessageBytes, not read.
type tooLargeError struct{ size, limit int }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("too large: %d bytes, over the worker's limit of %d", e.size, e.limit)
}

type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }

type timeoutError struct {
	limit string
	err   error
}

func (e *timeoutError) Error() string { return "job timed out after " + e.limit + ": " + e.err.Error() }
func (e *timeoutError) Unwrap() error { return e.err }
