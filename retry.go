package queuey

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
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
	// so failures of many jobs at once do not retry in lockstep. The
	// draw is then rounded up to the retry granularity like any wait, so
	// it is never shorter than one step.
	Jitter bool
}

// FixedBackoff waits d before every retry.
func FixedBackoff(d time.Duration) Backoff { return Backoff{Base: d} }

// ExponentialBackoff doubles its limit per failed attempt from 1 s, up to
// 5 minutes, and draws each wait with full jitter: uniformly from 0 up to
// that limit (1 s, 2 s, 4 s, ...), then rounded up to the retry
// granularity. At the default 1 s granularity the first retry waits 1 s,
// the second 1 or 2 s, the third 1 to 4 s: waits of 1, 2, 1 s are as
// likely as 1, 2, 4 s. For waits of exactly 1, 2, 4 s, set
// Backoff{Base: time.Second, Factor: 2, Max: 5 * time.Minute} without
// Jitter.
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
