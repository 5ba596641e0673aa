package supervisor

import (
	"context"
	"errors"
	"runtime/debug"
	"slices"
	"time"

	"github.com/benbjohnson/clock"
)

// Supervisor runs and restarts a fixed list of children. Create one with New.
type Supervisor struct {
	spec     Spec
	children []Child
}

// New returns a supervisor for children, started in the given order.
// The spec and children are checked when Run starts.
func New(spec Spec, children ...Child) *Supervisor {
	return &Supervisor{spec: spec, children: slices.Clone(children)}
}

// Run starts the children in order, each in its own goroutine with its own
// ctx (carrying ctx's values; the supervisor cancels it), restarts them by
// policy, and returns once they have all stopped:
//
//   - nil when ctx ended and every child returned within ShutdownTimeout;
//   - a *ShutdownError naming the children that did not;
//   - an *EscalationError when a child exceeded the restart intensity (joined
//     with a *ShutdownError if some children then did not stop in time);
//   - an error at once if the spec or children are invalid.
//
// Children are stopped one at a time in reverse start order. Run returns
// only when ctx ends or on escalation, even if every child has finished
// for good (Temporary, or Transient and clean), so that its caller does not
// mistake "nothing left to do" for a failure.
func (s *Supervisor) Run(ctx context.Context) error {
	spec := s.spec.withDefaults()
	if err := spec.validate(s.children); err != nil {
		return err
	}
	r := &run{
		Spec:  spec,
		slots: make([]slot, len(s.children)),
		exits: make(chan *instance),
		due:   make(chan due),
		quit:  make(chan struct{}),
	}
	defer close(r.quit)
	for i, c := range s.children {
		r.slots[i].Child = c
		r.start(ctx, i)
	}
	for {
		select {
		case <-ctx.Done():
			return r.shutdown(nil)
		case in := <-r.exits:
			if err := r.exited(ctx, in); err != nil {
				return err
			}
		case d := <-r.due:
			if d.gen == r.slots[d.slot].gen && ctx.Err() == nil {
				r.slots[d.slot].timer = nil
				r.startFrom(ctx, d.slot)
			}
		}
	}
}

// run is the state of one Run, owned by its loop goroutine.
type run struct {
	Spec
	slots []slot
	exits chan *instance // a child's goroutine reports its exit
	due   chan due       // a backoff timer reports that a restart is due
	quit  chan struct{}  // closed when Run returns, releasing late reporters
	stuck []string       // children abandoned after ShutdownTimeout
}

// slot is one child and its current state: running (inst), waiting for its
// backoff (timer), held for an earlier sibling's restart (held), or down.
type slot struct {
	Child
	inst     *instance
	timer    *clock.Timer
	gen      int // bumped to make an abandoned timer's report stale
	held     bool
	restarts []time.Time // within Period, for intensity and backoff
}

// instance is one run of a child's Run function.
type instance struct {
	slot    int
	cancel  context.CancelFunc
	err     error         // written before done is closed or the exit is sent
	done    chan struct{} // closed when the goroutine returns
	abandon chan struct{} // closed when the loop stops listening for this exit
}

type due struct{ slot, gen int }

func (r *run) start(ctx context.Context, i int) {
	sl := &r.slots[i]
	// The child keeps ctx's values but not its cancellation: the loop
	// cancels children itself, one at a time, in reverse start order.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in := &instance{slot: i, cancel: cancel, done: make(chan struct{}), abandon: make(chan struct{})}
	sl.inst, sl.held = in, false
	name, fn := sl.Name, sl.Run
	go func() {
		defer close(in.done)
		in.err = call(cctx, name, fn)
		cancel()
		select {
		case r.exits <- in:
		case <-in.abandon:
		}
	}()
}

// call runs a child, recovering a panic: the child is the user code here.
func call(ctx context.Context, name string, fn func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &CrashError{Child: name, Panic: p, Stack: debug.Stack()}
		}
	}()
	return fn(ctx)
}

// startFrom starts child i and, under RestForOne, the later siblings that
// were held for it.
func (r *run) startFrom(ctx context.Context, i int) {
	r.start(ctx, i)
	for j := i + 1; j < len(r.slots); j++ {
		if r.slots[j].held {
			r.start(ctx, j)
		}
	}
}

// exited applies the policy to a child that returned on its own. It returns
// a non-nil error when Run must return it.
func (r *run) exited(ctx context.Context, in *instance) error {
	i, sl := in.slot, &r.slots[in.slot]
	if sl.inst != in {
		// An instance abandoned after ShutdownTimeout may still report when
		// it finally returns; its slot has moved on.
		return nil
	}
	sl.inst = nil
	if ctx.Err() != nil {
		return nil // shutting down; the loop sees ctx next
	}
	if sl.Restart == Temporary || (sl.Restart == Transient && in.err == nil) {
		r.Logger.Info("child exited", "supervisor", r.Name, "child", sl.Name, "error", in.err)
		return nil
	}

	now := r.Clock.Now()
	sl.restarts = slices.DeleteFunc(sl.restarts, func(t time.Time) bool { return now.Sub(t) >= r.Period })
	sl.restarts = append(sl.restarts, now)
	if n := len(sl.restarts); n > r.Intensity {
		esc := &EscalationError{Supervisor: r.Name, Child: sl.Name, Restarts: n, Period: r.Period, Last: in.err}
		r.Logger.Error("supervisor giving up", "supervisor", r.Name, "error", esc)
		return r.shutdown(esc)
	}

	if r.Strategy == RestForOne {
		for j := len(r.slots) - 1; j > i; j-- {
			r.hold(j)
		}
	}
	delay := r.backoff(len(sl.restarts))
	attrs := []any{"supervisor", r.Name, "child", sl.Name, "error", in.err, "delay", delay}
	if crash := (*CrashError)(nil); errors.As(in.err, &crash) {
		attrs = append(attrs, "stack", string(crash.Stack))
	}
	r.Logger.Warn("restarting child", attrs...)
	if delay <= 0 {
		r.startFrom(ctx, i)
		return nil
	}
	sl.gen++
	gen := sl.gen
	sl.timer = r.Clock.AfterFunc(delay, func() {
		select {
		case r.due <- due{i, gen}:
		case <-r.quit:
		}
	})
	return nil
}

// hold stops child j, running or waiting for its own backoff, so that it
// restarts after an earlier sibling. Temporary children stay down.
func (r *run) hold(j int) {
	sl := &r.slots[j]
	wanted := sl.held || sl.inst != nil || sl.timer != nil
	r.cancelTimer(sl)
	if sl.inst != nil {
		r.stop(sl)
	}
	sl.held = wanted && sl.Restart != Temporary
}

// cancelTimer abandons a pending restart, if there is one.
func (r *run) cancelTimer(sl *slot) {
	if sl.timer != nil {
		sl.timer.Stop()
		sl.timer = nil
		sl.gen++
	}
}

// stop cancels a running child and waits up to ShutdownTimeout for it. A
// child that does not return in time is recorded in r.stuck and abandoned.
func (r *run) stop(sl *slot) {
	in := sl.inst
	sl.inst = nil
	in.cancel()
	close(in.abandon)
	t := r.Clock.Timer(r.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-in.done:
	case <-t.C:
		r.stuck = append(r.stuck, sl.Name)
		r.Logger.Error("child did not stop in time", "supervisor", r.Name, "child", sl.Name, "timeout", r.ShutdownTimeout)
	}
}

// shutdown stops every child in reverse start order and returns cause,
// joined with a *ShutdownError if any child was abandoned during this run.
func (r *run) shutdown(cause error) error {
	for i := len(r.slots) - 1; i >= 0; i-- {
		sl := &r.slots[i]
		r.cancelTimer(sl)
		if sl.inst != nil {
			r.stop(sl)
		}
	}
	if len(r.stuck) == 0 {
		return cause
	}
	stuck := &ShutdownError{Supervisor: r.Name, Children: r.stuck, Timeout: r.ShutdownTimeout}
	if cause == nil {
		return stuck
	}
	return errors.Join(cause, stuck)
}
