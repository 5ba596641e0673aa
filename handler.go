package queuey

import (
	"context"
	"encoding/json"
	"fmt"
)

// handler is a typed handler with its job type erased. A decoded job is
// held as a *T: one allocation, where a T in an interface would take two.
type handler interface {
	decode(payload json.RawMessage) (decodedJob, error)
	run(ctx context.Context, job decodedJob, jc JobContext) error
	// ownPolicy is the job's RetryPolicy, if its type has one.
	ownPolicy(job decodedJob) (RetryPolicy, bool)
}

// decodedJob is a *T made by typedHandler[T].decode.
type decodedJob any

type typedHandler[T Job] struct {
	h         Handler[T]
	hasPolicy bool // T is a RetryPolicer
	pooled    bool // T's payloads decode through the pooled decoder (payloadPoolable)
}

func newTypedHandler[T Job](h Handler[T]) typedHandler[T] {
	_, hasPolicy := any(*new(T)).(RetryPolicer)
	return typedHandler[T]{h: h, hasPolicy: hasPolicy, pooled: payloadPoolable[T]()}
}

func (t typedHandler[T]) decode(payload json.RawMessage) (decodedJob, error) {
	if !t.pooled {
		job := new(T)
		return job, json.Unmarshal(payload, job)
	}
	return unmarshalPayload(payload, new(T))
}

func (t typedHandler[T]) run(ctx context.Context, job decodedJob, jc JobContext) error {
	return t.h.Handle(ctx, *job.(*T), jc)
}

func (t typedHandler[T]) ownPolicy(job decodedJob) (RetryPolicy, bool) {
	if !t.hasPolicy {
		return RetryPolicy{}, false
	}
	return any(*job.(*T)).(RetryPolicer).RetryPolicy(), true
}

// Handle registers fn as w's handler for jobs of type T, by T's Kind. It
// fails for a second handler of the same kind, a kind whose queue is not in
// the worker's queue set, and once the worker has started.
func Handle[T Job](w *Worker, fn HandlerFunc[T]) error {
	if fn == nil {
		var zero T
		return fmt.Errorf("%w: nil handler for %T", ErrInvalidJob, zero)
	}
	return Register[T](w, fn)
}

// Register is Handle for a Handler value.
func Register[T Job](w *Worker, h Handler[T]) (err error) {
	var zero T
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: Kind and Queue of %T must work on its zero value: %v", ErrInvalidJob, zero, r)
		}
	}()
	kind := zero.Kind()
	if err := checkKind(kind); err != nil {
		return err
	}
	if _, err := w.set.forJob(zero); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != workerIdle {
		return fmt.Errorf("%w: register %q before Run", ErrWorkerStarted, kind)
	}
	if _, dup := w.jobs.handlers[kind]; dup {
		return fmt.Errorf("%w: kind %q already has a handler", ErrDuplicateHandler, kind)
	}
	w.jobs.handlers[kind] = newTypedHandler(h)
	return nil
}
