// Package queuey runs background jobs on RabbitMQ, or on an embedded
// in-memory backend, as supervised actors.
//
// A Job is a JSON-serialisable Go value that names its kind and its Queue.
// A Producer publishes jobs: now (Enqueue), after a wait at the back of the
// queue (EnqueueAfter), or after a wait at the front (Defer). A Worker runs
// the typed handlers registered with Handle, one queue actor per queue, each
// with a mailbox bounded by the queue's prefetch, under one supervisor.
//
// A handler's result decides what happens next:
//
//	nil                  acked
//	error, Retryable     retried after the policy's backoff, dead-lettered when attempts run out
//	                     (a Queue without Retry runs a job once: a failure dead-letters it)
//	Fatal                dead-lettered at once
//	Defer(d, reason)     held for exactly d, then run again ahead of the backlog,
//	                     without spending an attempt
//
// A job of a kind the worker has no handler for waits for a worker that has
// one (WorkerConfig.UnknownKindWait), then is dead-lettered.
//
// Every wait goes through a hold queue <q>.deferred.<ms> whose messages
// return to <q> when their TTL ends, so held jobs live in the broker and
// survive any worker. Every republish is confirmed before the original is
// acked: delivery is at least once.
//
// # Getting started
//
// Declare your queues once, as a QueueSet, and give each job type a Kind
// and a Queue (the set's Queue value). Make a backend (memory.New in tests
// and demos, rabbitmq.Dial in production), a Producer and a Worker on it,
// register a handler per kind with Handle, and Run the worker until your
// service stops; Example below is all of it, runnable. Package clocktest
// runs the same code in virtual time for tests.
//
// Package queuey names a queue as the QueueSet does; packages broker,
// memory and rabbitmq use its broker name, "<prefix>.<name>"
// (QueueSet.BrokerName).
//
// Producer and Worker are safe for concurrent use. Worker.Run blocks until
// its ctx ends and the worker has stopped gracefully. Time is read from an
// injected clock.Clock; package clocktest runs the whole system in virtual
// time for tests.
package queuey
