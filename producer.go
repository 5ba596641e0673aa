package queuey

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/benbjohnson/clock"
	"golang.org/x/sync/errgroup"

	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/internal/mockctx"
)

// DefaultMaxMessageBytes is the largest encoded job a Producer sends unless
// told otherwise: RabbitMQ's own default limit (128 MiB).
const DefaultMaxMessageBytes = 128 << 20

// ProducerConfig configures a Producer. A nil config means every default.
type ProducerConfig struct {
	// Clock stamps enqueue times. Default: the real clock.
	Clock clock.Clock
	// Logger receives debug lines for delayed publishes. Default slog.Default().
	Logger *slog.Logger
	// MaxMessageBytes refuses larger encoded jobs with ErrMessageTooLarge
	// before anything is sent. Default DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Hooks observe every publish (package trace uses them).
	Hooks *Hooks
}

// Producer publishes jobs. It is safe for concurrent use and holds no
// goroutine: there is nothing to close.
type Producer struct {
	backend  broker.Backend
	set      *queueSet
	holds    producerHolds
	clock    clock.Clock
	maxBytes int
	hooks    *Hooks
}

// NewProducer validates set, declares every queue of it on backend, and
// returns a producer for its jobs.
func NewProducer(ctx context.Context, backend broker.Backend, set QueueSet, cfg *ProducerConfig) (*Producer, error) {
	p, err := NewUndeclaredProducer(backend, set, cfg)
	if err != nil {
		return nil, err
	}
	specs := make([]broker.QueueSpec, 0, len(p.set.ordered))
	for _, q := range p.set.ordered {
		specs = append(specs, q.spec())
	}
	if err := backend.Declare(ctx, specs...); err != nil {
		return nil, fmt.Errorf("declare queues: %w", err)
	}
	return p, nil
}

// NewUndeclaredProducer returns a producer that declares nothing: its
// queues must exist already. It can Enqueue; EnqueueAfter and Defer need
// the queue to have been declared through the same backend (by a worker or
// another producer in this process), else they fail with ErrUnknownQueue.
func NewUndeclaredProducer(backend broker.Backend, set QueueSet, cfg *ProducerConfig) (*Producer, error) {
	if backend == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidQueue)
	}
	s, err := resolve(set)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &ProducerConfig{}
	}
	if cfg.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("%w: max message bytes %d is negative", ErrInvalidQueue, cfg.MaxMessageBytes)
	}
	p := &Producer{
		backend:  backend,
		set:      s,
		clock:    orRealClock(cfg.Clock),
		maxBytes: cmp.Or(cfg.MaxMessageBytes, DefaultMaxMessageBytes),
		hooks:    cfg.Hooks,
	}
	p.holds = producerHolds{holder: holder{backend: backend, set: s, log: orDefaultLogger(cfg.Logger), clock: p.clock}, leases: newHoldLeases()}
	return p, nil
}

// EnqueueOption adjusts one enqueue: WithCorrelationID, Unique,
// UniqueKey.
type EnqueueOption func(*enqueueOptions)

// enqueueOptions is what an enqueue's options ask for.
type enqueueOptions struct {
	correlationID string
	unique        *uniqueness // Unique, UniqueKey
}

// WithCorrelationID sets the job's correlation id: carried unchanged
// through every retry and deferral, shown to handlers as
// JobContext.CorrelationID and to hooks (traces).
func WithCorrelationID(id string) EnqueueOption {
	return func(o *enqueueOptions) { o.correlationID = id }
}

// Enqueue publishes job to run as soon as a worker takes it, behind the
// backlog. It returns the job id once the broker has confirmed the publish.
func (p *Producer) Enqueue(ctx context.Context, job Job, opts ...EnqueueOption) (string, error) {
	env, _, headers, err := p.envelope(job, opts)
	if err != nil {
		return "", err
	}
	if err := p.publish(ctx, env, false, headers); err != nil {
		return "", err
	}
	return env.JobID, nil
}

// publish puts env on its queue now, confirmed, with headers (a replayed
// job's own; a unique job's key; else nil), holding the job's uniqueness
// key first if it has one (withKey). A job is due when it is enqueued
// (broker.Message.DueAt); a publish that is not its job's enqueue (a
// replay) stamps the time of the publish as the due time.
func (p *Producer) publish(ctx context.Context, env broker.Envelope, stampNow bool, headers map[string]string) error {
	msg, err := p.message(env)
	if err != nil {
		return err
	}
	msg.Headers = headers
	if stampNow {
		stampDue(&msg, p.clock.Now())
	}
	err = p.withKey(ctx, env, headers, func() error {
		done := p.hooks.beforePublish(ctx, p.backend.Name(), p.set, &msg, publishIntent{op: OpEnqueue})
		err := p.backend.Publish(ctx, msg)
		done(err)
		return err
	})
	if errors.Is(err, ErrDuplicate) {
		return err
	}
	if err != nil {
		return fmt.Errorf("enqueue %s on %q: %w", env.JobType, env.Queue, err)
	}
	return nil
}

// batchInFlight bounds the publishes one EnqueueBatch keeps in flight.
const batchInFlight = 256

// EnqueueBatch enqueues jobs as Enqueue does, with up to 256 publishes in
// flight at once, so that one caller is not held to one publish per broker
// round trip. It returns when every job is confirmed or has failed: ids[i]
// is jobs[i]'s id, or "" when it failed, and err joins the failures, each
// naming its job's index. A job that fails does not stop the others. Jobs
// may reach their queues in another order than jobs has. On RabbitMQ the
// batch shares one channel, which a publish the broker refuses outright (a
// message over its size limit) closes: that job fails alone, and the jobs
// in flight beside it are published again (some may arrive twice).
func (p *Producer) EnqueueBatch(ctx context.Context, jobs []Job) ([]string, error) {
	ids := make([]string, len(jobs))
	errs := make([]error, len(jobs))
	if bp, ok := p.backend.(broker.BatchPublisher); ok {
		// All at once: a backend keeps its window of confirms full from the
		// first job to the last, where chunks would let it drain between.
		p.publishBatch(ctx, bp, jobs, ids, errs)
	} else {
		var g errgroup.Group // a job's failure is its own: it stops nothing
		g.SetLimit(batchInFlight)
		for i := range jobs {
			g.Go(func() error {
				if ids[i], errs[i] = p.Enqueue(ctx, jobs[i]); errs[i] != nil {
					errs[i] = fmt.Errorf("job %d: %w", i, errs[i])
				}
				return nil
			})
		}
		_ = g.Wait()
	}
	return ids, errors.Join(errs...)
}

// publishBatch enqueues jobs through bp, filling ids and errs.
func (p *Producer) publishBatch(ctx context.Context, bp broker.BatchPublisher, jobs []Job, ids []string, errs []error) {
	msgs := make([]broker.Message, 0, len(jobs))
	index := make([]int, 0, len(jobs)) // msgs[k] is jobs[index[k]]
	dones := make([]func(error), 0, len(jobs))
	for i, job := range jobs {
		env, _, _, err := p.envelope(job, nil)
		var msg broker.Message
		if err == nil {
			msg, err = p.message(env)
		}
		if err != nil {
			errs[i] = fmt.Errorf("job %d: %w", i, err)
			continue
		}
		dones = append(dones, p.hooks.beforePublish(ctx, p.backend.Name(), p.set, &msg, publishIntent{op: OpEnqueue}))
		msgs, index = append(msgs, msg), append(index, i)
	}
	if len(msgs) == 0 {
		return
	}
	settled := make([]bool, len(msgs))
	bp.PublishBatch(ctx, msgs, func(k int, err error) {
		settled[k] = true
		dones[k](err) // a send span ends at its own confirm
		i := index[k]
		if err != nil {
			errs[i] = fmt.Errorf("job %d: enqueue %s on %q: %w", i, msgs[k].Type, msgs[k].Queue, err)
			return
		}
		ids[i] = msgs[k].ID
	})
	for k, ok := range settled {
		if !ok { // a backend that broke its contract: say so, never a silent ""
			err := fmt.Errorf("%T.PublishBatch did not report the outcome of this publish", bp)
			dones[k](err)
			errs[index[k]] = fmt.Errorf("job %d: enqueue %s on %q: %w", index[k], msgs[k].Type, msgs[k].Queue, err)
		}
	}
}

// EnqueueAfter publishes job to wait d (rounded up to the queue set's
// RetryGranularity, never early) and then join the back of its queue at
// priority 0. A delay that rounds up past the longest hold (~24.8 days;
// broker.LongestHold) is refused with ErrDelayTooLong; nothing is
// published.
func (p *Producer) EnqueueAfter(ctx context.Context, job Job, d time.Duration, opts ...EnqueueOption) (string, error) {
	env, _, headers, err := p.envelope(job, opts)
	if err != nil {
		return "", err
	}
	return p.hold(ctx, env, d, holdOp{kind: holdDelay, op: OpEnqueueAfter}, headers)
}

// Defer publishes job to wait d (rounded up to the queue set's
// DeferGranularity, never early) and then run ahead of the backlog, at the
// queue's top priority. The job starts with attempt 1 and no deferrals: the
// producer scheduled it, the handler never deferred it.
func (p *Producer) Defer(ctx context.Context, job Job, d time.Duration, opts ...EnqueueOption) (string, error) {
	env, q, headers, err := p.envelope(job, opts)
	if err != nil {
		return "", err
	}
	env.Priority = q.maxPriority
	return p.hold(ctx, env, d, holdOp{kind: holdDefer, op: OpDefer}, headers)
}

// holdOp is why a producer holds a job: the kind of hold, which picks
// its rounding step, and the publish op the hooks are told. The two go
// together (EnqueueAfter's, Defer's).
type holdOp struct {
	kind holdKind
	op   PublishOp
}

// hold publishes env, with headers, to wait d in a hold queue of why's
// kind, holding its uniqueness key first if it has one (withKey), and
// returns its job id.
func (p *Producer) hold(ctx context.Context, env broker.Envelope, d time.Duration, why holdOp, headers map[string]string) (string, error) {
	msg, err := p.message(env)
	if err != nil {
		return "", err
	}
	msg.Headers = headers
	err = p.withKey(ctx, env, headers, func() error {
		done := p.hooks.beforePublish(ctx, p.backend.Name(), p.set, &msg, publishIntent{op: why.op, delay: d})
		err := p.holds.hold(ctx, msg, d, why.kind)
		done(err)
		return err
	})
	if errors.Is(err, ErrDuplicate) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("%s %s on %q: %w", why.kind, env.JobType, env.Queue, err)
	}
	return env.JobID, nil
}

// envelope is job's first envelope, its queue, and the headers its
// options ask for (a unique job's; nil for most).
func (p *Producer) envelope(job Job, opts []EnqueueOption) (broker.Envelope, *queueConfig, map[string]string, error) {
	if err := checkJob(job); err != nil {
		return broker.Envelope{}, nil, nil, err
	}
	q, err := p.set.forJob(job)
	if err != nil {
		return broker.Envelope{}, nil, nil, err
	}
	payload, err := json.Marshal(job)
	if err != nil {
		return broker.Envelope{}, nil, nil, fmt.Errorf("%w: encode %s: %v", ErrInvalidJob, job.Kind(), err)
	}
	if len(payload) > p.maxBytes {
		// Refused before the envelope copies it: a job of hundreds of
		// megabytes costs its encoding, not three more passes over it.
		return broker.Envelope{}, nil, nil, fmt.Errorf("%w: job %s's payload alone is %d bytes, over the limit of %d",
			ErrMessageTooLarge, job.Kind(), len(payload), p.maxBytes)
	}
	env := broker.NewEnvelope(job.Kind(), q.broker, payload, p.clock.Now())
	if len(opts) == 0 {
		return env, q, nil, nil
	}
	env, headers, err := withOptions(env, opts)
	if err != nil {
		return broker.Envelope{}, nil, nil, err
	}
	return env, q, headers, nil
}

// withOptions returns env as opts change it, and the headers they ask
// for. It is apart so that only a job enqueued with options pays for
// what they cost.
func withOptions(env broker.Envelope, opts []EnqueueOption) (broker.Envelope, map[string]string, error) {
	var o enqueueOptions
	for _, opt := range opts {
		opt(&o)
	}
	env.CorrelationID = o.correlationID
	if !utf8.ValidString(env.CorrelationID) || len(env.CorrelationID) > 255 {
		return env, nil, fmt.Errorf("%w: correlation id %.40q... must be valid UTF-8 of at most 255 bytes (an AMQP short string), not %d",
			ErrInvalidJob, env.CorrelationID, len(env.CorrelationID))
	}
	if o.unique == nil {
		return env, nil, nil
	}
	headers, err := o.unique.headers(env)
	return env, headers, err
}

func (p *Producer) message(env broker.Envelope) (broker.Message, error) {
	msg, err := env.Message()
	if err != nil {
		return broker.Message{}, fmt.Errorf("%w: encode envelope of %s: %v", ErrInvalidJob, env.JobType, err)
	}
	if len(msg.Body) > p.maxBytes {
		return broker.Message{}, fmt.Errorf("%w: job %s encodes to %d bytes, over the limit of %d",
			ErrMessageTooLarge, env.JobType, len(msg.Body), p.maxBytes)
	}
	return msg, nil
}

// checkJob refuses what would fail later in a less clear way.
func checkJob(job Job) error {
	if job == nil {
		return fmt.Errorf("%w: nil job", ErrInvalidJob)
	}
	if v := reflect.ValueOf(job); v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Errorf("%w: nil %T", ErrInvalidJob, job)
	}
	return checkKind(job.Kind())
}

func checkKind(kind string) error {
	switch {
	case kind == "":
		return fmt.Errorf("%w: empty kind", ErrInvalidJob)
	case len(kind) > 255:
		return fmt.Errorf("%w: kind %.40q... is %d bytes, over the 255-byte limit", ErrInvalidJob, kind, len(kind))
	case !utf8.ValidString(kind):
		return fmt.Errorf("%w: kind %q is not valid UTF-8", ErrInvalidJob, kind)
	}
	return nil
}

// orRealClock is c, the real clock when c is nil; a *clock.Mock's
// timeout contexts are made race-free (package mockctx): the worker reads
// their errors, and so may a handler, while a test moves the clock.
func orRealClock(c clock.Clock) clock.Clock {
	if c == nil {
		return clock.New()
	}
	return mockctx.Guard(c)
}

func orDefaultLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
