package actor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync/atomic"

	"github.com/queuey-go/queuey/mailbox"
)

var (
	// ErrStopped is returned by Send and Ask once the actor has been stopped.
	ErrStopped = errors.New("actor stopped")
	// ErrRunning is returned by Run while another Run of the same actor is
	// active: two loops would break the one-message-at-a-time guarantee.
	ErrRunning = errors.New("actor already running")
)

// Receive handles one message; returning an error crashes the actor.
// The ctx is the one given to Run.
type Receive[M any] func(ctx context.Context, msg M) error

// Actor handles messages of type M one at a time. Create one with New.
type Actor[M any] struct {
	name    string
	receive Receive[M]
	// mb outlives each Run so that a restart picks up where the crash left off.
	mb      *mailbox.Mailbox[M]
	running atomic.Bool
}

// New returns an actor named name (used in errors and logs) with a mailbox
// of the given capacity (below 1 means 1) that handles messages with receive.
// Nothing runs until Run is called.
func New[M any](name string, capacity int, receive Receive[M]) *Actor[M] {
	return &Actor[M]{name: name, receive: receive, mb: mailbox.New[M](capacity)}
}

// Run is the actor loop: it takes messages from the mailbox and calls receive
// with each, one at a time. It returns nil when ctx ends or, after Stop, once
// the messages queued before Stop have been handled. It returns a *CrashError
// when receive returns an error or panics; the message that crashed it is
// not retried. Run may be called again after it returned (a restart); while
// one Run is active, another returns ErrRunning at once.
func (a *Actor[M]) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return fmt.Errorf("run actor %s: %w", a.name, ErrRunning)
	}
	defer a.running.Store(false)
	for {
		msg, err := a.mb.Get(ctx)
		if err != nil {
			return nil // ctx ended or Stop: both are asked-for, clean stops
		}
		if err := a.handle(ctx, msg); err != nil {
			return err
		}
	}
}

// handle runs receive, turning a panic into a CrashError: receive is the
// only user code the actor runs, so this is the one place to recover.
func (a *Actor[M]) handle(ctx context.Context, msg M) (err error) {
	returned := false
	defer func() {
		p := recover()
		if p == nil && !returned {
			// A panic(nil) under GODEBUG=panicnil=1, which recover
			// gives as nil: a crash all the same.
			p = new(runtime.PanicNilError)
		}
		if p != nil {
			err = newPanic(a.name, p, debug.Stack())
		}
	}()
	err = a.receive(ctx, msg)
	returned = true
	if err != nil {
		return &CrashError{Actor: a.name, Err: err}
	}
	return nil
}

// Send queues msg, blocking while the mailbox is full (backpressure). It
// returns ErrStopped after Stop, or ctx's error if ctx ends first; both are
// wrapped with the actor's name.
func (a *Actor[M]) Send(ctx context.Context, msg M) error {
	err := a.mb.Put(ctx, msg)
	if errors.Is(err, mailbox.ErrClosed) {
		err = ErrStopped
	}
	if err != nil {
		return fmt.Errorf("send to actor %s: %w", a.name, err)
	}
	return nil
}

// Stop closes the mailbox for good. Later Sends return ErrStopped and
// blocked ones wake with it. Messages already queued are not dropped: the
// active Run (or the next one) handles them and then returns nil. Stop does
// not wait for that; wait for Run to return, or cancel its ctx to stop at
// once and leave the rest unhandled. Once stopped and drained, Run returns
// nil at once, and a supervisor restarts whatever exits: stop an actor
// once its supervisor has stopped (as the worker does its hold actor).
// Stop is idempotent.
func (a *Actor[M]) Stop() { a.mb.Close() }

// CrashError reports that an actor's Receive returned an error or panicked.
type CrashError struct {
	Actor string // the actor's name
	Panic any    // the value passed to panic, or nil if Receive returned an error
	Err   error  // the error Receive returned, or the panic value if it was an error
	Stack []byte // the goroutine's stack at the panic, or nil
}

func newPanic(actor string, p any, stack []byte) *CrashError {
	err, _ := p.(error) // so that errors.Is sees through panic(err)
	return &CrashError{Actor: actor, Panic: p, Err: err, Stack: stack}
}

// Error names the actor and the cause, for example
// "actor hold crashed: panic: boom".
func (e *CrashError) Error() string {
	if e.Panic != nil {
		return fmt.Sprintf("actor %s crashed: panic: %v", e.Actor, e.Panic)
	}
	return fmt.Sprintf("actor %s crashed: %v", e.Actor, e.Err)
}

// Unwrap returns the error that crashed the actor, if there was one.
func (e *CrashError) Unwrap() error { return e.Err }
