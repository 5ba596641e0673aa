// Package mailbox provides Mailbox, the bounded queue in front of an actor
// (package actor): its capacity is the backpressure point, where a sender
// waits while the actor is behind.
//
// All methods are safe for concurrent use by any number of producers and
// consumers. Nothing in the package starts a goroutine. The owner of a
// Mailbox should Close it when no more messages will be accepted; Close wakes
// blocked callers, and what was already buffered can still be taken with Get.
package mailbox
