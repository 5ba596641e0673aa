package mailbox

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is returned by Put, PutSystem and Get once the mailbox is closed
// (by Get only after everything buffered has been taken).
var ErrClosed = errors.New("mailbox: closed")

// SystemCapacity bounds the system lane. Control messages are rare and small,
// so a short lane is enough, and bounding it keeps every queue finite.
const SystemCapacity = 8

// Mailbox is a bounded FIFO of T with a priority lane for system messages.
// Create one with New; the zero value is not usable.
type Mailbox[T any] struct {
	ordinary chan T
	system   chan T

	// done is closed by Close. The lanes themselves are never closed, because
	// a producer might be sending on them at that very moment.
	done chan struct{}
	// sealed is closed once no producer can add anything any more, so that
	// a consumer who saw done can trust an empty lane to stay empty.
	sealed chan struct{}
	// inFlight is held for reading by every producer from its closed check
	// to the end of its send; Close takes it for writing once to wait them out.
	inFlight  sync.RWMutex
	closeOnce sync.Once
}

// New returns an empty mailbox holding up to capacity ordinary messages.
// A capacity below 1 is treated as 1: an unbuffered mailbox would make every
// Put wait for a consumer, which is not what a mailbox is for.
func New[T any](capacity int) *Mailbox[T] {
	return &Mailbox[T]{
		ordinary: make(chan T, max(capacity, 1)),
		system:   make(chan T, SystemCapacity),
		done:     make(chan struct{}),
		sealed:   make(chan struct{}),
	}
}

// Put appends v to the ordinary lane, blocking while the mailbox is full.
// It returns ErrClosed if the mailbox is closed (checked first), or ctx.Err()
// if ctx ends before there is room.
func (m *Mailbox[T]) Put(ctx context.Context, v T) error {
	return m.put(ctx, m.ordinary, v)
}

// PutSystem appends v to the system lane, which Get serves before the
// ordinary one. The lane holds SystemCapacity messages; PutSystem blocks
// while it is full, with the same errors as Put.
func (m *Mailbox[T]) PutSystem(ctx context.Context, v T) error {
	return m.put(ctx, m.system, v)
}

func (m *Mailbox[T]) put(ctx context.Context, lane chan T, v T) error {
	m.inFlight.RLock()
	defer m.inFlight.RUnlock()
	if m.isClosed() {
		return ErrClosed
	}
	// A cancelled ctx never enqueues, even when there is room, so callers
	// can rely on "error means not delivered".
	if err := ctx.Err(); err != nil {
		return err
	}
	// With room in the lane, a send that waits on nothing else locks
	// only the lane, not ctx's and the mailbox's channels as well.
	select {
	case lane <- v:
		return nil
	default:
	}
	select {
	case lane <- v:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-m.done:
		return ErrClosed
	}
}

// TryPut appends v to the ordinary lane if there is room, without blocking.
// It reports whether v was added; it is false when full or closed.
func (m *Mailbox[T]) TryPut(v T) bool {
	m.inFlight.RLock()
	defer m.inFlight.RUnlock()
	if m.isClosed() {
		return false
	}
	select {
	case m.ordinary <- v:
		return true
	default:
		return false
	}
}

// Get removes and returns the oldest message, taking the system lane first.
// It blocks until a message arrives or ctx ends (ctx.Err()). After Close it
// keeps returning what is buffered, then ErrClosed.
func (m *Mailbox[T]) Get(ctx context.Context) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if v, ok := m.take(); ok {
		return v, nil
	}
	select {
	case v := <-m.system:
		return v, nil
	case v := <-m.ordinary:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-m.done:
		<-m.sealed
		if v, ok := m.take(); ok {
			return v, nil
		}
		return zero, ErrClosed
	}
}

// take removes one buffered message without blocking, system lane first.
func (m *Mailbox[T]) take() (T, bool) {
	select {
	case v := <-m.system:
		return v, true
	default:
	}
	select {
	case v := <-m.ordinary:
		return v, true
	default:
		var zero T
		return zero, false
	}
}

// Len returns the number of ordinary messages buffered.
func (m *Mailbox[T]) Len() int { return len(m.ordinary) }

// Cap returns the capacity of the ordinary lane.
func (m *Mailbox[T]) Cap() int { return cap(m.ordinary) }

// Close stops the mailbox from accepting messages and wakes every blocked
// Put, PutSystem and Get. Buffered messages stay available to Get and Drain.
// Close is idempotent; when it returns, no producer can add anything.
func (m *Mailbox[T]) Close() {
	m.closeOnce.Do(func() {
		close(m.done)
		// Wait for producers that passed their closed check before done was
		// closed; they finish promptly because done is now closed.
		m.inFlight.Lock()
		//lint:ignore SA2001 taking the write lock is the wait itself
		m.inFlight.Unlock()
		close(m.sealed)
	})
}

// Drain removes and returns every buffered message, system lane first,
// without blocking. It returns nil when the mailbox is empty.
func (m *Mailbox[T]) Drain() []T {
	if m.isClosed() {
		<-m.sealed
	}
	var out []T
	for {
		v, ok := m.take()
		if !ok {
			return out
		}
		out = append(out, v)
	}
}

func (m *Mailbox[T]) isClosed() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}
