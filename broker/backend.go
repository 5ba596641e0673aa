package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Errors every Backend reports the same way, so callers and the conformance
// suite can check them with errors.Is whatever the transport.
var (
	// ErrClosed: the backend (or the consumer) was closed; nothing was done.
	ErrClosed = errors.New("queuey: backend is closed")
	// ErrUnknownQueue: a wait was asked for a queue that was never declared
	// through this backend, so its hold queue's durability and release target
	// would be guesses.
	ErrUnknownQueue = errors.New("queuey: unknown queue")
	// ErrNoHold: the hold a message was published into is gone (a hold
	// queue that expired or was deleted, delay levels that were deleted).
	// Nothing was held: declare it again (DeclareHold) and hold again.
	ErrNoHold = errors.New("queuey: the hold is gone; declare it again")
	// ErrUnroutable: the broker returned the message because no queue of
	// that name exists. It was not published.
	ErrUnroutable = errors.New("queuey: message is unroutable (no such queue)")
	// ErrNoQueue: a consumer was asked for a queue that does not exist.
	ErrNoQueue = errors.New("queuey: no such queue")
	// ErrPreconditionFailed: a queue exists with other arguments than the
	// declaration asks for (RabbitMQ's PRECONDITION_FAILED).
	ErrPreconditionFailed = errors.New("queuey: queue exists with different arguments")
	// ErrStaleDelivery: the delivery belongs to a consumer that has ended;
	// the broker has already taken it back, so settling it again is refused
	// rather than sent on another consumer's channel.
	ErrStaleDelivery = errors.New("queuey: delivery belongs to a consumer that has ended")
	// ErrAlreadySettled: the delivery was acked, rejected or requeued before.
	ErrAlreadySettled = errors.New("queuey: delivery was already settled")
	// ErrUnavailable: the queue exists but cannot be used now: the node
	// it lives on is down or out of reach (a classic queue on a node of a
	// cluster that was lost). It comes back with its node.
	ErrUnavailable = errors.New("queuey: the queue is unavailable: its node is down or unreachable")
	// ErrInUse: a consumer that must be alone on its queue
	// (ExclusiveConsumer) found another there, or found one there first
	// (RabbitMQ's ACCESS_REFUSED).
	ErrInUse = errors.New("queuey: queue is in use by another consumer")
)

// InequivalentError is a declaration the broker refused because the
// queue exists with another value of one argument (RabbitMQ's
// PRECONDITION_FAILED); it is ErrPreconditionFailed to errors.Is.
type InequivalentError struct {
	// Queue is the queue's broker name.
	Queue string
	// Arg is the argument that differs, as the broker names it
	// ("durable", "x-max-priority", "x-message-ttl", "x-queue-type"), or
	// "" when it did not say.
	Arg string
	// Err is the whole error, which says what to do.
	Err error
}

func (e *InequivalentError) Error() string { return e.Err.Error() }

// Unwrap is Err.
func (e *InequivalentError) Unwrap() error { return e.Err }

// QueueSpec is what a backend needs to declare one work queue and its dead
// letter queue. Names are full broker names (prefix included).
type QueueSpec struct {
	// Name is the work queue's broker name.
	Name string
	// MaxPriority is the x-max-priority argument; 0 declares a plain FIFO
	// queue without priorities.
	MaxPriority uint8
	// Durable queues (and their hold queues) survive a broker restart.
	Durable bool
	// MessageTTL, when positive, is the queue-wide x-message-ttl.
	MessageTTL time.Duration
	// Plain declares the queue alone, without a dead-letter queue: a
	// queue a worker keeps for itself (SuspectQueueName), whose dead
	// letters go to its work queue's.
	Plain bool
	// Type is the kind of queue: Classic (the default) or Quorum, for the
	// work queue, its dead-letter queue and, on Quorum, its lane.
	Type QueueType
	// SingleActiveConsumer delivers to one consumer at a time, the one
	// that came first; when it ends, the next one takes over with what it
	// left unsettled (x-single-active-consumer). A periodic schedule
	// elects its leader so.
	SingleActiveConsumer bool
}

// Message is one publish: an encoded envelope and the properties that mirror
// it on the wire (ARCHITECTURE.md §1, "Wire format").
type Message struct {
	// Queue is the work queue the message is for (never a hold or dead queue).
	Queue string
	// ID is the message id: the job id.
	ID string
	// Type is the job kind.
	Type string
	// Priority is the AMQP priority; the broker caps it at the queue's maximum.
	Priority uint8
	// Attempt and Deferrals mirror the envelope in the x-attempt and
	// x-deferrals headers; they are informational.
	Attempt   uint32
	Deferrals uint32
	// CorrelationID is the AMQP correlation id: the job's, when it has one.
	CorrelationID string
	// Headers are extra string headers (trace context, for instance).
	Headers map[string]string
	// DueAt is when the message is due to run, when the publisher says:
	// the end of its hold, or the time of a publish that is not its job's
	// enqueue (a replay). Zero means due when the job was enqueued (the
	// envelope's enqueued_at), unless FromHold: then unknown. On the wire it
	// is the HeaderDue header, to the millisecond; plain enqueues leave it
	// out, which spares the broker a header per message.
	DueAt time.Time
	// FromHold reports a delivery that came back from a hold queue (on
	// RabbitMQ, one that carries x-death). Publish ignores it.
	FromHold bool
	// Body is the encoded envelope, or for a malformed delivery the raw bytes.
	Body []byte
}

// DeadLetter is a message moved to a queue's dead-letter queue, with why.
type DeadLetter struct {
	Message
	// Reason says why the message was dead-lettered.
	Reason string
}

// Backend is the transport: where messages are declared, published, held and
// consumed. Implementations are safe for concurrent use.
type Backend interface {
	// Name identifies the messaging system: "memory" or "rabbitmq".
	Name() string
	// Declare creates the work queues and their dead-letter queues. It is
	// idempotent, and it is what makes a queue known for Hold.
	Declare(ctx context.Context, queues ...QueueSpec) error
	// Publish puts msg on msg.Queue and returns once the broker has
	// confirmed it. A message nobody could route is an ErrUnroutable error.
	Publish(ctx context.Context, msg Message) error
	// DeclareHold makes ready where a message for queue waits ttl: on
	// RabbitMQ the hold queue HoldQueueName(queue, ttl), which expires 2×ttl
	// after its last declare (HoldQueueArgs), or for a quorum queue the
	// delay levels. It is idempotent; when to declare is the caller's (the
	// worker's hold actor keeps the record of what it declared). A queue
	// not declared through this backend gives ErrUnknownQueue.
	DeclareHold(ctx context.Context, queue string, ttl time.Duration) error
	// Hold publishes msg into the hold DeclareHold made ready for msg.Queue
	// and ttl: after exactly ttl it lands on msg.Queue with msg.Priority.
	// ttl is already rounded and checked by HoldTTL. The broker takes the
	// hold only once it has seen msg.Queue there: a work queue that is gone
	// gives ErrNoQueue, a hold that is gone ErrNoHold, and neither holds
	// anything. A queue not declared through this backend gives
	// ErrUnknownQueue.
	Hold(ctx context.Context, msg Message, ttl time.Duration) error
	// DeadLetter publishes dl to the dead-letter queue of dl.Queue with the
	// reason in its headers, confirmed.
	DeadLetter(ctx context.Context, dl DeadLetter) error
	// Depth counts the messages ready on queue (not those handed to
	// consumers and not yet settled). A missing queue gives ErrNoQueue.
	Depth(ctx context.Context, queue string) (int, error)
	// Consume starts a consumer on queue holding at most prefetch unsettled
	// deliveries (prefetch ≥ 1).
	Consume(ctx context.Context, queue string, prefetch int) (Consumer, error)
	// Close ends every consumer and refuses later calls with ErrClosed.
	Close() error
}

// BatchPublisher is a Backend that publishes many messages with their
// confirms in flight together, from one caller. A producer's EnqueueBatch
// uses it when the backend has it, and otherwise calls Publish from many
// goroutines; a wrapper that embeds a Backend interface hides it.
type BatchPublisher interface {
	// PublishBatch publishes each of msgs as Publish would, and returns
	// when every one is confirmed or has failed. It calls settled once per
	// message, from the goroutine that called PublishBatch, as soon as
	// that message's outcome is known: i is its index in msgs and err is
	// nil once it is confirmed. A message that fails does not stop the
	// others. Messages may reach their queues, and be settled, out of
	// order.
	PublishBatch(ctx context.Context, msgs []Message, settled func(i int, err error))
}

// ExclusiveConsumer is a Backend that can consume a queue alone: the
// dead-letter tools read a dead-letter queue so, so that two readers do
// not split its messages between them unawares. A wrapper that embeds a
// Backend interface hides it; the tools then consume as any consumer.
type ExclusiveConsumer interface {
	// ConsumeExclusive is Consume for a consumer that is the queue's only
	// one: it fails with ErrInUse while the queue has another consumer,
	// and until it is stopped or ends, any other consumer of the queue
	// fails so.
	ConsumeExclusive(ctx context.Context, queue string, prefetch int) (Consumer, error)
}

// ConsumerLimit is a Backend that can have only so many consumers at
// once (RabbitMQ: a channel each, and so many channels a connection).
// queuey.NewWorker refuses a worker with more queues than that, rather
// than serve some of them. A wrapper that embeds a Backend interface
// hides it; the worker is then not checked.
type ConsumerLimit interface {
	// MaxConsumers is how many consumers the backend can have at once.
	MaxConsumers() int
}

// Consumer receives deliveries from one queue.
type Consumer interface {
	// Deliveries yields deliveries until the consumer ends; then it is closed.
	Deliveries() <-chan Delivery
	// Err says why the consumer ended: nil after Cancel, else the cause
	// (ErrClosed, a lost connection). Valid once Deliveries is closed.
	Err() error
	// Stop ends new deliveries (basic.cancel) but keeps the consumer's
	// channel: Deliveries yields what the broker had already sent and then
	// closes, and every delivery can still be settled. A stopping worker
	// gives back what it will not run without having it handed straight
	// back to itself. Err stays nil, unless the consumer is lost before
	// Deliveries closes (then the broker has its deliveries back).
	Stop()
	// Cancel ends the consumer. Deliveries not yet settled go back to the
	// queue, as they do when a broker channel closes.
	Cancel()
}

// Delivery is one received message. Exactly one settle call succeeds.
type Delivery interface {
	// Message is what was received. For a body that is not a valid
	// envelope, only Body and Queue are meaningful.
	Message() Message
	// Redelivered reports that the broker delivered this message before.
	Redelivered() bool
	// Ack settles the delivery as done.
	Ack(ctx context.Context) error
	// Requeue gives the delivery back to the queue, to its front.
	Requeue(ctx context.Context) error
}

// MaxReasonBytes is the longest dead-letter reason a message carries in its
// headers: a handler's error text may be any length (an HTTP body), and a
// header past the broker's frame size closes the connection. Longer
// reasons are cut at a UTF-8 boundary and marked so; the whole text goes to
// the worker's log and hooks.
const MaxReasonBytes = 4096

// CapReason is reason cut to MaxReasonBytes at a UTF-8 boundary, ending
// in a note of how much was cut; a shorter reason is returned as it is.
func CapReason(reason string) string {
	if len(reason) <= MaxReasonBytes {
		return reason
	}
	note := fmt.Sprintf("… (%d bytes cut)", len(reason))
	cut := MaxReasonBytes - len(note)
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return strings.ToValidUTF8(reason[:cut], "") + fmt.Sprintf("… (%d bytes cut)", len(reason)-cut)
}

// DeadLetterHeaders are the headers a dead-lettered message carries: its
// own, plus the reason, the original queue and the attempts made.
func DeadLetterHeaders(dl DeadLetter) map[string]string {
	h := make(map[string]string, len(dl.Headers)+3)
	for k, v := range dl.Headers {
		h[k] = v
	}
	h[HeaderDeathReason] = CapReason(dl.Reason)
	h[HeaderOriginalQueue] = dl.Queue
	h[HeaderAttempts] = strconv.FormatUint(uint64(dl.Attempt), 10)
	return h
}
