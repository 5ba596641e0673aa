package queuey

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/mailbox"
)

// settleAction is what telling the broker an outcome takes. Every action
// but actRequeue ends in an ack once its publish is confirmed: published
// and confirmed first, then the original acked (ARCHITECTURE.md §1).
type settleAction int

const (
	actAck        settleAction = iota // a success: ack
	actHold                           // a retry or deferral: hold the next envelope, then ack
	actDeadLetter                     // publish to <q>.dead, then ack
	actCopy                           // publish a copy to the back of the queue, then ack (PoisonAfter)
	actRequeue                        // give the delivery back unsettled
)

// settlement is what is to become of one delivery, and how far telling the
// broker has come. A handler goroutine makes it and acks a success
// itself; one that needs a publish goes to its queue actor, which has the
// hold actor make it and ack on its confirm; a failed publish is tried
// again after a backoff, never by running the handler again. A suspect
// run alone is settled on its handler goroutine (settle).
type settlement struct {
	action    settleAction
	msg       broker.Message   // what actHold, actDeadLetter and actCopy publish
	op        PublishOp        // actHold and actCopy: for the publish hook
	delay     time.Duration    // actHold: as asked
	kind      holdKind         // actHold
	pausing   bool             // actHold: a PauseQueue
	waited    time.Duration    // actHold, OpUnhandled: how long the job has waited for a handler
	held      *heldJob         // actHold: the job, should it go to the dead letters
	reason    string           // actDeadLetter
	suspected bool             // actCopy: a job moved to the suspects queue, to run alone
	event     *DeadLetterEvent // actDeadLetter: for OnDeadLetter, told once
	out       Outcome

	ctx   context.Context // the delivery's, as the Deliver hook gave it
	d     broker.Delivery
	q     *queueConfig
	log   jobLog
	hook  *deliveryHook              // the Deliver hook's call, told the outcome once
	inbox *mailbox.Mailbox[queueMsg] // the queue actor's: the hold actor's answer, a suspect's pause notice
	run   int                        // the queue actor's run that handed the delivery out

	tries   int            // failed publishes so far
	lastErr error          // the last one's error
	due     time.Time      // when the queue actor hands it out again
	lease   *consumerLease // its delivery's consumer, kept open meanwhile
	leased  bool           // counted in lease.pending
	stuck   bool           // a dead letter past republishTries, said once
}

// heldJob is a held job as it was delivered (env) and as its handler saw
// it (jc): what its dead letter is made of, should the broker keep
// refusing its hold (toDeadLetter). Out of settlement, which is copied
// as it is returned, and made only for a hold.
type heldJob struct {
	env broker.Envelope
	jc  JobContext
}

// jobFacts is what is known of a delivered job as it is settled: its
// envelope, the JobContext its handler saw, and its log.
type jobFacts struct {
	log jobLog
	env broker.Envelope
	jc  JobContext
}

// decide is the table of ARCHITECTURE.md §1 ("What a handler's result
// does"): what a handler's result makes of the job.
func (r *jobRunner) decide(ctx context.Context, q *queueConfig, f *jobFacts, policy RetryPolicy, err error) settlement {
	if err != nil && ctx.Err() != nil {
		return r.interrupted(ctx, f, err)
	}
	var s settlement
	switch o, def, pausing := classify(err); o {
	case outcomeSuccess:
		s = r.succeeded(f) // an ack; for a chain's step, its next step's publish first (chain.go)
	case outcomeDefer:
		s = r.deferral(q, f, def, pausing)
	case outcomeFatal:
		f.log.Error("job failed fatally", "error", err)
		cause := err
		if f, ok := errors.AsType[*FatalError](err); ok {
			cause = f.Err
		}
		s = deadLetterOf(f, original(f.env), CauseFatal, "fatal error: "+cause.Error(), err)
	case outcomeRetry:
		s = r.retry(f, policy, err)
	}
	s.log = f.log
	if err != nil {
		_, s.out.Panicked = errors.AsType[*panicError](err)
		_, s.out.TimedOut = errors.AsType[*timeoutError](err)
		if s.out.Result != Succeeded && s.out.Result != Deferred {
			s.out.Err = err
		}
	}
	return s
}

// deferral holds the job for the delay its handler asked, at the queue's
// top priority, or dead-letters it if no hold queue can give that delay.
func (r *jobRunner) deferral(q *queueConfig, f *jobFacts, def *DeferError, pausing bool) settlement {
	delay := max(def.Delay, 0) // a Retry-After already past (clocks differ): run again after one step
	if _, err := broker.HoldTTL(delay, r.set.deferGranularity); err != nil {
		err = fmt.Errorf("hold for %s: %w", holdDefer, err)
		f.log.Error("job asked for a deferral no hold queue can give; dead-lettering", "error", err)
		return deadLetterOf(f, original(f.env), CauseInvalidDeferral, "invalid deferral: "+err.Error(), err)
	}
	next, _ := f.env.Deferred(q.maxPriority).Message() // cannot fail for an envelope that just decoded
	return settlement{action: actHold, msg: next, op: OpDeferral, delay: delay, kind: holdDefer, pausing: pausing, held: &heldJob{f.env, f.jc},
		out: Outcome{Result: Deferred, Delay: delay, Reason: def.Reason}}
}

// retry holds the job's next attempt for its backoff, or dead-letters it
// when its attempts are used up.
func (r *jobRunner) retry(f *jobFacts, policy RetryPolicy, err error) settlement {
	jc := f.jc
	delay, again := policy.DecideWith(jc.Attempt, r.retryJitter)
	if !again {
		f.log.Error("job failed; giving up", "error", err, "max_attempts", jc.MaxAttempts)
		return deadLetterOf(f, original(f.env), CauseExhausted, fmt.Sprintf("max attempts (%d) exhausted after attempt %d: %s",
			jc.MaxAttempts, jc.Attempt, reasonText(err)), err)
	}
	// A backoff caps at the longest hold (Backoff.Max), which the rounding
	// to the retry granularity must not push past the limit.
	delay = min(delay, broker.LongestHold(r.set.retryGranularity))
	next, _ := f.env.NextAttempt().Message()
	return settlement{action: actHold, msg: next, op: OpRetry, delay: delay, kind: holdRetry, held: &heldJob{f.env, jc},
		out: Outcome{Result: Retried, Delay: delay, NextAttempt: jc.Attempt + 1}}
}

// unknownKindInterval is how long a job of a kind the worker has no
// handler for is held back before it is offered again.
const unknownKindInterval = time.Minute

// headerUnhandledSince carries, in milliseconds since the Unix epoch, when
// a worker first held the job back for want of a handler: the start of its
// UnknownKindWait. Like every x-queuey-* header it is not carried by any
// other republish (carriedHeaders), so a job that runs, or is replayed,
// starts without it.
const headerUnhandledSince = "x-queuey-unhandled-since-ms"

// unhandled settles a job of a kind the worker has no handler for
// (WorkerConfig.UnknownKindWait): held back without running, its attempt
// and deferrals as they were, at priority 0, to be offered again after
// unknownKindInterval; dead-lettered once it has waited long enough, or
// at once if the worker is to wait for none.
func (r *jobRunner) unhandled(f *jobFacts, delivered map[string]string) settlement {
	reason := fmt.Sprintf("no handler for job type %q", f.env.JobType)
	if r.unknownKindWait < 0 {
		f.log.Error("no handler registered for the job's kind; dead-lettering")
		return deadLetterOf(f, original(f.env), CauseNoHandler, reason, nil)
	}
	now := r.clock.Now()
	since := unhandledSince(delivered, now)
	waited := max(0, now.Sub(since))
	if waited >= r.unknownKindWait {
		f.log.Error("no handler registered for the job's kind; dead-lettering", "waited", waited, "limit", r.unknownKindWait)
		reason = fmt.Sprintf("%s after waiting %v for one", reason, roundWait(waited))
		return deadLetterOf(f, original(f.env), CauseNoHandler, reason, nil)
	}
	delay := min(unknownKindInterval, r.unknownKindWait-waited)
	next := f.env
	next.Priority = 0
	msg, _ := next.Message() // cannot fail for an envelope that just decoded
	msg.Headers = carriedHeaders(delivered)
	if msg.Headers == nil {
		msg.Headers = make(map[string]string, 1)
	}
	msg.Headers[headerUnhandledSince] = strconv.FormatInt(since.UnixMilli(), 10)
	return settlement{action: actHold, msg: msg, op: OpUnhandled, delay: delay, kind: holdRetry, held: &heldJob{f.env, f.jc}, waited: waited,
		log: f.log, out: Outcome{Result: Unhandled, Delay: delay, Reason: reason}}
}

// unhandledSince is when a worker first held the job back for want of a
// handler, as its headers say; now if they do not.
func unhandledSince(headers map[string]string, now time.Time) time.Time {
	if ms, err := strconv.ParseInt(headers[headerUnhandledSince], 10, 64); err == nil && ms > 0 {
		return time.UnixMilli(ms)
	}
	return now
}

// roundWait is a wait as a dead letter's reason says it: to the second
// from one up.
func roundWait(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// interrupted settles a job whose handler was cancelled: by a stop that ran
// out of time, or because its delivery was lost with its consumer. That is
// not the job's fault: it goes back as it was.
func (r *jobRunner) interrupted(ctx context.Context, f *jobFacts, err error) settlement {
	log := f.log
	out := Outcome{Result: Requeued, Err: err}
	if r.poisonAfter > 0 && errors.Is(context.Cause(ctx), errStopTimedOut) {
		// Nor a crash: published again unchanged and acked, as an unstarted
		// delivery is, so that PoisonAfter does not count it (requeued, it
		// would come back redelivered).
		log.Warn("job interrupted by the worker's stop; publishing it again", "error", err)
		return settlement{action: actCopy, msg: original(f.env), op: OpRedelivery, out: out, log: log}
	}
	log.Warn("job interrupted (the worker is stopping or its delivery was lost); returning it to the queue", "error", err)
	return settlement{action: actRequeue, out: out, log: log}
}

// deadLetterOf is the settlement that moves msg, f's job as it is to be
// kept, to the dead letters.
func deadLetterOf(f *jobFacts, msg broker.Message, why DeadLetterCause, reason string, cause error) settlement {
	return settlement{action: actDeadLetter, msg: msg, reason: reason, log: f.log,
		event: &DeadLetterEvent{Job: f.jc, Cause: why, Reason: reason, Err: cause},
		out:   Outcome{Result: DeadLettered, Cause: why, Reason: reason, Err: cause}}
}

// original is env as it is published again (to the dead letters, or as a
// copy).
func original(env broker.Envelope) broker.Message {
	m, _ := env.Message() // cannot fail for an envelope that just decoded
	return m
}

// carriedHeaders are the headers of a delivery that the job's next
// publish (a retry, a deferral, a dead letter, a replay) carries: those of
// whoever published it (a tenant, a trace context) and a unique job's key
// and window, not the ones this library writes afresh at every publish
// (the other x-queuey-*, a dead letter's reason, queue and attempts). Nil
// when none is left.
func carriedHeaders(delivered map[string]string) map[string]string {
	var out map[string]string
	for k, v := range delivered {
		switch {
		case k == headerUniqueKey, k == headerUniqueWindow:
		case strings.HasPrefix(k, "x-queuey-"), k == broker.HeaderDeathReason, k == broker.HeaderOriginalQueue, k == broker.HeaderAttempts:
			continue
		}
		if out == nil {
			out = make(map[string]string, len(delivered))
		}
		out[k] = v
	}
	return out
}

// reasonText is err's text for a dead letter's reason, which goes into the
// message's headers and onto spans: a panic's value (it may hold anything
// the handler had) stays in the worker's log, with its stack.
func reasonText(err error) string {
	if _, ok := errors.AsType[*panicError](err); ok {
		return "handler panicked (its value and stack are in the worker's log)"
	}
	return err.Error()
}
