package queuey

import (
	"context"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// Hooks let instrumentation follow every job's life (package trace plugs
// OpenTelemetry in here) without the core depending on it. Every field is
// optional; a nil hook costs nothing. In a worker, a hook (or a func it
// returned) that panics is logged as an error and the job goes on without
// it; in a producer, the panic reaches the caller of Enqueue.
type Hooks struct {
	// Publish is called before every publish: the producer's Enqueue,
	// EnqueueAfter and Defer, and the worker's republish of a retry, a
	// deferral, a hold-back (a kind without a handler) or a dead letter
	// (under the ctx Deliver returned). It may add headers to p.Headers,
	// such as a trace context. The func it returns, if any, is called
	// once with the publish's result.
	Publish func(ctx context.Context, p *PublishInfo) func(err error)
	// Deliver is called when a worker starts on a delivery, before its
	// handler runs. The ctx it returns is the one the handler and the
	// republishes of this delivery run under. The func it returns, if any,
	// is called once with the outcome, after the delivery is settled.
	Deliver func(ctx context.Context, d *DeliveryInfo) (context.Context, func(Outcome))
}

// PublishOp says why a message is published.
type PublishOp string

// The publishes a job goes through.
const (
	OpEnqueue      PublishOp = "enqueue"       // Producer.Enqueue
	OpEnqueueAfter PublishOp = "enqueue_after" // Producer.EnqueueAfter
	OpDefer        PublishOp = "defer"         // Producer.Defer
	OpRetry        PublishOp = "retry"         // a failed run's next attempt
	OpDeferral     PublishOp = "deferral"      // a handler's Defer
	OpDeadLetter   PublishOp = "dead_letter"   // to <q>.dead
	OpRedelivery   PublishOp = "redelivery"    // a redelivered job, counted (WorkerConfig.PoisonAfter)
	OpUnhandled    PublishOp = "unhandled"     // a job of a kind the worker has no handler for, held back (WorkerConfig.UnknownKindWait)
	OpSchedule     PublishOp = "schedule"      // a tick of a Schedule
	OpChainStep    PublishOp = "chain_step"    // a chain's next step, once the one before succeeded (Producer.EnqueueChain)
)

// PublishInfo describes one publish to Hooks.Publish.
type PublishInfo struct {
	Op PublishOp
	// System is the backend: "memory" or "rabbitmq".
	System string
	// Queue is the work queue the job belongs to, by its Name in the
	// QueueSet.
	Queue string
	// BrokerQueue is the queue the message is published to, by its broker
	// name: the work queue's ("<prefix>.<name>"), or its suspects queue's
	// for a job moved there (WorkerConfig.PoisonAfter).
	BrokerQueue string
	// JobID and Kind identify the job; both are empty for the dead letter
	// of a body that was not an envelope.
	JobID, Kind string
	// Attempt, Deferrals and Priority are the published envelope's.
	Attempt, Deferrals, Priority int
	// Delay is the wait asked for (0 when the job is due at once).
	Delay time.Duration
	// Reason is a dead letter's reason.
	Reason string
	// CorrelationID is the job's, when it has one.
	CorrelationID string
	// Headers go out with the message; a hook may add to them.
	Headers map[string]string
}

// DeliveryInfo describes one delivery to Hooks.Deliver.
type DeliveryInfo struct {
	// System is the backend: "memory" or "rabbitmq".
	System string
	// Queue is the work queue, by its Name in the QueueSet.
	Queue string
	// BrokerQueue is the work queue's broker name ("<prefix>.<name>").
	BrokerQueue string
	// Job is what the handler will see. Its JobID is empty when the body
	// is not an envelope.
	Job JobContext
	// Headers are the delivery's headers (read them, do not change them).
	Headers map[string]string
	// DueAt is when the job was due to run: its enqueue, the end of its
	// wait, or the time of a replay. Zero when unknown: a job back from a
	// hold queue whose publisher did not say (a Rust producer), or a body
	// that is not an envelope.
	DueAt time.Time
	// Started is when the worker took the delivery up, on the worker's
	// clock; Started - DueAt is how late the job started.
	Started time.Time
}

// Result is what became of a delivery.
type Result string

// The results of a delivery.
const (
	Succeeded    Result = "succeeded"     // acked
	Retried      Result = "retried"       // its next attempt is held
	Deferred     Result = "deferred"      // held, to come back at the top priority
	DeadLettered Result = "dead_lettered" // moved to <q>.dead
	Requeued     Result = "requeued"      // given back unsettled (a stop cut it short, or settling failed)
	Unhandled    Result = "unhandled"     // no handler for its kind in this worker: held back, offered again (WorkerConfig.UnknownKindWait)
	Cancelled    Result = "cancelled"     // cancelled (Producer.Cancel): acked unrun, or its handler returned an error once told
)

// Outcome is what a delivery came to, for Hooks.Deliver.
type Outcome struct {
	Result Result
	// Err is the handler's error (nil on success and deferral).
	Err error
	// Delay is a retry's backoff, a deferral's delay or an Unhandled job's
	// wait before it is offered again, as asked; the job waits it rounded
	// up to the granularity (a zero delay waits one step).
	Delay time.Duration
	// Reason is a deferral's, an Unhandled job's or a dead letter's reason.
	Reason string
	// NextAttempt is the attempt a retry will run as.
	NextAttempt int
	// TimedOut and Panicked say how a failed run failed.
	TimedOut, Panicked bool
	// PausedUntil is when the queue resumes, after a PauseQueue.
	PausedUntil time.Time
	// Cause says why, for DeadLettered.
	Cause DeadLetterCause
	// Ran reports that the handler ran (HandlerDuration may be 0 on a
	// mock clock).
	Ran bool
	// HandlerDuration is how long the handler ran.
	HandlerDuration time.Duration
	// SettleErr is set when the broker could not be told the outcome; the
	// delivery then comes back (Result is Requeued).
	SettleErr error
}

// stampDue records on msg when it is due: the end of its hold, or the time
// of a replay. It lets a worker tell how late a job started; a plain
// enqueue needs no stamp (see broker.Message.DueAt).
func stampDue(msg *broker.Message, due time.Time) {
	msg.DueAt = due.Truncate(time.Millisecond)
}

// publishIntent is what a publish is for, as the publish hook is told it
// beside the message: why (op), the wait asked for, and a dead letter's
// reason.
type publishIntent struct {
	op     PublishOp
	delay  time.Duration
	reason string
}

// beforePublish tells the publish hook about msg, which system publishes
// into set for intent, and returns what to call with the result.
func (h *Hooks) beforePublish(ctx context.Context, system string, set *queueSet, msg *broker.Message, intent publishIntent) func(error) {
	if h == nil || h.Publish == nil {
		return func(error) {}
	}
	if msg.Headers == nil {
		msg.Headers = map[string]string{}
	}
	p := &PublishInfo{
		Op: intent.op, System: system, Queue: set.nameOf(msg.Queue), BrokerQueue: msg.Queue, JobID: msg.ID, Kind: msg.Type,
		Attempt: int(msg.Attempt), Deferrals: int(msg.Deferrals), Priority: int(msg.Priority),
		Delay: intent.delay, Reason: intent.reason, CorrelationID: msg.CorrelationID, Headers: msg.Headers,
	}
	if done := h.Publish(ctx, p); done != nil {
		return done
	}
	return func(error) {}
}

// DeadLetterCause says why a job is dead-lettered.
type DeadLetterCause string

// The causes of a dead letter.
const (
	CauseMalformed       DeadLetterCause = "malformed"        // the body is not an envelope
	CauseTooLarge        DeadLetterCause = "too_large"        // the body is over WorkerConfig.MaxMessageBytes
	CauseNoHandler       DeadLetterCause = "no_handler"       // no handler for the job's kind (after WorkerConfig.UnknownKindWait)
	CauseDecode          DeadLetterCause = "decode_error"     // the payload does not decode into the handler's type
	CauseFatal           DeadLetterCause = "fatal"            // the handler returned Fatal
	CauseExhausted       DeadLetterCause = "exhausted"        // the retry policy's attempts are used up
	CauseInvalidDeferral DeadLetterCause = "invalid_deferral" // a deferral no hold queue can give
	CausePoison          DeadLetterCause = "poison"           // redelivered PoisonAfter times
	CauseHoldRefused     DeadLetterCause = "hold_refused"     // the broker kept refusing the hold of its retry or deferral
)

// DeadLetterEvent is what WorkerConfig.OnDeadLetter is told.
type DeadLetterEvent struct {
	// Job is the job as its handler saw it (or would have); its JobID is
	// empty for a malformed body.
	Job JobContext
	// Cause and Reason say why; Reason is what the dead letter carries.
	Cause  DeadLetterCause
	Reason string
	// Err is the handler's or the decoder's error, when there was one.
	Err error
}
