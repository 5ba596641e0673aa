package queuey

import (
	"context"
	"time"
)

// Job is a unit of work: a JSON-serialisable value that names its kind and
// its queue. Both methods must work on the zero value, because a worker asks
// them of the type, before any job exists.
type Job interface {
	// Kind is the job's stable name on the wire ("send_email"); it selects
	// the handler.
	Kind() string
	// Queue names the queue the job is published to, by its Name in the
	// QueueSet. Its settings are the set's: return the set's Queue value
	// (one variable shared by both is the usual way) or a Queue with only
	// its Name; one that gives a setting otherwise than the set is refused
	// with ErrInvalidQueue (at Handle and at every enqueue).
	Queue() Queue
}

// RetryPolicer is implemented by a job whose retry policy differs from its
// queue's. It is asked for each run, so the policy may depend on the job's
// content.
type RetryPolicer interface {
	RetryPolicy() RetryPolicy
}

// JobContext is what a handler knows about the delivery it runs.
type JobContext struct {
	// JobID is the job's id, stable across retries and deferrals.
	JobID string
	// Kind is the job's kind.
	Kind string
	// Queue is the job's queue, by its Name in the QueueSet ("emails"), as
	// every call of this package names a queue.
	Queue string
	// BrokerQueue is the same queue by its broker name ("myapp.emails"),
	// as packages broker, memory and rabbitmq and the broker name it.
	BrokerQueue string
	// Attempt is 1 on the first run and grows by one per retry; deferrals
	// leave it alone.
	Attempt int
	// MaxAttempts is the effective retry policy's; a failure on this
	// attempt dead-letters the job.
	MaxAttempts int
	// Deferrals counts the handler's deferrals of this job so far.
	Deferrals int
	// Priority is the priority this delivery arrived with: the queue's top
	// priority right after a deferral, else 0.
	Priority int
	// EnqueuedAt is when the job was first enqueued.
	EnqueuedAt time.Time
	// Age is how long ago that was, when this run started.
	Age time.Duration
	// CorrelationID is carried unchanged from the enqueue through every
	// retry and deferral; empty when unset.
	CorrelationID string
	// Redelivered reports that the broker handed this delivery out before
	// (a worker stopped or crashed while holding it).
	Redelivered bool
	// Chain says where the job stands in its chain (Producer.EnqueueChain);
	// zero for a job that is not in one.
	Chain ChainStep
}

// IsLastAttempt reports whether a failure now would dead-letter the job.
func (jc JobContext) IsLastAttempt() bool { return jc.Attempt >= jc.MaxAttempts }

// HandlerFunc handles one job of kind T.
type HandlerFunc[T Job] func(ctx context.Context, job T, jc JobContext) error

// Handler is the interface form of HandlerFunc, for handlers with state.
type Handler[T Job] interface {
	Handle(ctx context.Context, job T, jc JobContext) error
}

// Handle calls f.
func (f HandlerFunc[T]) Handle(ctx context.Context, job T, jc JobContext) error {
	return f(ctx, job, jc)
}

// Middleware wraps every handler run of a worker: it sees the run's
// JobContext and calls next to run the handler (or not). It is how
// instrumentation such as package trace plugs in. It is part of the run: a
// panic in it, before or after next, fails the run as a handler's panic
// does (retried; the worker survives).
type Middleware func(ctx context.Context, jc JobContext, next func(ctx context.Context) error) error
