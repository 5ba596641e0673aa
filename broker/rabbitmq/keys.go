package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/queuey-go/queuey/broker"
)

// A key is held by a message in its lock queue (broker.KeyLockName): a
// classic queue of one message at most that nacks a second publish
// (x-overflow reject-publish), whose message expires with the key's ttl.
// RabbitMQ counts only ready messages against x-max-length: a lock taken
// by basic.get, unacked, lets another publish in. So the lock queue is
// read only by the job that holds it, to let it go, and who holds a key is
// said by a second queue beside it (broker.KeyHolderName), of one message
// that a newer publish replaces (x-overflow drop-head), which anyone may
// read and give back (ARCHITECTURE.md §2, "Unique jobs").

var _ broker.KeyLocker = (*Backend)(nil)

// takeTries bounds how often TakeKey starts over: a lock queue that went
// away or was let go while it was taken, a holder not yet written.
const takeTries = 5

// TakeKey takes the key named name for id, for ttl: it declares the lock
// queue and publishes id into it; a nack means another holds it, and the
// holder queue says who.
func (b *Backend) TakeKey(ctx context.Context, name, id string, ttl time.Duration) (string, error) {
	if err := broker.CheckKeyTTL(ttl); err != nil {
		return "", err
	}
	for range takeTries {
		err := b.declareKey(ctx, name, ttl)
		if errors.Is(err, broker.ErrPreconditionFailed) {
			// Its lock queue was made for another ttl: held, or left empty.
			if holder, herr := b.KeyHolder(ctx, name); herr != nil || holder != "" {
				return holder, herr
			}
			err = b.deleteIfEmpty(ctx, name, broker.KeyHolderName(name))
		}
		if err != nil {
			return "", err
		}
		err = b.publishOn(ctx, viaPool, toQueue(name), keyMessage(id))
		switch {
		case err == nil:
			return id, b.writeHolder(ctx, name, id)
		case errors.Is(err, ErrNacked):
			if holder, herr := b.KeyHolder(ctx, name); herr != nil || holder != "" {
				return holder, herr
			}
		case !errors.Is(err, broker.ErrUnroutable):
			return "", fmt.Errorf("take key %q: %w", name, err)
		}
	}
	return "", nil // held, by a job that has not yet said its id
}

// declareKey declares the lock queue name and its holder queue for ttl.
func (b *Backend) declareKey(ctx context.Context, name string, ttl time.Duration) error {
	return b.onSession(ctx, func(s *session) error {
		if err := s.declare(ctx, name, true, keyArgs(broker.KeyLockArgs(ttl))); err != nil {
			return err
		}
		return s.declare(ctx, broker.KeyHolderName(name), true, keyArgs(broker.KeyHolderArgs(ttl)))
	})
}

// writeHolder says, in the holder queue, that id holds name's lock. A
// holder that cannot be written lets the lock go, so that the caller's
// error leaves nothing held.
func (b *Backend) writeHolder(ctx context.Context, name, id string) error {
	err := b.publish(ctx, toQueue(broker.KeyHolderName(name)), keyMessage(id))
	if err == nil {
		return nil
	}
	undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = b.onSession(undo, func(s *session) error { return s.dropLock(undo, name, id) })
	return fmt.Errorf("take key %q: writing its holder: %w", name, err)
}

// ReleaseKey lets the key go if the holder queue says id holds it: then
// the lock is read and acked if it is id's (given back if, its ttl over,
// another job took it meanwhile), and the holder queue emptied.
func (b *Backend) ReleaseKey(ctx context.Context, name, id string) error {
	return b.onSession(ctx, func(s *session) error {
		return s.onDeclChRaw(ctx, "release key", name, func(ch *amqp.Channel) error {
			m, ok, err := ch.Get(broker.KeyHolderName(name), false)
			if err != nil || !ok {
				return missingIsNone(err)
			}
			if string(m.Body) != id {
				return m.Nack(false, true)
			}
			if err := dropLockOn(ch, name, id); err != nil {
				return missingIsNone(err)
			}
			return m.Ack(false)
		})
	})
}

// dropLock acks name's lock if id holds it (dropLockOn), on the
// declaration channel.
func (s *session) dropLock(ctx context.Context, name, id string) error {
	return s.onDeclChRaw(ctx, "release key", name, func(ch *amqp.Channel) error {
		return missingIsNone(dropLockOn(ch, name, id))
	})
}

// dropLockOn reads name's lock and acks it if it is id's, or gives it
// back. Only a job whose lock it is reads it (see above).
func dropLockOn(ch *amqp.Channel, name, id string) error {
	m, ok, err := ch.Get(name, false)
	if err != nil || !ok {
		return err
	}
	if string(m.Body) != id {
		return m.Nack(false, true)
	}
	return m.Ack(false)
}

// KeyHolder reads the holder queue of name's lock and gives its message
// back: a read that a newer holder's publish, meanwhile, replaces.
func (b *Backend) KeyHolder(ctx context.Context, name string) (string, error) {
	var holder string
	err := b.onSession(ctx, func(s *session) error {
		return s.onDeclChRaw(ctx, "key holder", name, func(ch *amqp.Channel) error {
			m, ok, err := ch.Get(broker.KeyHolderName(name), false)
			if err != nil || !ok {
				return missingIsNone(err)
			}
			holder = string(m.Body)
			return m.Nack(false, true)
		})
	})
	return holder, err
}

// deleteIfEmpty deletes the queues names that hold no message.
func (b *Backend) deleteIfEmpty(ctx context.Context, names ...string) error {
	return b.onSession(ctx, func(s *session) error {
		for _, name := range names {
			err := s.onDeclChRaw(ctx, "delete", name, func(ch *amqp.Channel) error {
				_, err := ch.QueueDelete(name, false, true, false)
				return err
			})
			var amqpErr *amqp.Error
			if errors.As(err, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed {
				return nil // not empty: held after all, which the next try finds
			}
			if err := missingIsNone(err); err != nil {
				return err
			}
		}
		return nil
	})
}

// onSession runs call on the live publishing session, on the next one
// when the connection was lost meanwhile, until ctx ends.
func (b *Backend) onSession(ctx context.Context, call func(*session) error) error {
	for {
		s, err := b.session(ctx)
		if err != nil {
			return err
		}
		err = call(s)
		if errors.Is(err, ErrConnectionLost) && ctx.Err() == nil {
			continue
		}
		return err
	}
}

// missingIsNone takes a queue that does not exist (it expired) as one
// that holds nothing; any other error is reported as lostOr does.
func missingIsNone(err error) error {
	var amqpErr *amqp.Error
	if err == nil || errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return nil
	}
	return lostOr(err)
}

// keyMessage is the persistent message that says id, in a lock or holder
// queue.
func keyMessage(id string) amqp.Publishing {
	return amqp.Publishing{MessageId: broker.NewJobID(), DeliveryMode: amqp.Persistent, Body: []byte(id)}
}

// keyArgs are args for a classic queue, whatever the virtual host's
// default queue type: a quorum queue lets a second publish in.
func keyArgs(args map[string]any) amqp.Table {
	t := amqp.Table(args)
	t["x-queue-type"] = "classic"
	return t
}
