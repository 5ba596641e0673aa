// Package inspect reads what a broker tells of a queue set's queues: how
// many messages each holds ready, how many its consumers hold (unacked),
// how many wait in its hold queues, how many are dead letters or
// suspects, its consumers and its type; and, through RabbitMQ's
// management API, how each queue was declared. The console's pages, the
// depth gauges of package trace and the queuey command read the broker
// through it.
//
// For returns the Inspector a backend allows: the memory backend's own
// inspection (everything, no broker request), RabbitMQ's management API
// when one is given (one request for the whole virtual host), or else one
// Depth call per queue asked for (ready counts only). A Snapshot says
// what its look could not show and how many broker requests it cost.
// Inspectors hold no state between looks and are safe for concurrent
// use; nothing here starts a goroutine or needs closing.
package inspect
