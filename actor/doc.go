// Package actor is a small typed actor runtime: an Actor owns a bounded
// mailbox of messages of one type M and handles them one at a time with a
// Receive function, so the state that function closes over needs no lock.
//
// An Actor does not start goroutines of its own: its loop is Run, which a
// supervisor (or any caller) runs in a goroutine it owns and stops by
// cancelling Run's ctx. A Receive that returns an error or panics crashes the
// actor: Run returns a *CrashError and the supervisor decides whether to call
// Run again. The mailbox belongs to the Actor, not to one Run, so messages
// queued for a crashed actor are handled by the restarted one.
//
// Send, Ask and Stop are safe for concurrent use. Only one Run may
// be active at a time (another returns ErrRunning). The caller must stop the
// goroutine running Run (cancel its ctx, or Stop the actor), and should Stop
// an actor it will no longer use so that senders get ErrStopped instead of
// blocking on a full mailbox nobody reads.
package actor
