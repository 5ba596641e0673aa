package memory

import (
	"context"
	"time"

	"github.com/queuey-go/queuey/broker"
)

var _ broker.KeyLocker = (*Backend)(nil)

// heldKey is a key's lock: the id that holds it, until when (on the
// backend's clock).
type heldKey struct {
	id    string
	until time.Time
}

// TakeKey takes the key named name for id, for ttl, unless another id
// holds it and its ttl has not ended on the backend's clock.
func (b *Backend) TakeKey(_ context.Context, name, id string, ttl time.Duration) (string, error) {
	if err := broker.CheckKeyTTL(ttl); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return "", broker.ErrClosed
	}
	now := b.clock.Now()
	if k, ok := b.liveKeyLocked(name, now); ok {
		return k.id, nil
	}
	if b.keys == nil {
		b.keys = map[string]heldKey{}
	}
	b.keys[name] = heldKey{id: id, until: now.Add(ttl)}
	return id, nil
}

// ReleaseKey lets the key named name go if id holds it.
func (b *Backend) ReleaseKey(_ context.Context, name, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return broker.ErrClosed
	}
	if k, ok := b.liveKeyLocked(name, b.clock.Now()); ok && k.id == id {
		delete(b.keys, name)
	}
	return nil
}

// KeyHolder is the id that holds the key named name, or "".
func (b *Backend) KeyHolder(_ context.Context, name string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return "", broker.ErrClosed
	}
	k, _ := b.liveKeyLocked(name, b.clock.Now())
	return k.id, nil
}

// liveKeyLocked is the key named name if it is held at now. A key whose
// ttl has ended is forgotten, as its lock queue expires on RabbitMQ;
// keys nobody asks about again are swept by sweepKeysLocked.
func (b *Backend) liveKeyLocked(name string, now time.Time) (heldKey, bool) {
	k, ok := b.keys[name]
	if ok && !now.Before(k.until) {
		delete(b.keys, name)
		return heldKey{}, false
	}
	b.sweepKeysLocked(now)
	return k, ok
}

// sweepKeysLocked forgets expired keys once the map has doubled since the
// last sweep, so a process that takes many distinct keys holds only the
// live ones, at a cost shared out over the takes.
func (b *Backend) sweepKeysLocked(now time.Time) {
	if len(b.keys) < 2*b.keysSwept+64 {
		return
	}
	for name, k := range b.keys {
		if !now.Before(k.until) {
			delete(b.keys, name)
		}
	}
	b.keysSwept = len(b.keys)
}
