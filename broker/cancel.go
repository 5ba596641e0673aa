package broker

import (
	"context"
	"errors"
	"time"
)

// CancelLedger is a Backend that keeps the ledger of a queue set's
// cancelled jobs (ARCHITECTURE.md §1, "Cancellation"): a log of records,
// appended and never changed, that every follower reads whole, from the
// oldest record kept, then each one appended, in one order for all. The
// records are the root package's, bytes here. The ledger is the broker's:
// it outlives every process that appends to it or follows it. A wrapper
// that embeds a Backend interface hides it.
type CancelLedger interface {
	// AppendCancel appends body to the ledger of the queue set prefix and
	// returns once the broker has it (confirmed). The record is kept for
	// keep at least (at most MaxCancelKeep); a follower that starts after
	// that may not read it.
	AppendCancel(ctx context.Context, prefix string, body []byte, keep time.Duration) error
	// FollowCancels reads the ledger of prefix, from its oldest record
	// kept, then each record appended, until Close, the backend's Close
	// (Err: ErrClosed), a lost connection or a follower that fell too far
	// behind (Err says so). While it follows, it counts in
	// CancelFollowers. ctx bounds the start only.
	FollowCancels(ctx context.Context, prefix string) (Listener, error)
	// CancelFollowers is how many followers the ledger of prefix has now,
	// in every process.
	CancelFollowers(ctx context.Context, prefix string) (int, error)
}

// MaxCancelKeep is the longest a cancellation record is kept: the longest
// hold (a job cannot wait in one longer) and a day.
const MaxCancelKeep = MaxHoldMs*time.Millisecond + 24*time.Hour

// ErrFollowerBehind ends a ledger follower that did not read what was
// appended fast enough to be kept for it; its owner follows again, from
// the start.
var ErrFollowerBehind = errors.New("queuey: the ledger's follower fell behind")

// CancelLedgerName is the ledger of cancellations of the queue set prefix
// on a broker: "<prefix>.cancellations", or "cancellations" without a
// prefix. Like the set's queues, it stays on the broker (a RabbitMQ stream
// does not expire).
func CancelLedgerName(prefix string) string {
	if prefix == "" {
		return "cancellations"
	}
	return prefix + ".cancellations"
}

// CancelFollowersName is the queue, beside the ledger, that counts the
// followers of the queue set prefix on a broker that counts them so:
// "<prefix>.cancellations.followers", or "cancellations.followers"
// without a prefix.
func CancelFollowersName(prefix string) string {
	if prefix == "" {
		return "cancellations.followers"
	}
	return prefix + ".cancellations.followers"
}

// CancelAnswersTopic is the Broadcaster topic on which the followers of
// the ledger of prefix answer each cancellation they have applied.
func CancelAnswersTopic(prefix string) string { return "queuey.cancel." + prefix + ".answers" }
