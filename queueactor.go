package queuey

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/queuey-go/queuey/actor"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/mailbox"
)

// queueActor consumes one queue. Its mailbox holds at most prefetch
// deliveries; its dispatch loop starts a handler per delivery while the
// worker has a free slot. It is a supervisor child: a crash (its consumer
// lost) ends Run with an error and the supervisor starts it again, and the
// broker hands the unsettled deliveries out again.
type queueActor struct {
	w        *Worker
	q        *queueConfig
	hold     *actor.Actor[holdRequest]
	fail     context.CancelCauseFunc // stops the whole worker, for a closed backend
	stopping context.Context         // ends when the worker starts to stop
}

// errConsumerLost reports a consumer that ended on its own.
var errConsumerLost = errors.New("consumer ended unexpectedly")

// errStopTimedOut is why running handlers are cancelled when a stop has
// waited ShutdownTimeout for them.
var errStopTimedOut = errors.New("the worker's stop ran out of time (ShutdownTimeout)")

func (a *queueActor) Run(ctx context.Context) error {
	for {
		resume, again, err := a.runOnce(ctx)
		if again && err == nil && resume.IsZero() {
			if a.stopping.Err() != nil || ctx.Err() != nil {
				return nil // the worker began to stop while the suspect ran
			}
			continue // a suspect ran alone: consume again at once
		}
		if err != nil || resume.IsZero() {
			return err
		}
		a.w.log.Info("queue paused", "queue", a.q.broker, "until", resume)
		t := a.w.clock.Timer(resume.Sub(a.w.clock.Now()))
		select {
		case <-t.C:
			a.w.log.Info("queue resumed", "queue", a.q.broker)
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-a.stopping.Done():
			t.Stop()
			return nil
		}
	}
}

// inUseRetry is how long a queue actor waits to consume again a queue an
// exclusive reader holds.
const inUseRetry = time.Second

// runOnce consumes until the worker stops (zero, nil), the consumer is
// lost (an error), a handler pauses the queue (the time to resume), or a
// suspect of a crash came and ran alone, or an exclusive reader held the
// queue a while (again: consume again at once).
func (a *queueActor) runOnce(ctx context.Context) (resume time.Time, again bool, _ error) {
	consumer, err := a.w.backend.Consume(ctx, a.q.broker, a.q.prefetch)
	if errors.Is(err, broker.ErrNoQueue) {
		// Deleted behind our back: declare it again rather than crash-loop.
		a.w.log.Warn("queue is gone; declaring it again", "queue", a.q.broker)
		if err = a.w.backend.Declare(ctx, a.q.spec()); err == nil {
			consumer, err = a.w.backend.Consume(ctx, a.q.broker, a.q.prefetch)
		}
	}
	if errors.Is(err, broker.ErrClosed) {
		a.fail(fmt.Errorf("queue %q: %w", a.q.broker, err))
		return time.Time{}, false, nil
	}
	if errors.Is(err, broker.ErrInUse) {
		// An exclusive reader has the queue: a dead-letter List, Show or
		// Replay of another queue set, whose dead-letter queue this is.
		// It lets go soon; no crash.
		a.w.log.Warn("queue is held by an exclusive reader (a dead-letter List, Show or Replay); consuming again shortly",
			"queue", a.q.broker, "retry_in", inUseRetry)
		t := a.w.clock.Timer(inUseRetry)
		defer t.Stop()
		select {
		case <-t.C:
			return time.Time{}, true, nil
		case <-ctx.Done():
		case <-a.stopping.Done():
		}
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("consume %q: %w", a.q.broker, err)
	}
	defer consumer.Cancel()

	// Handlers outlive ctx: a graceful stop lets them finish, and only a
	// stop that takes longer than ShutdownTimeout cancels them (hardStop),
	// or the loss of their deliveries with the consumer.
	handlerCtx, cancelHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHandlers(nil)
	hardStop := func() { cancelHandlers(errStopTimedOut) }

	// The supervisor stops its children one at a time; every queue actor
	// stops pulling as soon as the worker is stopping, not when its turn
	// to return comes.
	pullCtx, stopPulling := context.WithCancel(ctx)
	defer stopPulling()
	defer context.AfterFunc(a.stopping, stopPulling)()

	mb := mailbox.New[broker.Delivery](a.q.prefetch)
	// A handler's PauseQueue stops the pulling at once; the latest resume
	// time asked for by any handler of this run wins.
	var resumeMu sync.Mutex
	pause := func(until time.Time) {
		resumeMu.Lock()
		if until.After(resume) {
			resume = until
		}
		resumeMu.Unlock()
		stopPulling()
	}
	// A suspect of a crash (see isolate) stops the pulling too; it runs
	// alone once the rest has run.
	var suspect broker.Delivery
	var setAside []broker.Delivery  // more suspects, pulled meanwhile
	var unstarted []broker.Delivery // pulled when the pulling stopped
	quarantine := func(d broker.Delivery) {
		resumeMu.Lock()
		if suspect == nil {
			suspect = d
		} else {
			setAside = append(setAside, d)
		}
		resumeMu.Unlock()
		stopPulling()
	}
	pumpCtx, stopPump := context.WithCancel(pullCtx)
	defer stopPump()
	pumped := make(chan error, 1)
	var pumpHeld broker.Delivery // received when the pump was stopped
	pumpDone := make(chan struct{})
	lost := make(chan struct{}) // closed when the consumer ended on its own
	go func() {
		defer close(pumpDone)
		held, why := pump(pumpCtx, consumer, mb, lost)
		pumpHeld = held
		pumped <- why
	}()

	// A fixed pool of handler goroutines takes deliveries from the mailbox:
	// no more can run for this queue than its prefetch or the worker's
	// concurrency, and a goroutine that lives on keeps the stack it grew.
	//
	// A goroutine holds taking (read) from taking a delivery until it has
	// either started it or filed it (quarantine, unstarted); the leftovers
	// are collected under taking's write lock, so that a delivery taken
	// as the pulling stops is not filed after they were collected, and left
	// unsettled beside a suspect that runs alone.
	var running sync.WaitGroup
	var taking sync.RWMutex
	for range min(a.q.prefetch, a.w.concurrency) {
		running.Go(func() {
			for {
				taking.RLock()
				d, err := mb.Get(pullCtx)
				if err != nil {
					taking.RUnlock()
					return // stopping, pausing, or the pump closed the mailbox
				}
				if a.w.poisonAfter > 0 && isSuspect(d) {
					quarantine(d)
					taking.RUnlock()
					continue
				}
				if err := a.w.slots.Acquire(pullCtx, 1); err != nil {
					resumeMu.Lock()
					unstarted = append(unstarted, d)
					resumeMu.Unlock()
					taking.RUnlock()
					return
				}
				taking.RUnlock()
				select {
				case <-lost: // the broker took it back with the consumer: it is stale
				default:
					a.w.process(handlerCtx, a.q, a.hold, d, pause)
				}
				a.w.slots.Release(1)
			}
		})
	}
	select {
	case <-pullCtx.Done(): // stopping, or paused
	case <-pumpDone: // the consumer ended
	}
	stopPulling()
	stopPump()
	why := <-pumped
	if why == nil {
		// Stop the consumer before giving deliveries back, or the broker
		// hands them straight back to it, to sit unread until it closes.
		consumer.Stop()
	}
	// Pulled or sent before the stop, never started: back to the broker,
	// unless a suspect is to run alone; then they run first (given back,
	// they would come back redelivered, and suspects themselves).
	<-pumpDone
	// Every delivery taken so far is started or filed, and none is taken
	// after this: the pulling has stopped, so Get fails at once.
	taking.Lock()
	resumeMu.Lock()
	leftovers := append(append(setAside, unstarted...), mb.Drain()...)
	if pumpHeld != nil {
		leftovers = append(leftovers, pumpHeld)
	}
	isolating := suspect != nil && why == nil
	resumeMu.Unlock()
	taking.Unlock()
	if why == nil {
		for d := range consumer.Deliveries() {
			leftovers = append(leftovers, d)
		}
	}
	switch {
	case why != nil: // stale: the broker has them back already
		for _, d := range append(leftovers, suspect) {
			if d != nil {
				requeue(d, jobLog{l: a.w.log, queue: a.q.broker})
			}
		}
	case !isolating:
		a.giveBack(leftovers...)
	}
	if why != nil {
		// The consumer is gone and the broker has taken its deliveries
		// back: the running handlers cannot settle theirs. Cancel them and
		// let the supervisor start consuming again at once, rather than
		// after the longest of them; the worker waits for them at the end.
		cancelHandlers(errConsumerLost)
		a.w.orphans.Go(running.Wait)
	} else {
		a.waitFor(ctx.Done(), doneWhen(running.Wait), hardStop)
	}

	resumeMu.Lock() // every handler has returned: no pause comes after this
	paused := resume
	resumeMu.Unlock()
	switch {
	case isolating && paused.IsZero() && a.stopping.Err() == nil && ctx.Err() == nil:
		return a.isolate(handlerCtx, hardStop, suspect, leftovers), true, nil
	case isolating: // paused or stopping: nothing more runs now
		a.giveBack(append(leftovers, suspect)...)
		return paused, false, nil
	case why == nil:
		return paused, false, nil
	case errors.Is(why, broker.ErrClosed):
		a.fail(fmt.Errorf("queue %q: %w", a.q.broker, why))
		return time.Time{}, false, nil
	default:
		return time.Time{}, false, fmt.Errorf("queue %q: %w", a.q.broker, why)
	}
}

// isSuspect reports a delivery that is the counted copy of a job that came
// back unsettled (WorkerConfig.PoisonAfter): it was in flight when a worker
// crashed, maybe as the cause, maybe as a bystander.
func isSuspect(d broker.Delivery) bool {
	return !d.Redelivered() && d.Message().Headers[headerRedeliveries] != ""
}

// isolate runs a suspect alone, so that if it crashes its worker again
// nothing else this queue holds comes back redelivered and counted with
// it: first the deliveries the consumer had already handed over (others
// suspected too are published again, unchanged, to run alone in their
// turn), then, once they have all been settled, the suspect. The consumer
// is stopped meanwhile. It returns when to resume, if a handler paused
// the queue. A worker that stops meanwhile starts nothing more, and
// cancels what runs after ShutdownTimeout (hardStop).
func (a *queueActor) isolate(ctx context.Context, hardStop func(), suspect broker.Delivery, leftovers []broker.Delivery) time.Time {
	var resume time.Time
	if !a.waitFor(nil, doneWhen(func() { resume = a.runIsolated(ctx, suspect, leftovers) }), hardStop) {
		return time.Time{} // abandoned: resume may yet be written
	}
	return resume
}

// runIsolated is isolate's work: the leftovers, then the suspect alone.
func (a *queueActor) runIsolated(ctx context.Context, suspect broker.Delivery, leftovers []broker.Delivery) (resume time.Time) {
	var mu sync.Mutex
	pause := func(until time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if until.After(resume) {
			resume = until
		}
	}
	log := jobLog{l: a.w.log, queue: a.q.broker}
	var running sync.WaitGroup
	for _, d := range leftovers {
		if isSuspect(d) {
			_ = a.w.setAside(ctx, a.q, d) // counted; no outcome to carry it
			continue
		}
		if err := a.w.slots.Acquire(a.stopping, 1); err != nil {
			a.giveBack(d)
			continue
		}
		running.Go(func() {
			defer a.w.slots.Release(1)
			a.w.process(ctx, a.q, a.hold, d, pause)
		})
	}
	running.Wait()
	if err := a.w.slots.Acquire(a.stopping, 1); err != nil {
		a.giveBack(suspect)
		return resume
	}
	defer a.w.slots.Release(1)
	log.l.Info("running a job that was in flight when a worker crashed, alone", "job_id", suspect.Message().ID)
	a.w.process(ctx, a.q, a.hold, suspect, pause)
	return resume
}

// giveBack returns deliveries that were not started to the broker, from a
// live consumer: requeued, or, with PoisonAfter on, published again
// unchanged and acked (setAside). A requeued delivery comes back flagged
// as redelivered, and would be counted as if it had been in flight at a
// crash; a copy goes to the back of its queue instead.
func (a *queueActor) giveBack(ds ...broker.Delivery) {
	log := jobLog{l: a.w.log, queue: a.q.broker}
	for _, d := range ds {
		if a.w.poisonAfter == 0 {
			requeue(d, log)
			continue
		}
		_ = a.w.setAsideWithin(context.Background(), a.q, d) // counted; no outcome to carry it
	}
}

// giveBackTimeout bounds the publish of a delivery given back as a copy;
// past it, the delivery is requeued.
const giveBackTimeout = 10 * time.Second

// setAsideWithin is setAside under parent's values, bounded by
// giveBackTimeout: for a delivery given back by a worker that is stopping,
// whose own ctx has ended or is about to.
func (w *Worker) setAsideWithin(parent context.Context, q *queueConfig, d broker.Delivery) error {
	ctx, cancel := w.clock.WithTimeout(parent, giveBackTimeout)
	defer cancel()
	return w.setAside(ctx, q, d)
}

// setAside publishes d again, unchanged, to the back of its queue, and
// acks it: a suspect that runs alone later, or a delivery given back.
// Should the publish fail, the delivery is requeued instead (and counted
// once more, if it comes back). It returns the failure to settle, counted
// and logged already.
func (w *Worker) setAside(ctx context.Context, q *queueConfig, d broker.Delivery) error {
	msg := d.Message()
	log := jobLog{l: w.log, id: msg.ID, queue: q.broker}
	again := msg
	again.Queue = q.broker
	again.Headers = maps.Clone(msg.Headers)
	done := w.publishHook(ctx, OpRedelivery, &again, 0, "")
	err := w.backend.Publish(ctx, again)
	done(err)
	if err != nil {
		w.settleFailed(log, "set aside", err)
		requeue(d, log)
		return err
	}
	if err := d.Ack(context.Background()); err != nil {
		w.settleFailed(log, "ack", err)
		return err
	}
	return nil
}

// pump moves deliveries from the consumer into the mailbox until ctx ends
// (the delivery it held, if any, and nil) or the consumer does (why; lost
// is closed first). It closes the mailbox when it returns.
func pump(ctx context.Context, c broker.Consumer, mb *mailbox.Mailbox[broker.Delivery], lost chan<- struct{}) (held broker.Delivery, why error) {
	defer mb.Close()
	deliveries := c.Deliveries()
	for {
		d, ok, stopped := receive(ctx, deliveries)
		if stopped {
			return nil, nil
		}
		if !ok {
			// The broker took back what was not settled: the buffered
			// deliveries are stale, so they are not started.
			close(lost)
			mb.Drain()
			return nil, fmt.Errorf("%w: %w", errConsumerLost, cmp.Or(c.Err(), broker.ErrClosed))
		}
		if err := mb.Put(ctx, d); err != nil {
			return d, nil // ctx ended: Put refuses what comes after
		}
	}
}

// receive takes the next delivery from ch (ok false once ch is closed), or
// reports that ctx ended first (stopped). A delivery already there is
// taken at once, without locking ctx's channel too, as waiting on both
// would.
func receive(ctx context.Context, ch <-chan broker.Delivery) (d broker.Delivery, ok, stopped bool) {
	select {
	case d, ok = <-ch:
		return d, ok, false
	default:
	}
	select {
	case <-ctx.Done():
		return nil, false, true
	case d, ok = <-ch:
		return d, ok, false
	}
}

// doneWhen runs wait on a goroutine of its own and returns a channel
// closed when it returns.
func doneWhen(wait func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait()
	}()
	return done
}

// waitFor waits for done: handlers running to their end. A pause, or a
// suspect about to run alone, lets them finish however long they take;
// once the worker stops (a.stopping, or stop), they have ShutdownTimeout
// from then, then hardStop cancels their ctx and they have ShutdownTimeout
// more to return and settle (with PoisonAfter, giveBackTimeout more: a
// job cut short is published again). Handlers still running then ignore
// their ctx, and no one can stop a goroutine from outside: they are
// abandoned (logged, and counted for Run's ErrHandlersStillRunning), their
// jobs left unsettled for the broker to hand out again. It reports whether
// done came.
func (a *queueActor) waitFor(stop, done <-chan struct{}, hardStop func()) bool {
	select {
	case <-done:
		return true
	case <-a.stopping.Done():
	case <-stop:
	}
	timer := a.w.clock.Timer(a.w.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
	}
	a.w.log.Warn("shutdown timeout: cancelling running handlers", "queue", a.q.broker, "timeout", a.w.shutdownTimeout)
	hardStop()
	// Then a handler returns, and its job is settled: with PoisonAfter,
	// published again (setAsideWithin), which may take giveBackTimeout.
	grace := a.w.shutdownTimeout
	if a.w.poisonAfter > 0 {
		grace += giveBackTimeout
	}
	timer.Reset(grace)
	select {
	case <-done:
		return true
	case <-timer.C:
	}
	a.w.log.Error("handlers ignored their cancelled ctx; abandoning them, their jobs unsettled (the broker hands them out again)",
		"queue", a.q.broker, "waited_after_cancel", grace)
	a.w.abandoned.Add(1)
	return false
}

func requeue(d broker.Delivery, log jobLog) {
	if err := d.Requeue(context.Background()); err != nil {
		log.Debug("could not requeue a delivery; the broker takes it back when the consumer ends", "error", err)
	}
}

// process runs one delivery to its settlement, and tells the hooks.
// pause, called by a handler's PauseQueue, pauses the delivery's queue.
func (w *Worker) process(ctx context.Context, q *queueConfig, hold *actor.Actor[holdRequest], d broker.Delivery, pause func(until time.Time)) {
	msg := d.Message()
	started := w.clock.Now()
	var env broker.Envelope
	var jc JobContext
	var decodeErr error
	if w.maxBytes >= 0 && len(msg.Body) > w.maxBytes {
		decodeErr = &tooLargeError{size: len(msg.Body), limit: w.maxBytes}
	} else if env, decodeErr = broker.DecodeMessage(msg); decodeErr == nil {
		jc = w.jobContext(q, env, d, started)
	}
	if w.hooks == nil || w.hooks.Deliver == nil {
		w.settleDelivery(ctx, q, hold, d, msg, env, decodeErr, jc, pause)
		return
	}
	due := msg.DueAt
	if due.IsZero() && !msg.FromHold && decodeErr == nil {
		due = env.EnqueuedAt() // due when enqueued (see broker.Message.DueAt)
	}
	info := &DeliveryInfo{System: w.backend.Name(), Queue: q.broker, Job: jc, Headers: msg.Headers, DueAt: due, Started: started}
	hookCtx, finish := ctx, func(Outcome) {}
	w.guardHook("Deliver", func() {
		c, f := w.hooks.Deliver(ctx, info)
		if c != nil {
			hookCtx = c
		}
		if f != nil {
			finish = f
		}
	})
	out := w.settleDelivery(hookCtx, q, hold, d, msg, env, decodeErr, info.Job, pause)
	w.guardHook("Deliver's outcome func", func() { finish(out) })
}

// guardHook calls a hook, turning a panic in it into an error log: a bug in
// instrumentation must not take the worker down with every delivery in
// flight. The job goes on as if the hook were not there.
func (w *Worker) guardHook(which string, call func()) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("hook panicked; going on without it", "hook", which, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	call()
}

// publishHook tells the publish hook about a republish of the worker's
// (guardHook): it returns what to call with the result.
func (w *Worker) publishHook(ctx context.Context, op PublishOp, msg *broker.Message, delay time.Duration, reason string) func(error) {
	if w.hooks == nil || w.hooks.Publish == nil {
		return func(error) {}
	}
	done := func(error) {}
	w.guardHook("Publish", func() { done = w.hooks.publishing(ctx, w.backend.Name(), op, msg, delay, reason) })
	return func(err error) { w.guardHook("Publish's result func", func() { done(err) }) }
}

// jobContext is what the handler of env will see.
func (w *Worker) jobContext(q *queueConfig, env broker.Envelope, d broker.Delivery, now time.Time) JobContext {
	return JobContext{
		JobID:         env.JobID,
		Kind:          env.JobType,
		Queue:         q.broker,
		Attempt:       int(env.Attempt),
		MaxAttempts:   q.retry.maxAttempts(), // a job's own policy is applied once it is decoded
		Deferrals:     int(env.Deferrals),
		Priority:      int(env.Priority),
		EnqueuedAt:    env.EnqueuedAt(),
		Age:           max(0, now.Sub(env.EnqueuedAt())),
		CorrelationID: env.CorrelationID,
		Redelivered:   d.Redelivered(),
	}
}

// settleDelivery decides what becomes of d (SPEC §2) and tells the broker.
func (w *Worker) settleDelivery(ctx context.Context, q *queueConfig, hold *actor.Actor[holdRequest], d broker.Delivery,
	msg broker.Message, env broker.Envelope, decodeErr error, jc JobContext, pause func(until time.Time)) Outcome {
	if decodeErr != nil {
		log := jobLog{l: w.log, queue: q.broker}
		msg.Queue = q.broker
		msg.Headers = maps.Clone(msg.Headers) // the delivery's own are read-only
		if tooLarge, ok := errors.AsType[*tooLargeError](decodeErr); ok {
			log.Error("message body is over the worker's size limit; dead-lettering it verbatim, unread", "bytes", tooLarge.size, "limit", tooLarge.limit)
			return w.deadLetter(ctx, log, d, msg, CauseTooLarge, tooLarge.Error(), decodeErr, jc)
		}
		log.Error("message body is not a valid envelope; dead-lettering it verbatim", "error", decodeErr)
		detail := decodeErr.Error()
		if m, ok := errors.AsType[*broker.MalformedError](decodeErr); ok {
			detail = m.Detail()
		}
		return w.deadLetter(ctx, log, d, msg, CauseMalformed, "malformed envelope: "+detail, decodeErr, jc)
	}
	env.Queue = q.broker // republish where it came from, whatever the body says
	log := jobLog{l: w.log, id: env.JobID, kind: env.JobType, queue: q.broker, attempt: env.Attempt}
	// The original as it is re-published to the dead letters; encoded only
	// on that path.
	original := func() broker.Message {
		m, _ := env.Message() // cannot fail for an envelope that just decoded
		return m
	}

	if w.poisonAfter > 0 && d.Redelivered() && !w.givenBack.take(msg.ID) {
		if out, done := w.countRedelivery(ctx, log, d, msg, jc, original); done {
			return out
		}
	}

	h, ok := w.handlers[env.JobType]
	if !ok {
		log.Warn("no handler registered; dead-lettering")
		return w.deadLetter(ctx, log, d, original(), CauseNoHandler, fmt.Sprintf("no handler for job type %q", env.JobType), nil, jc)
	}
	job, err := h.decode(env.Payload)
	if err != nil {
		log.Error("payload did not match the handler's job type; dead-lettering", "error", err)
		return w.deadLetter(ctx, log, d, original(), CauseDecode, "decode error: "+err.Error(), err, jc)
	}
	policy := w.retryPolicy(q, env.JobType, h, job)
	jc.MaxAttempts = policy.maxAttempts()

	log.Debug("running job", "deferrals", jc.Deferrals, "priority", jc.Priority)
	started := w.clock.Now()
	err = w.call(ctx, q, h, job, jc)
	ran := w.clock.Since(started)
	if err != nil && ctx.Err() != nil {
		// Cancelled by a stop that ran out of time, or because its delivery
		// was lost with its consumer: not the job's fault.
		if w.poisonAfter > 0 && errors.Is(context.Cause(ctx), errStopTimedOut) {
			// Nor a crash: it goes back as an unstarted delivery does,
			// published again unchanged and acked, so that PoisonAfter does
			// not count it (requeued, it would come back redelivered).
			log.Warn("job interrupted by the worker's stop; publishing it again", "error", err)
			settleErr := w.setAsideWithin(context.WithoutCancel(ctx), q, d)
			return Outcome{Result: Requeued, Err: err, Ran: true, HandlerDuration: ran, SettleErr: settleErr}
		}
		log.Warn("job interrupted (the worker is stopping or its delivery was lost); returning it to the queue", "error", err)
		requeue(d, log)
		return Outcome{Result: Requeued, Err: err, Ran: true, HandlerDuration: ran}
	}

	var out Outcome
	switch o, def, pausing := classify(err); o {
	case outcomeSuccess:
		out = w.acked(log, d, Outcome{Result: Succeeded})
		if out.SettleErr == nil {
			log.Info("job succeeded")
		}
	case outcomeDefer:
		next := env.Deferred(q.maxPriority)
		err := w.republish(ctx, hold, OpDeferral, next, def.Delay, holdDefer)
		if errors.Is(err, ErrDelayTooLong) || errors.Is(err, ErrInvalidDelay) {
			log.Error("job asked for a deferral no hold queue can give; dead-lettering", "error", err)
			out = w.deadLetter(ctx, log, d, original(), CauseInvalidDeferral, "invalid deferral: "+err.Error(), err, jc)
			break
		}
		var pausedUntil time.Time
		if pausing && err == nil {
			// Resume when the deferred job is back on the queue, so that it
			// is the first delivery after the pause; pause before the ack,
			// which frees a prefetch slot the broker would fill at once.
			ttl, _ := broker.HoldTTL(def.Delay, w.set.deferGranularity)
			pausedUntil = w.clock.Now().Add(ttl)
			log.Info("queue rate limited; pausing it", "until", pausedUntil, "reason", def.Reason)
			pause(pausedUntil)
		}
		out = w.republished(log, d, "defer", err, Outcome{Result: Deferred, Delay: def.Delay, Reason: def.Reason, PausedUntil: pausedUntil})
		if out.SettleErr == nil {
			wait, _ := broker.HoldTTL(def.Delay, w.set.deferGranularity)
			log.Info("job deferred", "delay", def.Delay, "waits", wait, "reason", def.Reason, "deferrals", next.Deferrals)
		}
	case outcomeFatal:
		log.Error("job failed fatally", "error", err)
		cause := err
		if f, ok := errors.AsType[*FatalError](err); ok {
			cause = f.Err
		}
		out = w.deadLetter(ctx, log, d, original(), CauseFatal, "fatal error: "+cause.Error(), err, jc)
	case outcomeRetry:
		delay, again := policy.Decide(jc.Attempt)
		// A backoff caps at the longest hold (Backoff.Max), which the
		// rounding to the retry granularity must not push past the limit.
		delay = min(delay, broker.LongestHold(w.set.retryGranularity))
		if !again {
			log.Error("job failed; giving up", "error", err, "max_attempts", jc.MaxAttempts)
			out = w.deadLetter(ctx, log, d, original(), CauseExhausted, fmt.Sprintf("max attempts (%d) exhausted after attempt %d: %s",
				jc.MaxAttempts, jc.Attempt, reasonText(err)), err, jc)
			break
		}
		err2 := w.republish(ctx, hold, OpRetry, env.NextAttempt(), delay, holdRetry)
		out = w.republished(log, d, "retry", err2, Outcome{Result: Retried, Err: err, Delay: delay, NextAttempt: jc.Attempt + 1})
		if out.SettleErr == nil {
			wait, _ := broker.HoldTTL(delay, w.set.retryGranularity)
			log.Warn("job failed; retrying", "error", err, "delay", delay, "waits", wait, "next_attempt", jc.Attempt+1)
		}
	}
	if err != nil {
		_, out.Panicked = errors.AsType[*panicError](err)
		_, out.TimedOut = errors.AsType[*timeoutError](err)
	}
	if out.Err == nil && out.Result != Succeeded && out.Result != Deferred {
		out.Err = err
	}
	out.Ran, out.HandlerDuration = true, ran
	return out
}

// headerRedeliveries counts the times a job came back from the broker
// unsettled (its worker crashed or lost its connection while holding it).
const headerRedeliveries = "x-queuey-redeliveries"

// countRedelivery handles a delivery the broker hands out again. A job
// redelivered PoisonAfter times is dead-lettered as poison: it most likely
// kills its worker. Otherwise the job is published again with the count
// raised, and the original acked; the copy is what runs (done is true).
// RabbitMQ's classic queues keep no delivery count, so the count travels
// in the message.
func (w *Worker) countRedelivery(ctx context.Context, log jobLog, d broker.Delivery, msg broker.Message, jc JobContext,
	original func() broker.Message) (Outcome, bool) {
	n, _ := strconv.Atoi(msg.Headers[headerRedeliveries])
	n++
	if n >= w.poisonAfter {
		log.Error("job came back unsettled too often; dead-lettering it as poison", "redeliveries", n)
		return w.deadLetter(ctx, log, d, original(), CausePoison,
			fmt.Sprintf("poison: delivered %d times without being settled; it may crash its worker", n), nil, jc), true
	}
	again := original()
	// The copy is due when the original was: a stamp is kept, and without
	// one the copy's enqueued_at is the original's. Back from a hold whose
	// publisher did not stamp it (a Rust producer), it was due at some
	// time unknown, no later than now; the copy is due now, not at its
	// enqueue a wait ago.
	again.DueAt = msg.DueAt
	if again.DueAt.IsZero() && msg.FromHold {
		again.DueAt = w.clock.Now()
	}
	again.Headers = maps.Clone(msg.Headers)
	if again.Headers == nil {
		again.Headers = map[string]string{}
	}
	again.Headers[headerRedeliveries] = strconv.Itoa(n)
	done := w.publishHook(ctx, OpRedelivery, &again, 0, "")
	err := w.backend.Publish(ctx, again)
	done(err)
	log.Warn("job came back unsettled; counted and published again", "redeliveries", n, "poison_after", w.poisonAfter)
	return w.republished(log, d, "count redelivery", err, Outcome{Result: Requeued}), true
}

// republish holds next for delay through the hold actor, telling the
// publish hook.
func (w *Worker) republish(ctx context.Context, hold *actor.Actor[holdRequest], op PublishOp, next broker.Envelope, delay time.Duration, kind holdKind) error {
	msg, err := next.Message()
	if err != nil {
		return err
	}
	done := w.publishHook(ctx, op, &msg, delay, "")
	err = askHold(ctx, hold, msg, delay, kind)
	done(err)
	return err
}

// call runs the handler under the middleware, the job timeout and a panic
// guard.
func (w *Worker) call(ctx context.Context, q *queueConfig, h handler, job decodedJob, jc JobContext) error {
	timeout := cmp.Or(q.JobTimeout, w.jobTimeout)
	runCtx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = w.clock.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var err error
	if len(w.middleware) == 0 {
		err = runGuarded(runCtx, h, job, jc) // no closures to allocate
	} else {
		err = w.callThroughMiddleware(runCtx, h, job, jc)
	}
	if err == nil {
		return nil
	}
	if timeout > 0 && errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		return &timeoutError{limit: timeout.String(), err: err}
	}
	if p, ok := errors.AsType[*panicError](err); ok {
		w.log.Error("handler panicked", "job_id", jc.JobID, "kind", jc.Kind, "panic", fmt.Sprint(p.value), "stack", string(p.stack))
	}
	return err
}

// callThroughMiddleware runs the handler under the worker's middleware. It
// is apart from call so that the closures, which capture jc, move only
// this call's copy of it to the heap. A middleware's panic is the run's,
// as the handler's is.
func (w *Worker) callThroughMiddleware(ctx context.Context, h handler, job decodedJob, jc JobContext) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	run := func(ctx context.Context) error { return runGuarded(ctx, h, job, jc) }
	for i := len(w.middleware) - 1; i >= 0; i-- {
		m, next := w.middleware[i], run
		run = func(ctx context.Context) error { return m(ctx, jc, next) }
	}
	return run(ctx)
}

// runGuarded runs the handler, turning a panic into a *panicError.
func runGuarded(ctx context.Context, h handler, job decodedJob, jc JobContext) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	return h.run(ctx, job, jc)
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

// reasonText is err's text for a dead letter's reason, which goes into the
// message's headers and onto spans: a panic's value (it may hold anything
// the handler had) stays in the worker's log, with its stack.
func reasonText(err error) string {
	if _, ok := errors.AsType[*panicError](err); ok {
		return "handler panicked (its value and stack are in the worker's log)"
	}
	return err.Error()
}

type timeoutError struct {
	limit string
	err   error
}

func (e *timeoutError) Error() string { return "job timed out after " + e.limit + ": " + e.err.Error() }
func (e *timeoutError) Unwrap() error { return e.err }

// republished acks d once its next run was scheduled (err == nil) and
// returns out. If the scheduling failed, d is not acked: the failure is
// counted, and d goes back to the queue after RequeueDelay, so that a
// publish that keeps failing (a refused hold queue) is not retried in a
// tight loop; until then it holds its prefetch slot, not a worker slot.
func (w *Worker) republished(log jobLog, d broker.Delivery, op string, err error, out Outcome) Outcome {
	if err != nil {
		w.settleFailed(log, op, err)
		if w.poisonAfter > 0 {
			w.givenBack.add(d.Message().ID) // it comes back redelivered: no crash to count
		}
		w.clock.AfterFunc(w.requeueDelay, func() { requeue(d, log) })
		return Outcome{Result: Requeued, Err: out.Err, SettleErr: err}
	}
	return w.acked(log, d, out)
}

// givenBack remembers the ids of the deliveries a worker requeued itself
// because it could not publish their outcome, so that, with PoisonAfter on,
// their redelivery is not counted as a crash. It holds the newest
// givenBackCap; a redelivery to another worker is counted there, once.
type givenBack struct {
	mu    sync.Mutex
	ids   map[string]struct{}
	order []string // oldest first, for eviction
}

const givenBackCap = 10_000

func (g *givenBack) add(id string) {
	if id == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ids == nil {
		g.ids = map[string]struct{}{}
	}
	if _, ok := g.ids[id]; ok {
		return
	}
	if len(g.order) == givenBackCap {
		delete(g.ids, g.order[0])
		g.order = g.order[1:]
	}
	g.ids[id] = struct{}{}
	g.order = append(g.order, id)
}

// take reports whether id was given back, and forgets it.
func (g *givenBack) take(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.ids[id]; !ok {
		return false
	}
	delete(g.ids, id)
	g.order = slices.DeleteFunc(g.order, func(o string) bool { return o == id })
	return true
}

// acked acks d and returns out, or a Requeued outcome if the ack failed.
func (w *Worker) acked(log jobLog, d broker.Delivery, out Outcome) Outcome {
	if err := d.Ack(context.Background()); err != nil {
		w.settleFailed(log, "ack", err)
		return Outcome{Result: Requeued, Err: out.Err, SettleErr: err}
	}
	return out
}

// deadLetter tells the dead-letter hook, moves msg to the dead letters with
// reason, then acks d.
func (w *Worker) deadLetter(ctx context.Context, log jobLog, d broker.Delivery, msg broker.Message,
	why DeadLetterCause, reason string, cause error, jc JobContext) Outcome {
	if w.onDeadLetter != nil {
		w.guardHook("OnDeadLetter", func() {
			w.onDeadLetter(ctx, DeadLetterEvent{Job: jc, Cause: why, Reason: reason, Err: cause})
		})
	}
	done := w.publishHook(ctx, OpDeadLetter, &msg, 0, reason)
	err := w.backend.DeadLetter(ctx, broker.DeadLetter{Message: msg, Reason: reason})
	done(err)
	return w.republished(log, d, "dead letter", err, Outcome{Result: DeadLettered, Cause: why, Reason: reason, Err: cause})
}

func (w *Worker) settleFailed(log jobLog, op string, err error) {
	w.settleFailures.Add(1)
	log.Error("failed to settle delivery", "operation", op, "error", err)
}

// jobLog writes one job's log lines with its identity. It builds a line
// only when its level is enabled, so the path of a job that succeeds
// allocates nothing for logging it does not print.
type jobLog struct {
	l               *slog.Logger // nil: log nothing
	id, kind, queue string
	attempt         uint32
}

func (j jobLog) Debug(msg string, args ...any) { j.log(slog.LevelDebug, msg, args) }
func (j jobLog) Info(msg string, args ...any)  { j.log(slog.LevelInfo, msg, args) }
func (j jobLog) Warn(msg string, args ...any)  { j.log(slog.LevelWarn, msg, args) }
func (j jobLog) Error(msg string, args ...any) { j.log(slog.LevelError, msg, args) }

func (j jobLog) log(level slog.Level, msg string, args []any) {
	ctx := context.Background()
	if j.l == nil || !j.l.Enabled(ctx, level) {
		return
	}
	var attrs []any
	if j.id != "" {
		attrs = append(attrs, "job_id", j.id, "kind", j.kind)
	}
	attrs = append(attrs, "queue", j.queue)
	if j.attempt > 0 {
		attrs = append(attrs, "attempt", j.attempt)
	}
	j.l.Log(ctx, level, msg, append(attrs, args...)...)
}
