package queuey

import (
	"errors"
	"fmt"
	"time"
)

// RetryableError marks a failure worth retrying under the retry policy. A
// plain error means the same; wrap one to say so explicitly.
type RetryableError struct{ Err error }

func (e *RetryableError) Error() string { return "job failed (retryable): " + e.Err.Error() }
func (e *RetryableError) Unwrap() error { return e.Err }

// FatalError marks a failure no retry can mend: the job is dead-lettered at
// once, whatever the policy.
type FatalError struct{ Err error }

func (e *FatalError) Error() string { return "job failed (fatal): " + e.Err.Error() }
func (e *FatalError) Unwrap() error { return e.Err }

// DeferError asks for the job to run again after Delay, ahead of the
// backlog, without spending an attempt: nothing went wrong, it is just not
// time yet (an API answered 429 with Retry-After).
type DeferError struct {
	Delay  time.Duration
	Reason string
}

func (e *DeferError) Error() string {
	return fmt.Sprintf("job deferred for %v: %s", e.Delay, e.Reason)
}

// PauseError asks for what DeferError asks, and more: the whole queue is
// rate limited, so its worker stops taking the queue's deliveries until
// the job comes back; queue-mates do not burn calls or attempts meanwhile.
type PauseError struct {
	Delay  time.Duration
	Reason string
}

func (e *PauseError) Error() string {
	return fmt.Sprintf("queue paused for %v: %s", e.Delay, e.Reason)
}

// PauseQueue defers the job for d, as Defer does, and pauses its queue in
// this worker until the job is back: the deliveries it holds go back to
// the broker, running handlers finish, and consuming resumes once the
// deferred job is on the queue again, at the top priority, so it runs
// first: its wait (d rounded up to DeferGranularity) and 0.1 s later, the
// 0.1 s for the broker to hand the expired job on. PauseQueue(1500ms)
// runs the job again 2.1 s later at the default 1 s granularity. On a
// Quorum queue: the whole seconds its wait is rounded up to, and 0.5 s
// more, for it to reach the lane. Other queues are not affected, nor the
// queue's consumers in other workers (each pauses when one of its own
// jobs says so).
//
// Pause when the limit is the whole queue's: a rate limit or quota that
// the account or API key shares, a maintenance window; every queue-mate
// would be refused too, and a pause saves their calls and attempts.
// Defer (Defer) when the refusal is the job's own: a per-call or
// per-resource limit, a random or sporadic 429. Each pause stalls the
// whole queue for the wait, so a pause on such a 429 holds back jobs that
// would have gone through.
func PauseQueue(d time.Duration, reason string) error {
	if reason == "" {
		reason = "rate limited"
	}
	return &PauseError{Delay: d, Reason: reason}
}

// Retryable wraps err as a retryable failure. Retryable(nil) is nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &RetryableError{Err: err}
}

// Fatal wraps err as a failure that dead-letters the job at once.
// Fatal(nil) is nil.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &FatalError{Err: err}
}

// Fatalf is Fatal(fmt.Errorf(format, args...)).
func Fatalf(format string, args ...any) error {
	return &FatalError{Err: fmt.Errorf(format, args...)}
}

// Defer asks for the job to be held for d (rounded up to the queue set's
// DeferGranularity, never early) and then run again at the queue's top
// priority, with the same attempt and one more deferral. A d of zero or
// less (a Retry-After date already past, as a partner's clock may say)
// holds it one step of DeferGranularity. An empty reason reads
// "deferred".
func Defer(d time.Duration, reason string) error {
	if reason == "" {
		reason = "deferred"
	}
	return &DeferError{Delay: d, Reason: reason}
}

// outcome is how the worker reads a handler's result.
type outcome int

const (
	outcomeSuccess outcome = iota
	outcomeRetry
	outcomeFatal
	outcomeDefer
)

// classify reads a handler's result. For a deferral it also returns the
// delay and reason, and whether the queue pauses. A run past its job
// timeout is a retry whatever the handler then returned (a Fatal or a
// Defer reached on the cancelled ctx): ARCHITECTURE.md §1.
func classify(err error) (outcome, *DeferError, bool) {
	if err == nil {
		return outcomeSuccess, nil, false
	}
	if _, ok := errors.AsType[*timeoutError](err); ok {
		return outcomeRetry, nil, false
	}
	if d, ok := errors.AsType[*DeferError](err); ok {
		return outcomeDefer, d, false
	}
	if p, ok := errors.AsType[*PauseError](err); ok {
		return outcomeDefer, &DeferError{Delay: p.Delay, Reason: p.Reason}, true
	}
	if _, ok := errors.AsType[*FatalError](err); ok {
		return outcomeFatal, nil, false
	}
	return outcomeRetry, nil, false
}
