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
// priority, with the same attempt and one more deferral. An empty reason
// reads "deferred".
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

func classify(err error) (outcome, *DeferError) {
	var d *DeferError
	var f *FatalError
	switch {
	case err == nil:
		return outcomeSuccess, nil
	case errors.As(err, &d):
		return outcomeDefer, d
	case errors.As(err, &f):
		return outcomeFatal, nil
	default:
		return outcomeRetry, nil
	}
}
