package queuey

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Pause stops the worker taking jobs from the queue named name
// (Queue.Name) until until, as a handler's PauseQueue does: the deliveries
// its queue actor holds and has not started go back to the broker, running
// handlers finish and are settled, and the queue is consumed again at
// until. A pause that already lasts longer is kept. It is how an operator
// steers a worker from outside (a console, a command sent by message).
//
// Pause returns once the queue actor has taken the command, or with ctx's
// error if ctx ends first (a worker that has not started takes it when it
// does). It returns an ErrUnknownQueue error for a queue the worker does
// not consume, an ErrInvalidDelay error for an until that is not in the
// future (Resume ends a pause), and ErrWorkerStopped once Run has returned.
func (w *Worker) Pause(ctx context.Context, name string, until time.Time) error {
	if !until.After(w.clock.Now()) {
		return fmt.Errorf("%w: pause queue %q until %v: not in the future (Resume ends a pause)", ErrInvalidDelay, name, until)
	}
	return w.command(ctx, name, until)
}

// Resume ends a pause of the queue named name now, whoever asked for it
// (Pause, or a handler's PauseQueue): the queue is consumed again at once,
// or, if it is still letting its running handlers finish, once they have.
// A queue that is not paused is left as it is. It returns as Pause does.
func (w *Worker) Resume(ctx context.Context, name string) error {
	return w.command(ctx, name, time.Time{})
}

// Paused maps each queue (Queue.Name) the worker holds paused now to when
// its pause ends: paused by Pause or by a handler's PauseQueue. A queue
// whose pause is over is not in it, even while it is still starting to
// consume again.
func (w *Worker) Paused() map[string]time.Time {
	now := w.clock.Now()
	out := map[string]time.Time{}
	for name, a := range w.queueActors {
		if ns := a.gauges.pausedUntil.Load(); ns != 0 && time.Unix(0, ns).After(now) {
			out[name] = time.Unix(0, ns)
		}
	}
	return out
}

// command sends a pause (until set) or a resume to the queue actor of
// name and waits until it has taken it.
func (w *Worker) command(ctx context.Context, name string, until time.Time) error {
	a, err := w.commandable(name)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	if err := a.tell(ctx, pauseCommand{until: until, done: done}); err != nil {
		return fmt.Errorf("queue %q: %w", name, err)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("queue %q: %w", name, ctx.Err())
	}
}

// commandable is the queue actor of name, if it is one the worker runs.
func (w *Worker) commandable(name string) (*queueActor, error) {
	a, ok := w.queueActors[name]
	if !ok {
		return nil, fmt.Errorf("%w: queue %q is not consumed by this worker (its queues: %v)", ErrUnknownQueue, name, slices.Sorted(maps.Keys(w.queueActors)))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.state == workerDone:
		return nil, ErrWorkerStopped
	case len(w.jobs.handlers) == 0:
		return nil, fmt.Errorf("%w: queue %q: the worker has no handlers, so it consumes no queue", ErrUnknownQueue, name)
	}
	return a, nil
}
