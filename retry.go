package queuey

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// Backoff computes the wait before a retry. The wait is rounded up to the
// queue set's RetryGranularity (1 s by default): FixedBackoff(200ms) waits
// 1 s unless the granularity is finer. The zero value retries after one
// such step.
type Backoff struct {
	// Base is the wait after the first failed attempt.
	Base time.Duration
	// Factor multiplies the wait per further failed attempt. 0, 1, a
	// negative, NaN or infinite factor keeps the wait at Base (fixed).
	Factor float64
	// Max caps the wait. 0 caps it only at the longest hold (~24.8 days):
	// broker.LongestHold of the queue set's RetryGranularity, where the
	// worker caps every retry's wait.
	Max time.Duration
	// Jitter draws the wait uniformly from [0, computed) ("full jitter"),
	// so failures of many jobs at once do not retry in lockstep; the draw
	// is then rounded up to RetryGranularity like any wait.
	Jitter bool
}

// FixedBackoff waits d before every retry.
func FixedBackoff(d time.Duration) Backoff { return Backoff{Base: d} }

// ExponentialBackoff doubles from 1 s per failed attempt, up to 5 minutes,
// with full jitter: its Delay after failed attempt n (1-based) is
//
//	U × min(1 s × 2^(n-1), 5 min),  U drawn uniformly from [0, 1)
//
// which the worker rounds up to the queue set's RetryGranularity (1 s by
// default; a draw of 0 waits one step). So 1 s, 2 s, 4 s... are ceilings,
// not the waits: at the default granularity the first retry waits 1 s,
// the second 1 or 2 s, the third 1 to 4 s (1 s, 2 s, 1 s is a run as
// likely as 1 s, 2 s, 4 s); before the rounding, each is half its ceiling
// on average. For waits of exactly 1, 2, 4 s, leave Jitter off:
// Backoff{Base: time.Second, Factor: 2, Max: 5 * time.Minute}.
func ExponentialBackoff() Backoff {
	return Backoff{Base: time.Second, Factor: 2, Max: 5 * time.Minute, Jitter: true}
}

const maxHold = broker.MaxHoldMs * time.Millisecond

// Delay is the wait after failedAttempt (1-based; 0 counts as 1). It never
// panics and never exceeds Max or the longest hold. Its jitter comes from
// math/rand/v2's global source; DelayWith takes a source of its own.
func (b Backoff) Delay(failedAttempt int) time.Duration {
	return b.DelayWith(failedAttempt, nil)
}

// DelayWith is Delay with its jitter drawn from r, so that a seeded r gives
// the same delays every time; a nil r draws from math/rand/v2's global
// source. A Backoff without Jitter does not draw.
func (b Backoff) DelayWith(failedAttempt int, r *rand.Rand) time.Duration {
	limit := maxHold
	if b.Max > 0 {
		limit = min(b.Max, maxHold)
	}
	if b.Base <= 0 {
		return 0
	}
	factor := b.Factor
	if math.IsNaN(factor) || math.IsInf(factor, 0) || factor <= 0 {
		factor = 1
	}
	exp := float64(max(failedAttempt, 1) - 1)
	d := float64(b.Base) * math.Pow(factor, exp)
	if math.IsNaN(d) || d > float64(limit) {
		d = float64(limit)
	}
	if b.Jitter {
		d = float64n(r) * d
	}
	return time.Duration(d)
}

// RetryPolicy says how often a job runs and how long it waits between runs.
type RetryPolicy struct {
	// MaxAttempts counts every run, the first included: 1 means no retries.
	// 0 is taken as 1.
	MaxAttempts int
	// Backoff is the wait before each retry.
	Backoff Backoff
}

// NoRetries runs a job once: a failure dead-letters it.
func NoRetries() RetryPolicy { return RetryPolicy{MaxAttempts: 1} }

// FixedRetries runs a job up to attempts times, waiting d between runs.
func FixedRetries(attempts int, d time.Duration) RetryPolicy {
	return RetryPolicy{MaxAttempts: attempts, Backoff: FixedBackoff(d)}
}

// ExponentialRetries runs a job up to attempts times with ExponentialBackoff.
func ExponentialRetries(attempts int) RetryPolicy {
	return RetryPolicy{MaxAttempts: attempts, Backoff: ExponentialBackoff()}
}

func (p RetryPolicy) maxAttempts() int { return max(p.MaxAttempts, 1) }

// Decide says whether a job that failed on failedAttempt runs again, and
// after how long. Its jitter comes from math/rand/v2's global source.
func (p RetryPolicy) Decide(failedAttempt int) (delay time.Duration, retry bool) {
	return p.DecideWith(failedAttempt, nil)
}

// DecideWith is Decide with the backoff's jitter drawn from r (nil: the
// global source). A worker decides with the source WorkerConfig.Rand
// seeded; it draws only when the job runs again.
func (p RetryPolicy) DecideWith(failedAttempt int, r *rand.Rand) (delay time.Duration, retry bool) {
	if failedAttempt >= p.maxAttempts() {
		return 0, false
	}
	return p.Backoff.DelayWith(failedAttempt, r), true
}

func (p RetryPolicy) validate() error {
	if p.MaxAttempts < 0 || p.Backoff.Base < 0 || p.Backoff.Max < 0 {
		return fmt.Errorf("%w: retry policy %+v has a negative field", ErrInvalidQueue, p)
	}
	return nil
}

// float64n draws from r, or from the global source when r is nil.
func float64n(r *rand.Rand) float64 {
	if r == nil {
		return rand.Float64()
	}
	return r.Float64()
}

// jitterSources are a worker's sources of randomness (WorkerConfig.Rand),
// one per use, so that the draws of one use do not shift another's: retry
// backoffs (drawn by the handler goroutines), republish backoffs (by the
// queue actors) and the supervisor's restart backoffs. Each is safe for
// concurrent use.
type jitterSources struct {
	retry, republish, restart *rand.Rand
}

// newJitter seeds the worker's sources from seed, drawing from it here
// only; a nil seed means random seeds.
func newJitter(seed *rand.Rand) jitterSources {
	next := rand.Uint64
	if seed != nil {
		next = seed.Uint64
	}
	source := func() *rand.Rand {
		return rand.New(&lockedSource{src: rand.NewPCG(next(), next())})
	}
	return jitterSources{retry: source(), republish: source(), restart: source()}
}

// lockedSource makes a rand.Source safe for concurrent use. A *rand.Rand
// keeps no state of its own, so one over a lockedSource is safe too.
type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

// Uint64 draws from the source under its lock.
func (s *lockedSource) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.src.Uint64()
}

// retryOverrideSet holds the retry policies set while a worker runs
// (Worker.SetQueueRetryPolicy, SetKindRetryPolicy): the handler goroutines
// read them on every failure, without a lock; a change publishes a new
// copy.
type retryOverrideSet struct {
	mu      sync.Mutex                     // serialises changes
	current atomic.Pointer[retryOverrides] // nil: none set
}

// retryOverrides are the retry policies set while a worker runs. A value
// that has been published is never changed, only replaced by a copy.
type retryOverrides struct {
	byQueue map[string]RetryPolicy // by Queue.Name
	byKind  map[string]RetryPolicy // by job kind
}

// load returns the overrides in force.
func (o *retryOverrideSet) load() *retryOverrides {
	if c := o.current.Load(); c != nil {
		return c
	}
	return &noRetryOverrides
}

// noRetryOverrides are the overrides before any is set; never changed.
var noRetryOverrides retryOverrides

// set publishes a copy of the overrides in which key (a kind, or else a
// queue name) has p, or nothing for a nil p.
func (o *retryOverrideSet) set(kind bool, key string, p *RetryPolicy) error {
	if p != nil {
		if err := p.validate(); err != nil {
			return err
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	next := *o.load()
	m := &next.byQueue
	if kind {
		m = &next.byKind
	}
	*m = maps.Clone(*m)
	if p == nil {
		delete(*m, key)
	} else {
		if *m == nil {
			*m = map[string]RetryPolicy{}
		}
		(*m)[key] = *p
	}
	o.current.Store(&next)
	return nil
}

// retryPolicy is the policy a failure of job is judged by: the job's own
// (RetryPolicer, decided from its content), else a runtime override for
// its kind, else one for its queue, else the queue's.
func (r *jobRunner) retryPolicy(q *queueConfig, kind string, h handler, job decodedJob) RetryPolicy {
	if p, ok := h.ownPolicy(job); ok {
		return p
	}
	o := r.overrides.load()
	if p, ok := o.byKind[kind]; ok {
		return p
	}
	if p, ok := o.byQueue[q.Name]; ok {
		return p
	}
	return q.retry
}
