// Package supervisor runs a fixed list of children, each a blocking
// Run(ctx) error, and restarts a child alone whenever it exits (returns an
// error, returns nil or panics) while the supervisor runs. It waits first
// (jittered exponential backoff on the injected clock) and gives up when a
// child needs more than Intensity restarts within Period, returning an
// *EscalationError so that the parent, usually another supervisor, decides
// what happens next. A Supervisor's Run has the same shape as a child's, so
// supervisors nest.
//
// One goroutine, the Run loop, owns all of a run's state: children report
// their exits and timers report due restarts to it by message. It starts one
// goroutine per running child, recovers a child's panic as a *CrashError,
// and stops them all, in reverse start order, before Run returns; a child
// that ignores its cancelled ctx past ShutdownTimeout is named in a
// *ShutdownError and left behind, since nothing can stop it.
//
// New and Run are safe to call from any goroutine, but a Supervisor should
// run once at a time: two concurrent Runs would run every child twice. The
// caller stops a Supervisor by cancelling Run's ctx.
package supervisor
