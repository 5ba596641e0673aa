package broker

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits, suffixes and the default rounding step of the topology. They match
// the Rust queuey crate byte for byte, so Go and Rust processes declare the
// same queues with the same arguments.
const (
	// MaxTTLMs is RabbitMQ's limit, in milliseconds, for x-message-ttl,
	// x-expires and the expiration property (2^32-1).
	MaxTTLMs = 4294967295
	// MaxHoldMs is the longest wait a hold queue takes, in milliseconds:
	// 2^31-1 (about 24.8 days), the largest TTL whose 2×TTL x-expires still
	// fits MaxTTLMs. Longer delays are refused, never shortened.
	MaxHoldMs = 2147483647
	// MaxNameBytes is the AMQP short-string limit for a queue name.
	MaxNameBytes = 255
	// DeadSuffix turns a work queue name into its dead-letter queue's name.
	DeadSuffix = ".dead"
	// HoldInfix sits between a work queue name and a hold queue's TTL:
	// <queue>.deferred.<ttl_ms>. The Rust crate calls it the deferred suffix.
	HoldInfix = ".deferred"
	// DefaultGranularity is the step delays are rounded up to when the caller
	// sets none.
	DefaultGranularity = time.Second
)

// Header names on the wire. Their value types are the backend's business
// (RabbitMQ: LongUInt for counts, LongString for text).
const (
	// HeaderAttempt mirrors Envelope.Attempt on every publish.
	HeaderAttempt = "x-attempt"
	// HeaderDeferrals mirrors Envelope.Deferrals on every publish.
	HeaderDeferrals = "x-deferrals"
	// HeaderDeathReason says why a message was dead-lettered.
	HeaderDeathReason = "x-death-reason"
	// HeaderOriginalQueue names the work queue a dead letter came from.
	HeaderOriginalQueue = "x-original-queue"
	// HeaderAttempts is the attempt a dead letter had reached.
	HeaderAttempts = "x-attempts"
	// HeaderDue carries Message.DueAt in milliseconds since the Unix epoch,
	// as a decimal string.
	HeaderDue = "x-queuey-due-ms"
)

// maxHold is MaxHoldMs as a Duration, the Max reported by a DelayError.
const maxHold = time.Duration(MaxHoldMs) * time.Millisecond

// longestHoldSuffix is the longest suffix HoldQueueName can append to a queue
// name; the name-length guard in ValidateQueueName is checked against it.
var longestHoldSuffix = HoldInfix + "." + strconv.Itoa(MaxHoldMs)

// Sentinel errors of the topology functions. The typed errors DelayError and
// NameError wrap them; check with errors.Is.
var (
	// ErrDelayTooLong: the rounded delay exceeds MaxHoldMs. The wait is
	// refused rather than released early.
	ErrDelayTooLong = errors.New("queuey: delay is longer than a hold queue can wait")
	// ErrInvalidDelay: the delay is negative.
	ErrInvalidDelay = errors.New("queuey: invalid delay")
	// ErrInvalidName: a queue name the broker would refuse, or one that
	// leaves no room for its hold queues' names.
	ErrInvalidName = errors.New("queuey: invalid queue name")
)

// DelayError is a delay HoldTTL refused. Err is ErrDelayTooLong or
// ErrInvalidDelay.
type DelayError struct {
	// Delay is the delay that was asked for, before rounding.
	Delay time.Duration
	// Rounded is Delay rounded up to the granularity: the hold it would
	// take (0 for a negative delay).
	Rounded time.Duration
	// Max is the longest wait a hold queue takes (MaxHoldMs).
	Max time.Duration
	// Err is the sentinel: ErrDelayTooLong or ErrInvalidDelay.
	Err error
}

// Error says what was refused and why; the too-long text is the Rust
// crate's, with the rounding when it is what crosses the limit.
func (e *DelayError) Error() string {
	if errors.Is(e.Err, ErrInvalidDelay) {
		return fmt.Sprintf("delay of %v is negative", e.Delay)
	}
	if e.Delay <= e.Max {
		return fmt.Sprintf("delay of %v rounds up to %v, longer than a hold queue can wait (%v); it was refused rather than released early",
			e.Delay, e.Rounded, e.Max)
	}
	return fmt.Sprintf("delay of %v is longer than a hold queue can wait (%v); it was refused rather than released early", e.Delay, e.Max)
}

// Unwrap returns the sentinel, for errors.Is.
func (e *DelayError) Unwrap() error { return e.Err }

// NameError is a queue name ValidateQueueName refused. It wraps
// ErrInvalidName.
type NameError struct {
	// Name is the refused queue name.
	Name string
	// Reason completes the sentence `queue "<Name>" ...`, for instance
	// "is invalid: the name is empty".
	Reason string
}

// Error reads `queue "<name>" <reason>`.
func (e *NameError) Error() string {
	return fmt.Sprintf("queue %q %s", e.Name, e.Reason)
}

// Unwrap returns ErrInvalidName.
func (e *NameError) Unwrap() error { return ErrInvalidName }

// QueueName is the broker name of a work queue: "prefix.name", or just name
// when prefix is empty.
func QueueName(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// DeadQueueArgs are the declare arguments of a dead-letter queue: none
// for a classic one, x-queue-type: quorum for a quorum one.
func DeadQueueArgs(t QueueType) map[string]any {
	if t == Quorum {
		return map[string]any{"x-queue-type": "quorum"}
	}
	return nil
}

// DeadQueueName is the name of queue's dead-letter queue: queue + ".dead".
func DeadQueueName(queue string) string {
	return queue + DeadSuffix
}

// SuspectQueueName is the name of the queue where a worker with
// PoisonAfter keeps the jobs that came back from a crash, to run each
// alone: queue + ".suspects".
func SuspectQueueName(queue string) string {
	return queue + ".suspects"
}

// HoldQueueName is the name of the hold queue that releases into queue after
// ttl: queue + ".deferred." + ttl in whole milliseconds. ttl normally comes
// from HoldTTL and is already whole milliseconds; a fraction rounds up, as in
// HoldQueueArgs, so the name and the arguments always agree.
func HoldQueueName(queue string, ttl time.Duration) string {
	return queue + HoldInfix + "." + strconv.FormatInt(ceilMs(ttl), 10)
}

// ParseHoldQueueName is the inverse of HoldQueueName, for inspection: it
// reports the work queue and TTL of a hold queue name. ok is false for any
// name HoldQueueName does not produce from a TTL in [1ms, MaxHoldMs ms]
// (no infix, an empty queue, a TTL with a sign, leading zeros or out of
// range).
func ParseHoldQueueName(name string) (queue string, ttl time.Duration, ok bool) {
	i := strings.LastIndex(name, HoldInfix+".")
	if i <= 0 {
		return "", 0, false
	}
	digits := name[i+len(HoldInfix)+1:]
	if digits == "" || digits[0] == '0' || len(digits) > len(strconv.Itoa(MaxHoldMs)) {
		return "", 0, false
	}
	for _, c := range []byte(digits) {
		if c < '0' || c > '9' {
			return "", 0, false
		}
	}
	ms, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || ms > MaxHoldMs {
		return "", 0, false
	}
	return name[:i], time.Duration(ms) * time.Millisecond, true
}

// HoldTTL rounds a delay up to the TTL of the hold queue that waits it out,
// exactly as the Rust crate does, so both pick the same hold queue:
//
//	step = ceil_ms(granularity), clamped to [1, MaxHoldMs]
//	ttl  = max(step, ceil(ceil_ms(delay) / step) * step)
//
// where ceil_ms rounds up to whole milliseconds. A zero delay waits one step;
// a zero or negative granularity means a step of 1 ms. The result is whole
// milliseconds. A ttl over MaxHoldMs is refused with a *DelayError wrapping
// ErrDelayTooLong, never shortened; a negative delay gives a *DelayError
// wrapping ErrInvalidDelay.
func HoldTTL(delay, granularity time.Duration) (time.Duration, error) {
	if delay < 0 {
		return 0, &DelayError{Delay: delay, Max: maxHold, Err: ErrInvalidDelay}
	}
	step := min(max(ceilMs(granularity), 1), MaxHoldMs)
	ms := ceilMs(delay) // at most ~9.2e12, so steps*step below cannot overflow
	steps := ms / step
	if ms%step != 0 {
		steps++
	}
	ttl := max(step, steps*step)
	if ttl > MaxHoldMs {
		return 0, &DelayError{Delay: delay, Rounded: time.Duration(min(ttl, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond,
			Max: maxHold, Err: ErrDelayTooLong}
	}
	return time.Duration(ttl) * time.Millisecond, nil
}

// LongestHold is the longest delay HoldTTL takes at granularity: MaxHoldMs
// rounded down to a whole step (2,147,483 s at a 1 s step), since a longer
// delay rounds up past MaxHoldMs.
func LongestHold(granularity time.Duration) time.Duration {
	step := min(max(ceilMs(granularity), 1), MaxHoldMs)
	return time.Duration(MaxHoldMs/step*step) * time.Millisecond
}

// HoldQueueArgs are the declare arguments of HoldQueueName(queue, ttl). They
// depend only on that name, so every process, Go or Rust, declares a hold
// queue identically and none is refused with PRECONDITION_FAILED:
//
//	x-message-ttl             ttl in ms (int64)
//	x-dead-letter-exchange    "" (the default exchange)
//	x-dead-letter-routing-key queue
//	x-expires                 2×ttl in ms, at most MaxTTLMs (int64)
//
// x-expires lets an idle hold queue delete itself; since it counts declares
// and not publishes, whoever holds (a worker's hold actor, a producer)
// declares the hold queue again (Backend.DeclareHold) before publishing
// into it once its last declare is ttl/2 old. Numbers are int64, the AMQP
// long-long-int the Rust crate sends. The map is new on every call; the
// caller may modify it.
func HoldQueueArgs(queue string, ttl time.Duration) map[string]any {
	ms := ceilMs(ttl)
	return map[string]any{
		"x-message-ttl":             ms,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": queue,
		"x-expires":                 min(2*ms, MaxTTLMs),
	}
}

// QueueArgs are the declare arguments of a work queue:
//
//	x-max-priority  spec.MaxPriority, iff it is above 0
//	x-message-ttl   spec.MessageTTL in ms, rounded up and clamped to
//	                [1, MaxTTLMs], iff it is positive
//	x-single-active-consumer  true, iff spec.SingleActiveConsumer
//	x-queue-type    "quorum", iff spec.Type is Quorum; then no
//	                x-max-priority (the lane, LaneQueueName, is the top
//	                priority)
//
// Every number is an int64. RabbitMQ compares integer arguments by value
// whatever their AMQP integer type, so this is equivalent to the Rust crate's
// x-max-priority (a short-short-uint); a backend wanting the very same field
// types converts x-max-priority to uint8. The map is never nil.
func QueueArgs(spec QueueSpec) map[string]any {
	args := make(map[string]any, 2)
	if spec.Type == Quorum {
		args["x-queue-type"] = "quorum"
	} else if spec.MaxPriority > 0 {
		args["x-max-priority"] = int64(spec.MaxPriority)
	}
	if spec.MessageTTL > 0 {
		args["x-message-ttl"] = min(max(ceilMs(spec.MessageTTL), 1), MaxTTLMs)
	}
	if spec.SingleActiveConsumer {
		args["x-single-active-consumer"] = true
	}
	return args
}

// ValidateQueueName reports, as a *NameError wrapping ErrInvalidName, a work
// queue name the broker would refuse or that could not carry its hold
// queues: an empty name, invalid UTF-8, more than MaxNameBytes bytes, the
// "amq." prefix RabbitMQ reserves, or a name whose longest hold queue name
// (queue + ".deferred.2147483647") is over MaxNameBytes. With the default
// infix the longest valid name is 235 bytes. Backends call it before they
// declare anything, so no half-made topology is left behind.
func ValidateQueueName(queue string) error {
	switch {
	case queue == "":
		return &NameError{Name: queue, Reason: "is invalid: the name is empty"}
	case !utf8.ValidString(queue):
		return &NameError{Name: queue, Reason: "is invalid: the name is not valid UTF-8"}
	case len(queue) > MaxNameBytes:
		return &NameError{Name: queue, Reason: fmt.Sprintf("is invalid: the name is %d bytes, over the %d-byte AMQP limit", len(queue), MaxNameBytes)}
	case strings.HasPrefix(queue, "amq."):
		return &NameError{Name: queue, Reason: `is invalid: the "amq." prefix is reserved by RabbitMQ`}
	}
	if hold := queue + longestHoldSuffix; len(hold) > MaxNameBytes {
		return &NameError{Name: queue, Reason: fmt.Sprintf("leaves no room for its hold queues: %q is %d bytes, over the %d-byte AMQP limit", hold, len(hold), MaxNameBytes)}
	}
	return nil
}

// ceilMs rounds d up to whole milliseconds. Negative durations round toward
// zero; callers handle them before.
func ceilMs(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}
