// Package rabbitmq is the RabbitMQ backend, on github.com/rabbitmq/amqp091-go.
//
// Topology (ARCHITECTURE.md §1, "Waiting" and "RabbitMQ"): each work
// queue <q> is declared with x-max-priority, next to <q>.dead (and, with
// PoisonAfter, <q>.suspects); every wait is a hold queue
// <q>.deferred.<ttl_ms> whose messages dead-letter back to <q> through the
// default exchange when their TTL ends. Every publish goes through the
// default exchange, mandatory and persistent, and returns only once the
// broker confirmed it; a message the broker returned as unroutable is an
// error, never a success.
//
// On the quorum topology (broker.Quorum; ARCHITECTURE.md §1,
// "Topologies") <q>, <q>.dead and the lane <q>.first are quorum queues,
// a message with a priority lands on the lane, Consume reads the lane
// before the backlog within one prefetch (laned.go), and every wait goes
// through the shared delay levels queuey.wait.00 to .21 (quorum.go).
// DialCluster takes a URL per node of a cluster and fails over between
// them.
//
// The backend owns a connection that publishes and declares, opened by
// Dial, and connections for the consumers, the first opened by the first
// Consume and another each time those open have no channel left for one
// more consumer (a connection has the broker's channel_max, less one the
// backend keeps; at most 16 consume connections: MaxConsumers;
// consumelinks.go). Kept apart, a broker alarm (which blocks a connection
// once it publishes, acks included) holds up only the publishes, never
// the consumers' acks. For each, a connection actor run by a supervisor dials it, drains its
// notifications and, when it is lost, dials again with jittered, capped
// backoff (the publishing one also redeclares the topology); calls made
// meanwhile wait for it, bounded by their ctx. A call amqp091 gives no ctx
// (a publish's write, a declare and its answer) that still waits on the
// broker after its caller's ctx ended, through 2 s in which the socket took
// no byte (a request: 30 s at most), gives the connection up: it returns
// ctx's error and the actor dials again. It does not use amqp091's
// own recovery.
// Publishes go through a pool of confirm-mode channels, each with many
// outstanding publishes; a returned message is paired with its publish by
// message id. Each consumer has a channel of its own with basic.qos(prefetch)
// and manual acks, and each delivery remembers that channel, so an ack for a
// delivery of a closed channel is refused, never sent on another one.
//
// A Backend is safe for concurrent use. Close it to stop its goroutines and
// close the connections.
package rabbitmq
