package queuey

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/queuey-go/queuey/broker"
)

const (
	// DefaultMaxPriority is the number of priority levels a queue gets when
	// Queue.MaxPriority is left at zero. RabbitMQ recommends at most 10.
	DefaultMaxPriority = 10
	// NoPriorities, as Queue.MaxPriority, declares a plain FIFO queue:
	// deferred jobs then come back FIFO at priority 0.
	NoPriorities = -1
	// DefaultPrefetch is a queue's prefetch when Queue.Prefetch is zero.
	DefaultPrefetch = 16
)

// Queue is one named work queue and its settings. The zero value of every
// field but Name means its documented default.
type Queue struct {
	// Name is the queue's name within its QueueSet; the broker name is
	// "<prefix>.<name>" when the set has a prefix.
	Name string
	// Prefetch bounds the deliveries a worker holds for this queue, running
	// or waiting in the queue actor's mailbox. Default DefaultPrefetch.
	Prefetch int
	// MaxPriority is the queue's top priority (x-max-priority), where
	// deferred jobs come back. 0 means DefaultMaxPriority (10);
	// NoPriorities means a plain FIFO queue; at most 255.
	MaxPriority int
	// Retry is the queue's retry policy. Default: no retries (one attempt).
	// A job may override it by implementing RetryPolicer.
	Retry *RetryPolicy
	// JobTimeout cancels a handler's ctx after this long and counts the run
	// as a retryable failure, whatever error the handler then returns (a
	// Fatal or a Defer too); one that returns nil finished its work, and
	// succeeded. Default: WorkerConfig.JobTimeout.
	JobTimeout time.Duration
	// Transient queues (and their hold queues) do not survive a broker
	// restart. Default: durable.
	Transient bool
	// MessageTTL, when positive, drops messages that waited longer on the
	// queue (x-message-ttl). Default: none.
	MessageTTL time.Duration
	// Type is the kind of broker queue: Classic or Quorum. Default: the
	// set's Type.
	Type QueueType
}

// QueueSet is an application's queues: what producers may publish to and
// workers may consume from.
type QueueSet struct {
	// Prefix, when set, is put before every queue name with a dot.
	Prefix string
	// Queues are the set's queues; names must be unique.
	Queues []Queue
	// RetryGranularity is the step retry backoffs and EnqueueAfter delays are
	// rounded up to (one hold queue per step). Default 1 s.
	RetryGranularity time.Duration
	// DeferGranularity is the step deferrals are rounded up to. A
	// Retry-After is a contract, so keep it fine. Default 1 s. On
	// Quorum queues waits are whole seconds whatever it says.
	DeferGranularity time.Duration
	// Type is the kind of broker queue its queues are, unless a Queue
	// says otherwise: Classic (the default) or Quorum.
	Type QueueType
}

// QueueType is the kind of broker queue a Queue is declared as
// (ARCHITECTURE.md §1, "Topologies"). The zero value means the default:
// the set's type for a Queue, Classic for a QueueSet.
type QueueType int

const (
	// Classic queues live on one node: native priorities, a hold queue
	// per distinct wait, the Rust crate's topology wire for wire. A node
	// that is lost takes its queues away until it is back.
	Classic QueueType = iota + 1
	// Quorum queues are replicated over a RabbitMQ cluster's nodes (3.10
	// and later) and lose no job with a minority of them. Deferred jobs
	// come back on a lane of their own, which the worker takes from
	// before the backlog; waits go through a fixed set of delay levels,
	// in whole seconds, and are never early. Quorum queues are always
	// durable: a Transient one is refused.
	Quorum
)

// String is "classic", "quorum", or "default" for the zero value.
func (t QueueType) String() string {
	switch t {
	case 0:
		return "default"
	case Classic, Quorum:
		return t.broker().String()
	}
	return fmt.Sprintf("QueueType(%d)", int(t))
}

// broker is the broker's type for t (Classic for the zero value).
func (t QueueType) broker() broker.QueueType {
	if t == Quorum {
		return broker.Quorum
	}
	return broker.Classic
}

// queueConfig is a Queue with its defaults applied and its names resolved.
type queueConfig struct {
	Queue
	broker      string
	maxPriority uint8
	qtype       broker.QueueType
	prefetch    int
	retry       RetryPolicy
}

func (c *queueConfig) spec() broker.QueueSpec {
	return broker.QueueSpec{Name: c.broker, MaxPriority: c.maxPriority, Durable: !c.Transient, MessageTTL: c.MessageTTL, Type: c.qtype}
}

// suspects is the spec of the queue's suspects queue (poison.go).
func (c *queueConfig) suspects() broker.QueueSpec {
	return broker.QueueSpec{Name: broker.SuspectQueueName(c.broker), Durable: !c.Transient, Plain: true, Type: c.qtype}
}

// queueSet is a validated QueueSet.
type queueSet struct {
	byName           map[string]*queueConfig // by Queue.Name
	byBroker         map[string]*queueConfig // by broker name, its suspects queue's included
	prefix           string
	ordered          []*queueConfig
	retryGranularity time.Duration
	deferGranularity time.Duration
}

func resolve(set QueueSet) (*queueSet, error) {
	if len(set.Queues) == 0 {
		return nil, fmt.Errorf("%w: the queue set has no queues", ErrInvalidQueue)
	}
	if set.RetryGranularity < 0 || set.DeferGranularity < 0 {
		return nil, fmt.Errorf("%w: granularities must not be negative (retry %v, defer %v)",
			ErrInvalidQueue, set.RetryGranularity, set.DeferGranularity)
	}
	s := &queueSet{
		byName:           map[string]*queueConfig{},
		byBroker:         map[string]*queueConfig{},
		prefix:           set.Prefix,
		retryGranularity: cmp.Or(set.RetryGranularity, broker.DefaultGranularity),
		deferGranularity: cmp.Or(set.DeferGranularity, broker.DefaultGranularity),
	}
	for _, q := range set.Queues {
		c, err := resolveQueue(set.Prefix, set.Type, q)
		if err != nil {
			return nil, err
		}
		if _, dup := s.byName[q.Name]; dup {
			return nil, fmt.Errorf("%w: queue %q appears twice in the set", ErrInvalidQueue, q.Name)
		}
		s.byName[q.Name] = c
		s.byBroker[c.broker] = c
		s.byBroker[broker.SuspectQueueName(c.broker)] = c
		s.ordered = append(s.ordered, c)
	}
	for _, c := range s.ordered {
		if c.broker == broker.CancelLedgerName(set.Prefix) || c.broker == broker.CancelFollowersName(set.Prefix) {
			return nil, fmt.Errorf("%w: queue %q is named as the ledger of cancellations or its followers' queue", ErrInvalidQueue, c.Name)
		}
	}
	// A queue named as another's dead-letter, suspects or hold queue would
	// be declared with that one's arguments or with its own, never both.
	for _, c := range s.ordered {
		for _, o := range s.ordered {
			if c.broker == broker.DeadQueueName(o.broker) {
				return nil, fmt.Errorf("%w: queue %q is named as the dead-letter queue of queue %q", ErrInvalidQueue, c.Name, o.Name)
			}
			if c.broker == broker.SuspectQueueName(o.broker) {
				return nil, fmt.Errorf("%w: queue %q is named as the suspects queue (WorkerConfig.PoisonAfter) of queue %q", ErrInvalidQueue, c.Name, o.Name)
			}
			if w, _, ok := broker.ParseHoldQueueName(c.broker); ok && w == o.broker {
				return nil, fmt.Errorf("%w: queue %q is named as a hold queue of queue %q", ErrInvalidQueue, c.Name, o.Name)
			}
		}
	}
	return s, nil
}

func resolveQueue(prefix string, setType QueueType, q Queue) (*queueConfig, error) {
	if q.Name == "" {
		return nil, fmt.Errorf("%w: a queue has no name", ErrInvalidQueue)
	}
	c := &queueConfig{Queue: q, broker: broker.QueueName(prefix, q.Name)}
	if err := c.resolveType(setType); err != nil {
		return nil, err
	}
	switch {
	case q.MaxPriority == 0:
		c.maxPriority = DefaultMaxPriority
	case q.MaxPriority == NoPriorities:
		c.maxPriority = 0
	case q.MaxPriority > 0 && q.MaxPriority <= 255:
		c.maxPriority = uint8(q.MaxPriority)
	default:
		return nil, fmt.Errorf("%w: queue %q: max priority %d is outside 1..255 (or NoPriorities)",
			ErrInvalidQueue, c.broker, q.MaxPriority)
	}
	if q.Prefetch < 0 || q.Prefetch > 65535 {
		return nil, fmt.Errorf("%w: queue %q: prefetch %d is outside 0..65535", ErrInvalidQueue, c.broker, q.Prefetch)
	}
	c.prefetch = cmp.Or(q.Prefetch, DefaultPrefetch)
	if q.JobTimeout < 0 || q.MessageTTL < 0 {
		return nil, fmt.Errorf("%w: queue %q: job timeout %v and message ttl %v must not be negative",
			ErrInvalidQueue, c.broker, q.JobTimeout, q.MessageTTL)
	}
	c.retry = NoRetries()
	if q.Retry != nil {
		if err := q.Retry.validate(); err != nil {
			return nil, fmt.Errorf("queue %q: %w", c.broker, err)
		}
		c.retry = *q.Retry
	}
	return c, nil
}

// resolveType settles the queue's type, the set's when it says none, and
// checks its name and settings against it.
func (c *queueConfig) resolveType(setType QueueType) error {
	t := cmp.Or(c.Type, setType)
	if t < 0 || t > Quorum {
		return fmt.Errorf("%w: queue %q: %v is neither Classic nor Quorum", ErrInvalidQueue, c.broker, t)
	}
	c.Type, c.qtype = t, t.broker()
	err := broker.ValidateSpec(broker.QueueSpec{Name: c.broker, Type: c.qtype, Durable: !c.Transient})
	if errors.Is(err, broker.ErrNotReplicable) {
		return fmt.Errorf("%w: queue %q is Transient, and a Quorum queue is always durable", ErrInvalidQueue, c.broker)
	}
	return err
}

// nameOf is the Name in the set of the queue whose broker name (or whose
// suspects queue's) is brokerName, or "" for none of the set's.
func (s *queueSet) nameOf(brokerName string) string {
	if c, ok := s.byBroker[brokerName]; ok {
		return c.Name
	}
	return ""
}

// BrokerName is the broker's name for the set's queue name: "<prefix>.<name>",
// or name alone without a prefix. Package queuey names queues as the set
// does; packages broker, memory and rabbitmq, the broker and its tools
// name them so.
func (set QueueSet) BrokerName(name string) string { return broker.QueueName(set.Prefix, name) }

// forJob finds the configuration of job's queue. The set's Queue is the
// one whose settings count: a job's Queue() may repeat them (the same
// value) or give its Name alone, but a setting it gives that differs from
// the set's is refused rather than ignored.
func (s *queueSet) forJob(job Job) (*queueConfig, error) {
	q := job.Queue()
	c, ok := s.byName[q.Name]
	if !ok {
		return nil, fmt.Errorf("%w: job kind %q names queue %q, which is not in the queue set", ErrUnknownQueue, job.Kind(), q.Name)
	}
	if field := disagreement(q, c.Queue); field != "" {
		return nil, fmt.Errorf("%w: job kind %q: its Queue() gives queue %q's %s otherwise than the QueueSet does; "+
			"the set's settings are the ones used: return the set's Queue value, or a Queue with only its Name", ErrInvalidQueue, job.Kind(), q.Name, field)
	}
	return c, nil
}

// disagreement names the first setting that job's queue gives (not zero)
// and that differs from the set's, or returns "".
func disagreement(job, set Queue) string {
	switch {
	case job.Prefetch != 0 && job.Prefetch != set.Prefetch:
		return "Prefetch"
	case job.MaxPriority != 0 && job.MaxPriority != set.MaxPriority:
		return "MaxPriority"
	case job.Retry != nil && (set.Retry == nil || *job.Retry != *set.Retry):
		return "Retry"
	case job.JobTimeout != 0 && job.JobTimeout != set.JobTimeout:
		return "JobTimeout"
	case job.Transient && !set.Transient:
		return "Transient"
	case job.MessageTTL != 0 && job.MessageTTL != set.MessageTTL:
		return "MessageTTL"
	case job.Type != 0 && job.Type != set.Type:
		return "Type"
	}
	return ""
}
