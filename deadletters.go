package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
)

// DeadLetters inspects and replays the dead letters of a queue set's
// queues, on either backend. It holds no goroutine.
type DeadLetters struct {
	backend  broker.Backend
	producer *Producer
	set      *queueSet
	clock    clock.Clock
}

// NewDeadLetters declares set's queues (as NewProducer does: a replay
// publishes into them) and returns their dead-letter tool.
func NewDeadLetters(ctx context.Context, backend broker.Backend, set QueueSet, cfg *ProducerConfig) (*DeadLetters, error) {
	p, err := NewProducer(ctx, backend, set, cfg)
	if err != nil {
		return nil, err
	}
	return &DeadLetters{backend: backend, producer: p, set: p.set, clock: p.clock}, nil
}

// DeadLetter is one message in a queue's dead letters.
type DeadLetter struct {
	// ID and Kind are the job's; both are empty for a body that was not an
	// envelope (Malformed).
	ID, Kind string
	// Reason is why it was dead-lettered; Attempts how often it ran.
	Reason   string
	Attempts int
	// EnqueuedAt is when the job was first enqueued; Age how long ago.
	EnqueuedAt time.Time
	Age        time.Duration
	// CorrelationID is the job's, when it has one.
	CorrelationID string
	// Payload is the job's JSON; Body the whole message body as stored.
	Payload json.RawMessage
	Body    []byte
	// Headers are the message's headers.
	Headers map[string]string
	// Malformed reports a body that is not an envelope: it can be shown,
	// not replayed.
	Malformed bool
}

// ReplayOptions choose what Replay republishes and how.
type ReplayOptions struct {
	// Select picks the dead letters to replay (see ByID, ByKind, All).
	Select func(DeadLetter) bool
	// After, when positive, replays into a hold queue: the jobs come back
	// after that wait, at the queue's top priority (as Producer.Defer).
	After time.Duration
	// Progress, when set, is called after each dead letter is replayed,
	// with how many were replayed so far and how many the dead-letter
	// queue held when the replay began (selected or not).
	Progress func(replayed, total int)
}

// ByID selects the dead letters of the given job ids.
func ByID(ids ...string) func(DeadLetter) bool {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	return func(d DeadLetter) bool { return want[d.ID] }
}

// ByKind selects the dead letters of one job kind.
func ByKind(kind string) func(DeadLetter) bool {
	return func(d DeadLetter) bool { return d.Kind == kind }
}

// All selects every dead letter that can be replayed.
func All() func(DeadLetter) bool { return func(DeadLetter) bool { return true } }

// List returns the dead letters of the queue named name (Queue.Name),
// oldest first, up to 65,535 of them. Reading them takes them off the dead-letter queue for a
// moment; they all go back, in order, before List returns.
func (dl *DeadLetters) List(ctx context.Context, name string) ([]DeadLetter, error) {
	var out []DeadLetter
	err := dl.walk(ctx, name, func(d DeadLetter, _ broker.Delivery) (bool, error) {
		out = append(out, d)
		return false, nil
	})
	return out, err
}

// Show returns one dead letter of the queue named name by job id.
func (dl *DeadLetters) Show(ctx context.Context, name, id string) (DeadLetter, error) {
	all, err := dl.List(ctx, name)
	if err != nil {
		return DeadLetter{}, err
	}
	for _, d := range all {
		if d.ID == id {
			return d, nil
		}
	}
	return DeadLetter{}, fmt.Errorf("%w: no dead letter %q on %q", ErrNotFound, id, name)
}

// ErrNotFound: no dead letter with that id.
var ErrNotFound = errors.New("queuey: not found")

// Replay republishes the selected dead letters of the queue named name to
// their work queue with their attempts reset to 1 (and their deferrals to
// 0), now or after opts.After. A dead letter leaves the dead-letter queue
// only once its republish is confirmed, so a replay cut short loses
// nothing; the others stay where they were. It returns how many were
// replayed.
func (dl *DeadLetters) Replay(ctx context.Context, name string, opts ReplayOptions) (int, error) {
	if opts.Select == nil {
		return 0, fmt.Errorf("%w: replay needs a selection (ByID, ByKind or All)", ErrInvalidJob)
	}
	if opts.After < 0 {
		return 0, fmt.Errorf("%w: replay after %v", ErrInvalidDelay, opts.After)
	}
	q, ok := dl.set.byName[name]
	if !ok {
		return 0, fmt.Errorf("%w: queue %q is not in the queue set", ErrUnknownQueue, name)
	}
	total, err := dl.backend.Depth(ctx, broker.DeadQueueName(q.broker))
	if err != nil {
		return 0, err
	}
	replayed := 0
	err = dl.walk(ctx, name, func(d DeadLetter, del broker.Delivery) (bool, error) {
		if d.Malformed || !opts.Select(d) {
			return false, nil
		}
		env, _ := broker.DecodeEnvelope(d.Body) // it decoded once already
		env.Attempt, env.Deferrals, env.Priority, env.Queue = 1, 0, 0, q.broker
		var err error
		if opts.After > 0 {
			env.Priority = q.maxPriority
			_, err = dl.producer.hold(ctx, env, opts.After, holdDefer, OpDefer)
		} else {
			err = dl.producer.publish(ctx, env, true)
		}
		if err != nil {
			return false, fmt.Errorf("replay %s: %w", d.ID, err)
		}
		if err := del.Ack(ctx); err != nil {
			// Published but still in the dead letters: it may be replayed
			// twice, never lost.
			return false, fmt.Errorf("replayed %s but could not remove it from the dead letters: %w", d.ID, err)
		}
		replayed++
		if opts.Progress != nil {
			opts.Progress(replayed, total)
		}
		return true, nil
	})
	return replayed, err
}

// walk hands every dead letter of the queue named name to f, with its
// delivery; f says whether it settled the delivery. Those it did not go
// back to the dead-letter queue, in order, when walk returns.
func (dl *DeadLetters) walk(ctx context.Context, name string, f func(DeadLetter, broker.Delivery) (bool, error)) error {
	q, ok := dl.set.byName[name]
	if !ok {
		return fmt.Errorf("%w: queue %q is not in the queue set", ErrUnknownQueue, name)
	}
	dead := broker.DeadQueueName(q.broker)
	n, err := dl.backend.Depth(ctx, dead)
	if err != nil || n == 0 {
		return err
	}
	c, err := dl.backend.Consume(ctx, dead, min(n, 65535))
	if err != nil {
		return err
	}
	defer c.Cancel() // what was not settled goes back, in order
	now := dl.clock.Now()
	for range min(n, 65535) {
		// Another reader may have taken some: give up waiting after a
		// quiet spell rather than at ctx's end.
		idle := dl.clock.Timer(walkIdle)
		select {
		case del, ok := <-c.Deliveries():
			idle.Stop()
			if !ok {
				return fmt.Errorf("reading the dead letters of %q: %w", name, c.Err())
			}
			if _, err := f(readDeadLetter(del.Message(), now), del); err != nil {
				return err
			}
		case <-idle.C:
			return nil
		case <-ctx.Done():
			idle.Stop()
			return ctx.Err()
		}
	}
	return nil
}

// walkIdle is how long walk waits for the next dead letter it was told of.
const walkIdle = 5 * time.Second

func readDeadLetter(m broker.Message, now time.Time) DeadLetter {
	d := DeadLetter{Reason: m.Headers[broker.HeaderDeathReason], Body: m.Body, Headers: m.Headers}
	d.Attempts, _ = strconv.Atoi(m.Headers[broker.HeaderAttempts])
	env, err := broker.DecodeEnvelope(m.Body)
	if err != nil {
		d.Malformed = true
		return d
	}
	d.ID, d.Kind, d.CorrelationID, d.Payload = env.JobID, env.JobType, env.CorrelationID, env.Payload
	d.EnqueuedAt = env.EnqueuedAt()
	d.Age = max(0, now.Sub(d.EnqueuedAt))
	if d.Attempts == 0 {
		d.Attempts = int(env.Attempt)
	}
	return d
}
