package queuey

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// Backoff computes the wait before a retry. The zero value retries after one
// hold step (the queue set's RetryGranularity).
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
	// Jitter draws the wait uniformly from [0, computed] ("full jitter"),
	// so failures of many jobs at once do not retry in lockstep.
	Jitter bool
}

// FixedBackoff waits d before every retry.
func FixedBackoff(d time.Duration) Backoff { return Backoff{Base: d} }

// ExponentialBackoff waits 1 s, then twice as long per failed attempt, up
// to 5 minutes, with full jitter.
func ExponentialBackoff() Backoff {
	return Backoff{Base: time.Second, Factor: 2, Max: 5 * time.Minute, Jitter: true}
}

const maxHold = broker.MaxHoldMs * time.Millisecond

// Delay is the wait after failedAttempt (1-based; 0 counts as 1). It never
// panics and never exceeds Max or the longest hold.
func (b Backoff) Delay(failedAttempt int) time.Duration {
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
		d = rand.Float64() * d
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
// after how long.
func (p RetryPolicy) Decide(failedAttempt int) (delay time.Duration, retry bool) {
	if failedAttempt >= p.maxAttempts() {
		return 0, false
	}
	return p.Backoff.Delay(failedAttempt), true
}

func (p RetryPolicy) validate() error {
	if p.MaxAttempts < 0 || p.Backoff.Base < 0 || p.Backoff.Max < 0 {
		return fmt.Errorf("%w: retry policy %+v has a negative field", ErrInvalidQueue, p)
	}
	return nil
}
