// Package broker is queuey's transport layer: the contract every backend
// meets, the message wire format, and the RabbitMQ topology as pure
// functions.
//
// It owns four things:
//
//   - The Backend, Consumer and Delivery interfaces (with Message, QueueSpec,
//     DeadLetter and the errors every backend reports alike, such as
//     ErrClosed and ErrUnknownQueue). Implementations live in subpackages:
//     broker/memory and broker/rabbitmq; broker/brokertest is the
//     conformance suite both run.
//   - The Envelope, the JSON body of every message. It is wire-compatible
//     with the Rust queuey crate, so Go and Rust processes can share queues:
//     field names, order and defaults are frozen, fields may only be added.
//   - The topology: queue names (QueueName, DeadQueueName, HoldQueueName),
//     declare arguments (QueueArgs, HoldQueueArgs), the rounding of a delay
//     to a hold queue's TTL (HoldTTL) and the name-length guard
//     (ValidateQueueName). They compute byte-identical results to the Rust
//     crate; otherwise two processes would declare the same queue with
//     different arguments and RabbitMQ would refuse one of them with
//     PRECONDITION_FAILED.
//   - KeyLocker, the uniqueness keys of unique jobs, and the names and
//     arguments of a key's lock queues (KeyLockName, KeyLockArgs).
//
// Every wait (a retry's backoff, a delayed enqueue, a deferral) goes through
// a hold queue <queue>.deferred.<ttl_ms>: a queue without consumers whose
// messages expire after ttl_ms and are dead-lettered back onto <queue>. One
// hold queue per rounded delay keeps each one strictly FIFO, so a long wait
// never blocks a short one. Delays round up, never down, and a delay longer
// than MaxHoldMs is refused with ErrDelayTooLong rather than shortened.
// A backend is the transport of a wait: it declares a hold queue when asked
// (Backend.DeclareHold) and publishes into one (Backend.Hold), saying
// ErrNoHold or ErrNoQueue when the hold or the work queue is gone. When to
// declare, and what to do about a queue gone, is the holder's (package
// queuey's hold actor, or a producer).
//
// # Concurrency
//
// Everything this package defines outside the interfaces is a pure function
// or an immutable value and is safe for concurrent use; Envelope methods
// return new values and never modify the receiver. The interfaces require
// their implementations to be safe for concurrent use as documented on each.
// Nothing here starts a goroutine or holds a resource: what must be closed
// is a Backend (Close) and a Consumer (Cancel), both owned by their backend.
package broker
