package broker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// QueueType is the kind of broker queue a QueueSpec declares
// (ARCHITECTURE.md §1, "Topologies").
type QueueType uint8

const (
	// Classic queues live on one node, with native priorities and one hold
	// queue per distinct delay: the topology of the Rust crate, wire for
	// wire. The default.
	Classic QueueType = iota
	// Quorum queues are replicated (Raft; RabbitMQ 3.10 and later) and
	// survive the loss of a minority of a cluster's nodes. Before RabbitMQ
	// 4.0 they have no priorities, so the top priority is a second queue,
	// the lane (LaneQueueName), which consumers take from first; and waits
	// go through a fixed set of delay levels (DelayLevels) in whole seconds
	// instead of a hold queue per delay.
	Quorum
)

// String is "classic" or "quorum".
func (t QueueType) String() string {
	switch t {
	case Classic:
		return "classic"
	case Quorum:
		return "quorum"
	}
	return "QueueType(" + strconv.Itoa(int(t)) + ")"
}

const (
	// LaneSuffix turns a quorum work queue's name into its lane's: the
	// queue its top-priority messages (deferrals coming back, replays)
	// land on, which its consumers take from before the backlog.
	LaneSuffix = ".first"
	// DelayLevels is the number of delay levels of the quorum topology:
	// level n waits 2^n seconds, so together they give every whole number
	// of seconds up to 2^22-1 (48 days), past MaxHoldMs.
	DelayLevels = 22
	// DelayPrefix names the delay levels' exchanges and queues
	// ("queuey.wait.00" to "queuey.wait.21"), the exchange that delivers
	// what has waited ("queuey.wait.deliver") and the orphans' exchange and
	// queue ("queuey.wait.orphans"). They are shared by every quorum queue
	// of a virtual host.
	DelayPrefix = "queuey.wait."
	// DelayDeliverExchange routes a message that has waited out every
	// level to its work queue or lane, by the routing key's last words.
	// What it cannot route goes to its alternate exchange, DelayOrphans.
	DelayDeliverExchange = DelayPrefix + "deliver"
	// DelayOrphans names the fanout exchange and the quorum queue that
	// keep what waited for a queue that is gone (deleted while its jobs
	// waited). A level's dead-letter worker holds what it cannot route and
	// tries it again, and 32 such messages would stall the level for every
	// queue; here they go on, and an operator can read them.
	DelayOrphans = DelayPrefix + "orphans"
)

// ErrNotReplicable: a queue the quorum topology cannot declare (a
// transient one: quorum queues are always durable).
var ErrNotReplicable = errors.New("queuey: a quorum queue cannot be declared so")

// delayKeyBytes is the length of a delay routing key's bits: DelayLevels
// one-character words and their dots.
const delayKeyBytes = 2 * DelayLevels

// LaneQueueName is the name of a quorum work queue's lane: queue + ".first".
func LaneQueueName(queue string) string { return queue + LaneSuffix }

// DelayLevelName is the name of level n's exchange and queue:
// "queuey.wait.NN".
func DelayLevelName(n int) string { return fmt.Sprintf("%s%02d", DelayPrefix, n) }

// delayNext is where level n's queue dead-letters what has waited: the
// next lower level's exchange, or the delivering exchange after level 0.
func delayNext(n int) string {
	if n == 0 {
		return DelayDeliverExchange
	}
	return DelayLevelName(n - 1)
}

// DelayLevelArgs are the declare arguments of level n's queue: a quorum
// queue whose messages wait 2^n seconds and are then dead-lettered, at
// least once, to the next lower level:
//
//	x-queue-type            quorum
//	x-message-ttl           2^n × 1000 ms (int64)
//	x-dead-letter-exchange  DelayLevelName(n-1), or DelayDeliverExchange
//	x-dead-letter-strategy  at-least-once
//	x-overflow              reject-publish (what at-least-once requires)
func DelayLevelArgs(n int) map[string]any {
	return map[string]any{
		"x-queue-type":           "quorum",
		"x-message-ttl":          int64(1000) << n,
		"x-dead-letter-exchange": delayNext(n),
		"x-dead-letter-strategy": "at-least-once",
		"x-overflow":             "reject-publish",
	}
}

// DelayDeliverArgs are the declare arguments of DelayDeliverExchange: its
// alternate exchange, DelayOrphans.
func DelayDeliverArgs() map[string]any {
	return map[string]any{"alternate-exchange": DelayOrphans}
}

// DelayLevelBindings are level n's exchange's two bindings: the pattern
// of routing keys whose bit n is 1, bound to its queue (wait there), and
// the pattern of those whose bit n is 0, bound to the next lower level's
// exchange (DelayLevelName(n-1), or DelayDeliverExchange: pass on).
func DelayLevelBindings(n int) (wait, pass string) {
	skip := strings.Repeat("*.", DelayLevels-1-n)
	return skip + "1.#", skip + "0.#"
}

// DelayDeliverBinding is the pattern that binds queue (a work queue or a
// lane) to DelayDeliverExchange: every bit, then queue's own words, so
// that no other queue's name can match it.
func DelayDeliverBinding(queue string) string {
	return strings.Repeat("*.", DelayLevels) + queue
}

// DelayRoutingKey is the routing key of a message that waits seconds and
// then lands on queue: seconds' DelayLevels bits, highest first, one word
// each, then queue. It is published to the highest level's exchange.
func DelayRoutingKey(seconds int64, queue string) string {
	var b strings.Builder
	b.Grow(delayKeyBytes + len(queue))
	for n := DelayLevels - 1; n >= 0; n-- {
		b.WriteByte('0' + byte(seconds>>n&1))
		b.WriteByte('.')
	}
	b.WriteString(queue)
	return b.String()
}

// LevelsTTL is the wait the delay levels give for a hold of ttl: ttl
// rounded up to whole seconds, never shorter.
func LevelsTTL(ttl time.Duration) time.Duration {
	return ((ttl + time.Second - 1) / time.Second) * time.Second
}

// ValidateSpec reports what of spec the broker would refuse, before
// anything is declared: its name (ValidateQueueName) and, for a quorum
// queue, a transient one (ErrNotReplicable), or a name that leaves no
// room for its lane's delay routing key in AMQP's 255 bytes, or that
// holds a '*' or '#' word, which a topic binding would read as a
// wildcard (a *NameError wrapping ErrInvalidName).
func ValidateSpec(spec QueueSpec) error {
	if err := ValidateQueueName(spec.Name); err != nil || spec.Type != Quorum {
		return err
	}
	if !spec.Durable {
		return fmt.Errorf("%w: queue %q is transient, and quorum queues are always durable", ErrNotReplicable, spec.Name)
	}
	if key := delayKeyBytes + len(LaneQueueName(spec.Name)); key > MaxNameBytes {
		return &NameError{Name: spec.Name, Reason: fmt.Sprintf("leaves no room for its delay routing key: %d bytes, over the %d-byte AMQP limit (a quorum queue's name is at most %d bytes)",
			key, MaxNameBytes, MaxNameBytes-delayKeyBytes-len(LaneSuffix))}
	}
	for _, word := range strings.Split(spec.Name, ".") {
		if word == "*" || word == "#" {
			return &NameError{Name: spec.Name, Reason: fmt.Sprintf("is invalid for a quorum queue: the word %q would be a wildcard in its delay binding", word)}
		}
	}
	return nil
}
