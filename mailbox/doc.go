// Package mailbox provides Mailbox, the bounded queue in front of every actor.
//
// A Mailbox owns two buffered lanes: the ordinary lane, whose capacity is the
// backpressure point (a queue actor's mailbox capacity is its prefetch), and a
// small system lane for control messages such as stop or pause, which Get
// always serves first so that control is never stuck behind a full queue of
// work.
//
// All methods are safe for concurrent use by any number of producers and
// consumers. Nothing in the package starts a goroutine. The owner of a
// Mailbox should Close it when no more messages will be accepted; Close wakes
// blocked callers, and what was already buffered can still be taken with Get
// or Drain.
package mailbox
