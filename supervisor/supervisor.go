package supervisor

import (
	"context"
	"errors"
	"runtime"
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
// ctx (carrying ctx's values; the supervisor cancels it), restarts a child
// alone, after its backoff, whenever it exits, and returns once they have
// all stopped:
//
//   - nil when ctx ended and every child returned within ShutdownTimeout;
//   - a *ShutdownError naming the children that did not;
//   - an *EscalationError when a child exceeded the restart intensity (joined
//     with a *ShutdownError if some children then did not stop in time);
//   - an error at once if the spec or children are invalid.
//
// Children are stopped one at a time in reverse start order. Run returns
// only when ctx ends or on escalation.
func (s *Supervisor) Run(ctx context.Context) error {
	spec := s.spec.withDefaults()
	if err := spec.validate(s.children); err != nil {
		return err
	}
	r := &run{
		Spec:  spec,
		slots: make([]slot, len(s.children)),
		exits: make(chan *instance),
		due:   make(chan int),
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
		case i := <-r.due:
			if ctx.Err() == nil {
				r.slots[i].timer = nil
				r.start(ctx, i)
			}
		}
	}
}

// run is the state of one Run, owned by its loop goroutine.
type run struct {
	Spec
	slots []slot
	exits chan *instance // a child's goroutine reports its exit
	due   chan int       // a backoff timer reports that its child's restart is due
	quit  chan struct{}  // closed when Run returns, releasing late reporters
	stuck []string       // children abandoned after ShutdownTimeout
}

// slot is one child and its current state: running (inst), waiting for its
// backoff (timer), or down.
type slot struct {
	Child
	inst     *instance
	timer    *clock.Timer
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

// start runs child i in a new goroutine that reports its exit on r.exits.
func (r *run) start(ctx context.Context, i int) {
	sl := &r.slots[i]
	// The child keeps ctx's values but not its cancellation: the loop
	// cancels children itself, one at a time, in reverse start order.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in := &instance{slot: i, cancel: cancel, done: make(chan struct{}), abandon: make(chan struct{})}
	sl.inst = in
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
	returned := false
	defer func() {
		p := recover()
		if p == nil && !returned {
			// A panic(nil) under GODEBUG=panicnil=1, which recover
			// gives as nil: a crash all the same.
			p = new(runtime.PanicNilError)
		}
		if p != nil {
			err = &CrashError{Child: name, Panic: p, Stack: debug.Stack()}
		}
	}()
	err = fn(ctx)
	returned = true
	return err
}

// exited handles a child that returned on its own: it restarts it alone
// after its backoff, or escalates when the child exceeded the intensity. It
// returns a non-nil error when Run must return it.
func (r *run) exited(ctx context.Context, in *instance) error {
	sl := &r.slots[in.slot]
	sl.inst = nil // in is current: a stopped instance reports on abandon instead
	if ctx.Err() != nil {
		return nil // shutting down; the loop sees ctx next
	}

	now := r.Clock.Now()
	sl.restarts = slices.DeleteFunc(sl.restarts, func(t time.Time) bool { return now.Sub(t) >= r.Period })
	sl.restarts = append(sl.restarts, now)
	if n := len(sl.restarts); n > r.Intensity {
		esc := &EscalationError{Supervisor: r.Name, Child: sl.Name, Restarts: n, Period: r.Period, Last: in.err}
		r.Logger.Error("supervisor giving up", "supervisor", r.Name, "error", esc)
		return r.shutdown(esc)
	}
	r.restart(ctx, in.slot, in.err)
	return nil
}

// restart logs child i's exit with err and starts it again after its
// backoff: at once if the delay is zero, else when its timer reports due.
func (r *run) restart(ctx context.Context, i int, err error) {
	sl := &r.slots[i]
	delay := r.backoff(len(sl.restarts))
	attrs := []any{"supervisor", r.Name, "child", sl.Name, "error", err, "delay", delay}
	if crash := (*CrashError)(nil); errors.As(err, &crash) {
		attrs = append(attrs, "stack", string(crash.Stack))
	}
	r.Logger.Warn("restarting child", attrs...)
	if delay <= 0 {
		r.start(ctx, i)
		return
	}
	sl.timer = r.Clock.AfterFunc(delay, func() {
		select {
		case r.due <- i:
		case <-r.quit:
		}
	})
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
		if sl.timer != nil {
			sl.timer.Stop() // a pending restart; a late report finds quit closed
			sl.timer = nil
		}
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
