package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// KeyLocker is a Backend that keeps uniqueness keys for unique jobs
// (ARCHITECTURE.md §1, "Unique jobs"): a key is held by one job id at a
// time, until that id lets it go or its ttl ends. The state is the
// broker's, so it outlives the processes that take and release keys. A
// wrapper that embeds a Backend interface hides it.
type KeyLocker interface {
	// TakeKey takes the key named name (KeyLockName) for id, for ttl (a
	// whole number of milliseconds, at most MaxKeyTTL), and returns the id
	// that holds it after the call: id when it was taken (or id held it
	// already), another job's id when that one holds it, or "" when the
	// key is held by a job whose id could not be read.
	TakeKey(ctx context.Context, name, id string, ttl time.Duration) (holder string, err error)
	// ReleaseKey lets the key named name go if id holds it; a key that
	// another id holds, or that nobody holds, is left as it is.
	ReleaseKey(ctx context.Context, name, id string) error
	// KeyHolder is the id that holds the key named name, or "" when none
	// does.
	KeyHolder(ctx context.Context, name string) (string, error)
}

// MaxKeyTTL is the longest a key can be held: the longest message TTL,
// less the margin its lock queue outlives its message by (KeyLockArgs).
const MaxKeyTTL = MaxHoldMs*time.Millisecond - keyLockMargin

// keyLockMargin is how long a key's lock queue outlives its lock: long
// enough that the queue is still there when its message expires, so the
// two go in that order.
const keyLockMargin = 10 * time.Second

// KeyLockName is the lock queue of key in the queue set of prefix:
// "<prefix>.unique.<32 hex digits of sha256(prefix, key)>" (without a
// prefix, "unique.<hex>"). Hashed, a key of any bytes gives a name of
// fixed length, and two sets' keys never meet.
func KeyLockName(prefix, key string) string {
	h := sha256.New()
	h.Write([]byte(prefix))
	h.Write([]byte{0})
	h.Write([]byte(key))
	name := "unique." + hex.EncodeToString(h.Sum(nil)[:16])
	if prefix != "" {
		name = prefix + "." + name
	}
	return name
}

// KeyHolderName is the queue beside a key's lock queue that says who
// holds the key (on RabbitMQ, whose lock queue cannot be read safely).
func KeyHolderName(lock string) string { return lock + ".holder" }

// CheckKeyTTL refuses a ttl a key cannot be held for: not positive, not
// whole milliseconds, or over MaxKeyTTL.
func CheckKeyTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl%time.Millisecond != 0 || ttl > MaxKeyTTL {
		return fmt.Errorf("%w: key ttl %v is not a whole number of milliseconds in (0, %v]", ErrInvalidDelay, ttl, MaxKeyTTL)
	}
	return nil
}

// KeyLockArgs are the lock queue's arguments for a key held for ttl: one
// message at most, a second publish refused (nacked), the message gone
// when ttl ends, and the queue itself keyLockMargin after its last use.
func KeyLockArgs(ttl time.Duration) map[string]any {
	return map[string]any{
		"x-max-length":  int64(1),
		"x-overflow":    "reject-publish",
		"x-message-ttl": ttl.Milliseconds(),
		"x-expires":     (ttl + keyLockMargin).Milliseconds(),
	}
}

// KeyHolderArgs are the arguments of the queue that says who holds a key
// (KeyHolderName): one message, the newest, which a later publish
// replaces; gone with the lock.
func KeyHolderArgs(ttl time.Duration) map[string]any {
	return map[string]any{
		"x-max-length":  int64(1),
		"x-overflow":    "drop-head",
		"x-message-ttl": ttl.Milliseconds(),
		"x-expires":     (ttl + keyLockMargin).Milliseconds(),
	}
}
