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
	turn     chan struct{} // one read of the dead letters at a time (walk)
}

// NewDeadLetters declares set's queues (as NewProducer does: a replay
// publishes into them) and returns their dead-letter tool.
func NewDeadLetters(ctx context.Context, backend broker.Backend, set QueueSet, cfg *ProducerConfig) (*DeadLetters, error) {
	p, err := NewProducer(ctx, backend, set, cfg)
	if err != nil {
		return nil, err
	}
	return &DeadLetters{backend: backend, producer: p, set: p.set, clock: p.clock, turn: make(chan struct{}, 1)}, nil
}

// DeadLetter is one message in a queue's dead letters.
type DeadLetter struct {
	// ID and Kind are the job's; both are empty for a body that was not an
	// envelope (Malformed).
	ID, Kind string
	// Reason is why it was dead-lettered; Attempts how often it ran and
	// Deferrals how often its handler deferred it.
	Reason    string
	Attempts  int
	Deferrals int
	// Cause is the kind of failure Reason tells of, read from its words
	// (CauseOf); empty when the reason is none of the library's.
	Cause DeadLetterCause
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
	// UniqueKey is a unique job's uniqueness key (Unique, UniqueKey),
	// which its replay takes again; empty for other jobs.
	UniqueKey string
	// Chain is where the job stands in its chain (Producer.EnqueueChain):
	// its replay resumes the chain there. Zero for a job not in one.
	Chain ChainStep
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
	//
	// Select and Progress run while the replay holds the dead letters:
	// neither may call List, Show or Replay of the same DeadLetters (that
	// call would wait for the replay, which waits for it).
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

// List returns the dead letters of the queue named name (Queue.Name), in
// the dead-letter queue's order (the order they were dead-lettered in), the
// first ListLimit of them at most. Reading them takes them off the
// dead-letter queue for a moment; they all go back, in order, before List
// returns. Calls on one DeadLetters take turns; one that finds another
// reader at the queue (another DeadLetters, another process) fails with
// ErrInUse rather than return the part the other left. Show and Replay
// read the same way.
func (dl *DeadLetters) List(ctx context.Context, name string) ([]DeadLetter, error) {
	var out []DeadLetter
	_, err := dl.walk(ctx, name, func(d DeadLetter, _ broker.Delivery) (bool, error) {
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
// nothing; the others stay where they were. One whose republish has begun
// is finished, publish and removal, whatever ctx does (replayOneTimeout at
// most): cut between the two, it would be in both queues. Beyond the
// 65,535 a read takes at once (ListLimit), it reads again as long as it
// replays some. A unique job's replay takes its uniqueness key again;
// one whose key a newer job holds stays in the dead letters, and the
// error (a *DuplicateError each, joined) names that job, while the others
// are replayed. It returns how many were replayed.
func (dl *DeadLetters) Replay(ctx context.Context, name string, opts ReplayOptions) (int, error) {
	q, err := dl.replayQueue(name, opts)
	if err != nil {
		return 0, err
	}
	total, err := dl.backend.Depth(ctx, broker.DeadQueueName(q.broker))
	if err != nil {
		return 0, err
	}
	r := &replay{dl: dl, q: q, opts: opts, total: total}
	one := func(d DeadLetter, del broker.Delivery) (bool, error) { return r.one(ctx, d, del) }
	for {
		before := r.replayed
		more, err := dl.walk(ctx, name, one)
		if err != nil || !more || r.replayed == before {
			return r.replayed, errors.Join(append(r.duplicates, err)...)
		}
	}
}

// replayQueue checks Replay's options and returns the queue named name.
func (dl *DeadLetters) replayQueue(name string, opts ReplayOptions) (*queueConfig, error) {
	if opts.Select == nil {
		return nil, fmt.Errorf("%w: replay needs a selection (ByID, ByKind or All)", ErrInvalidJob)
	}
	if opts.After < 0 {
		return nil, fmt.Errorf("%w: replay after %v", ErrInvalidDelay, opts.After)
	}
	q, ok := dl.set.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: queue %q is not in the queue set", ErrUnknownQueue, name)
	}
	return q, nil
}

// replay is one Replay call: what it replays into which queue, and how
// far it has got.
type replay struct {
	dl       *DeadLetters
	q        *queueConfig
	opts     ReplayOptions
	total    int // the dead letters when it began, for Progress
	replayed int
	// duplicates are the unique jobs left in the dead letters because a
	// newer job holds their key (each a *DuplicateError).
	duplicates []error
}

// one replays d, when it is selected, and removes it from the dead
// letters (walk's f): publish and removal run to their end once begun,
// whatever ctx does, replayOneTimeout at most.
func (r *replay) one(ctx context.Context, d DeadLetter, del broker.Delivery) (bool, error) {
	if d.Malformed || !r.opts.Select(d) {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ctx, cancel := r.dl.clock.WithTimeout(context.WithoutCancel(ctx), replayOneTimeout)
	defer cancel()
	if err := r.republish(ctx, d); errors.Is(err, ErrDuplicate) {
		r.duplicates = append(r.duplicates, fmt.Errorf("replay %s: %w", d.ID, err))
		return false, nil // left in the dead letters; the others go on
	} else if err != nil {
		return false, fmt.Errorf("replay %s: %w", d.ID, err)
	}
	if err := del.Ack(ctx); err != nil {
		// Published but still in the dead letters: it may be replayed
		// twice, never lost.
		return false, fmt.Errorf("replayed %s but could not remove it from the dead letters: %w", d.ID, err)
	}
	r.replayed++
	if r.opts.Progress != nil {
		r.opts.Progress(r.replayed, r.total)
	}
	return true, nil
}

// republish publishes d's job to its work queue as a new one (attempt 1,
// no deferrals), now or, after opts.After, at the queue's top priority.
func (r *replay) republish(ctx context.Context, d DeadLetter) error {
	env, _ := broker.DecodeEnvelope(d.Body) // it decoded once already
	env.Attempt, env.Deferrals, env.Priority, env.Queue = 1, 0, 0, r.q.broker
	if r.opts.After > 0 {
		env.Priority = r.q.maxPriority
		_, err := r.dl.producer.hold(ctx, env, r.opts.After, holdOp{kind: holdDefer, op: OpDefer}, carriedHeaders(d.Headers))
		return err
	}
	return r.dl.producer.publish(ctx, env, true, carriedHeaders(d.Headers))
}

// ListLimit is how many dead letters one read takes at most: List's limit
// (RabbitMQ's largest prefetch).
const ListLimit = 65535

// replayOneTimeout bounds the replay of one dead letter, publish and
// removal, once begun.
const replayOneTimeout = 10 * time.Second

// walk hands every dead letter of the queue named name to f, with its
// delivery; f says whether it settled the delivery. Those it did not go
// back to the dead-letter queue, in order, when walk returns. more says
// that there were over ListLimit, and walk read only the first.
//
// It reads as the dead-letter queue's only consumer (when the backend is
// a broker.ExclusiveConsumer; both of queuey's are), so that two readers
// do not split its messages and each take its part for the whole: a
// queue another reader holds gives ErrInUse. Walks of one DeadLetters
// take turns.
func (dl *DeadLetters) walk(ctx context.Context, name string, f func(DeadLetter, broker.Delivery) (bool, error)) (more bool, _ error) {
	q, ok := dl.set.byName[name]
	if !ok {
		return false, fmt.Errorf("%w: queue %q is not in the queue set", ErrUnknownQueue, name)
	}
	if err := dl.awaitTurn(ctx, name); err != nil {
		return false, err
	}
	defer func() { <-dl.turn }()
	r, err := dl.startRead(ctx, name, q)
	if err != nil || r == nil {
		return false, err
	}
	defer r.c.Cancel() // what was not settled goes back, in order
	for read := range min(r.n, ListLimit) {
		quiet, err := r.next(ctx, dl.clock, read, f)
		if err != nil {
			return false, err
		}
		if quiet {
			return r.more, nil // all there is
		}
	}
	return r.more, nil
}

// awaitTurn waits until no other walk of dl reads, or for ctx's end. The
// caller gives the turn back (<-dl.turn).
func (dl *DeadLetters) awaitTurn(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err // the select would pick a free turn, or this case, at random
	}
	select {
	case dl.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for another read of the dead letters of %q to end: %w", name, ctx.Err())
	}
}

// deadRead is one walk's read of a dead-letter queue.
type deadRead struct {
	name   string // the work queue's Name, for errors
	c      broker.Consumer
	n      int  // the depth (walk reads ListLimit at most), or ListLimit on a quorum queue
	more   bool // the depth was over ListLimit
	quorum bool
	now    time.Time // when the read began, for the dead letters' ages
}

// startRead counts the dead letters of q, the queue named name, and starts
// consuming them, exclusively when the backend can. It returns a nil read
// when there is nothing to read and no exclusive consume to say whether
// another reader holds the queue.
func (dl *DeadLetters) startRead(ctx context.Context, name string, q *queueConfig) (*deadRead, error) {
	dead := broker.DeadQueueName(q.broker)
	n, err := dl.backend.Depth(ctx, dead)
	if err != nil {
		return nil, err
	}
	r := &deadRead{name: name, n: n, more: n > ListLimit, quorum: q.qtype == broker.Quorum}
	if r.quorum {
		// A quorum queue counts what a reader before gave back only once
		// its log has applied it: read until the queue is quiet instead.
		r.n = ListLimit
	}
	consume := dl.backend.Consume
	if ex, ok := dl.backend.(broker.ExclusiveConsumer); ok {
		consume = ex.ConsumeExclusive
	} else if r.n == 0 {
		return nil, nil
	}
	// Even with nothing ready, the exclusive consume says whether another
	// reader holds what there is.
	c, err := consume(ctx, dead, max(1, min(r.n, ListLimit)))
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err() // whatever the backend made of it, the read was cut short
	}
	if errors.Is(err, ErrInUse) {
		return nil, fmt.Errorf("%w: the dead letters of %q are being read elsewhere (List, Show or Replay, in this process or another, or a worker that consumes that queue); try again", err, name)
	}
	if err != nil {
		return nil, err
	}
	r.c, r.now = c, dl.clock.Now()
	return r, nil
}

// next waits for one more dead letter, read of them having come so far,
// and hands it to f. quiet reports that a quorum queue went quiet: there
// are no more.
//
// They were counted ready: they come at once, unless someone took them
// meanwhile (a reader on a backend without exclusive consumers, a purge).
// next gives up after a quiet spell, not at ctx's end, and says so rather
// than let walk return part as if it were all.
func (r *deadRead) next(ctx context.Context, clk clock.Clock, read int, f func(DeadLetter, broker.Delivery) (bool, error)) (quiet bool, _ error) {
	idle := clk.Timer(walkIdle)
	if r.quorum {
		idle.Reset(walkQuiet)
	}
	select {
	case del, ok := <-r.c.Deliveries():
		idle.Stop()
		if !ok {
			return false, fmt.Errorf("reading the dead letters of %q: %w", r.name, r.c.Err())
		}
		_, err := f(readDeadLetter(del.Message(), r.now), del)
		return false, err
	case <-idle.C:
		if r.quorum {
			return true, nil
		}
		return false, fmt.Errorf("%w: read %d of the %d dead letters of %q; the others went elsewhere (another reader, or a purge)", ErrInUse, read, r.n, r.name)
	case <-ctx.Done():
		idle.Stop()
		return false, ctx.Err()
	}
}

// walkIdle is how long walk waits for the next dead letter it was told of.
const walkIdle = 5 * time.Second

// walkQuiet is how long walk waits for the next dead letter of a quorum
// queue before it takes the queue for read to its end.
const walkQuiet = 500 * time.Millisecond

func readDeadLetter(m broker.Message, now time.Time) DeadLetter {
	d := DeadLetter{Reason: m.Headers[broker.HeaderDeathReason], Body: m.Body, Headers: m.Headers}
	d.Attempts, _ = strconv.Atoi(m.Headers[broker.HeaderAttempts])
	d.Cause = DeadLetterCause(m.Headers[headerDeadLetterCause])
	if d.Cause == "" {
		d.Cause = CauseOf(d.Reason) // a dead letter of an earlier version, or of the Rust crate
	}
	env, err := broker.DecodeEnvelope(m.Body)
	if err != nil {
		d.Malformed = true
		return d
	}
	d.ID, d.Kind, d.CorrelationID, d.Payload = env.JobID, env.JobType, env.CorrelationID, env.Payload
	d.UniqueKey, _, _ = uniqueOf(m.Headers)
	d.Chain = chainStepOf(env)
	d.Deferrals = int(env.Deferrals)
	d.EnqueuedAt = env.EnqueuedAt()
	d.Age = max(0, now.Sub(d.EnqueuedAt))
	if d.Attempts == 0 {
		d.Attempts = int(env.Attempt)
	}
	return d
}

// Delete removes the selected dead letters of the queue named name for
// good, and returns how many it removed. It reads as List does (refused
// with ErrInUse while another reader holds the queue); the dead letters
// it does not select go back, in order. Cut short, it has removed some
// and left the others where they were. Beyond the first ListLimit it
// reads again as long as it removes some.
func (dl *DeadLetters) Delete(ctx context.Context, name string, sel func(DeadLetter) bool) (int, error) {
	if sel == nil {
		return 0, fmt.Errorf("%w: delete needs a selection (ByID, ByKind or All)", ErrInvalidJob)
	}
	deleted := 0
	one := func(d DeadLetter, del broker.Delivery) (bool, error) {
		if !sel(d) {
			return false, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if err := del.Ack(ctx); err != nil {
			return false, fmt.Errorf("delete %s: %w", d.ID, err)
		}
		deleted++
		return true, nil
	}
	for {
		before := deleted
		more, err := dl.walk(ctx, name, one)
		if err != nil || !more || deleted == before {
			return deleted, err
		}
	}
}
