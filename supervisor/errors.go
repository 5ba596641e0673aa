package supervisor

import (
	"fmt"
	"strings"
	"time"
)

// CrashError is the error of a child that panicked.
type CrashError struct {
	Child string // the child's name
	Panic any    // the value passed to panic
	Stack []byte // the child goroutine's stack at the panic
}

// Error names the child and the panic value.
func (e *CrashError) Error() string {
	return fmt.Sprintf("child %s panicked: %v", e.Child, e.Panic)
}

// Unwrap returns the panic value if it is an error, so that errors.Is sees
// through panic(err).
func (e *CrashError) Unwrap() error {
	err, _ := e.Panic.(error)
	return err
}

// EscalationError is returned by Run when a child needed more than Intensity
// restarts within Period: restarting has not helped, so the supervisor
// stopped all its children and hands the problem to its parent.
type EscalationError struct {
	Supervisor string        // the supervisor's name
	Child      string        // the child that kept exiting
	Restarts   int           // its restarts within Period, counting the refused one
	Period     time.Duration // the window of the count
	Last       error         // the child's last error; nil if it returned nil
}

// Error says who gave up and why, for example "supervisor worker: child
// queue:emails restarted 6 times in 10s, giving up: boom".
func (e *EscalationError) Error() string {
	cause := "it returned nil"
	if e.Last != nil {
		cause = e.Last.Error()
	}
	return fmt.Sprintf("supervisor %s: child %s restarted %d times in %s, giving up: %s",
		e.Supervisor, e.Child, e.Restarts, e.Period, cause)
}

// Unwrap returns the child's last error.
func (e *EscalationError) Unwrap() error { return e.Last }

// ShutdownError is returned by Run when children did not return within
// ShutdownTimeout of being stopped. Their goroutines may still be running.
type ShutdownError struct {
	Supervisor string        // the supervisor's name
	Children   []string      // the children that did not stop, in the order they were stopped
	Timeout    time.Duration // the ShutdownTimeout each of them exceeded
}

// Error names the children that did not stop.
func (e *ShutdownError) Error() string {
	return fmt.Sprintf("supervisor %s: children did not stop within %s: %s",
		e.Supervisor, e.Timeout, strings.Join(e.Children, ", "))
}
