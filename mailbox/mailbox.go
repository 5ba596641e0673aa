package mailbox

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is returned by Put and Get once the mailbox is closed (by Get
// only after everything buffered has been taken).
var ErrClosed = errors.New("mailbox: closed")

// ErrFull is returned by TryPut when the mailbox has no room.
var ErrFull = errors.New("mailbox: full")

// Mailbox is a bounded FIFO of T. Create one with New; the zero value is
// not usable.
type Mailbox[T any] struct {
	lane chan T

	// done is closed by Close. The lane itself is never closed, because a
	// producer might be sending on it at that very moment.
	done chan struct{}
	// sealed is closed once no producer can add anything any more, so that
	// a consumer who saw done can trust an empty lane to stay empty.
	sealed chan struct{}
	// inFlight is held for reading by every producer from its closed check
	// to the end of its send; Close takes it for writing once to wait them out.
	inFlight  sync.RWMutex
	closeOnce sync.Once
}

// New returns an empty mailbox holding up to capacity messages. A capacity
// below 1 is treated as 1: an unbuffered mailbox would make every Put wait
// for a consumer, which is not what a mailbox is for.
func New[T any](capacity int) *Mailbox[T] {
	return &Mailbox[T]{
		lane:   make(chan T, max(capacity, 1)),
		done:   make(chan struct{}),
		sealed: make(chan struct{}),
	}
}

// Put appends v, blocking while the mailbox is full. It returns ErrClosed
// if the mailbox is closed (checked first), or ctx.Err() if ctx ends before
// there is room.
func (m *Mailbox[T]) Put(ctx context.Context, v T) error {
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
	case m.lane <- v:
		return nil
	default:
	}
	select {
	case m.lane <- v:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-m.done:
		return ErrClosed
	}
}

// Get removes and returns the oldest message. It blocks until a message
// arrives or ctx ends (ctx.Err()). After Close it keeps returning what is
// buffered, then ErrClosed.
func (m *Mailbox[T]) Get(ctx context.Context) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	select {
	case v := <-m.lane:
		return v, nil
	default:
	}
	select {
	case v := <-m.lane:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-m.done:
		<-m.sealed
		select {
		case v := <-m.lane:
			return v, nil
		default:
			return zero, ErrClosed
		}
	}
}

// TryPut appends v if there is room, without waiting: it returns ErrFull
// when there is none, and ErrClosed once the mailbox is closed. An actor
// that keeps its own backlog in a mailbox uses it, since it cannot wait
// for room that only it can make.
func (m *Mailbox[T]) TryPut(v T) error {
	m.inFlight.RLock()
	defer m.inFlight.RUnlock()
	if m.isClosed() {
		return ErrClosed
	}
	select {
	case m.lane <- v:
		return nil
	default:
		return ErrFull
	}
}

// TryGet removes and returns the oldest message if there is one, without
// waiting (ok false when the mailbox is empty).
func (m *Mailbox[T]) TryGet() (v T, ok bool) {
	select {
	case v = <-m.lane:
		return v, true
	default:
		return v, false
	}
}

// Receive is the mailbox's receiving end, for an actor that waits in one
// select for its mailbox and other events (a timer, a broker's channel):
// a receive from it removes the oldest message. It is never closed, not
// even by Close; an actor that selects on it watches its own stop.
func (m *Mailbox[T]) Receive() <-chan T { return m.lane }

// Cap returns the number of messages the mailbox holds at most.
func (m *Mailbox[T]) Cap() int { return cap(m.lane) }

// Len returns the number of messages buffered.
func (m *Mailbox[T]) Len() int { return len(m.lane) }

// Close stops the mailbox from accepting messages and wakes every blocked
// Put and Get. Buffered messages stay available to Get. Close is
// idempotent; when it returns, no producer can add anything.
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

func (m *Mailbox[T]) isClosed() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}
