// Package memory is the embedded backend: a faithful, in-process model of the
// RabbitMQ topology queuey uses, for tests, demos and single-process use.
//
// It models what the broker does and nothing more: work queues with priority
// levels (the highest level first, FIFO within a level, a priority above the
// queue's maximum counted as the maximum), a dead-letter queue per work queue,
// hold queues named <q>.deferred.<ms> whose messages land on <q> exactly when
// their TTL has passed, a queue's MessageTTL (what waited longer is
// dropped, a delivery given back keeping its first expiry), prefetch per
// consumer, and the return of unsettled deliveries when a consumer ends.
// Messages are not persisted.
//
// Every timer reads the clock.Clock given in Options, so with a mock clock
// (or inside a testing/synctest bubble) advancing 30 s releases exactly what a
// broker would release in 30 s. Held messages whose time has come are also
// released whenever the backend is used, so inspection right after a mock
// clock's Add sees them without waiting for the timer's goroutine.
//
// Tests look inside with Pending, Held, HoldQueues, InFlight, Consumers,
// DeadLetters, AckedCount (every ack on a queue) and Acked (the acked
// messages themselves, among the newest Options.KeepAcked over all queues:
// what is kept stays on the heap).
//
// A Backend is safe for concurrent use. It starts no goroutine of its own
// apart from the clock's timer callbacks; Close stops its timer and ends every
// consumer.
package memory
