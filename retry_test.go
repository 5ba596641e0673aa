package queuey_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
)

func TestBackoffDelay(t *testing.T) {
	exp := queuey.Backoff{Base: time.Second, Factor: 2, Max: 10 * time.Second}
	for _, tc := range []struct {
		name    string
		backoff queuey.Backoff
		attempt int
		want    time.Duration
	}{
		{"none is zero", queuey.Backoff{}, 3, 0},
		{"fixed is constant", queuey.FixedBackoff(2 * time.Second), 7, 2 * time.Second},
		{"first attempt is base", exp, 1, time.Second},
		{"attempt 0 counts as 1", exp, 0, time.Second},
		{"grows by factor", exp, 4, 8 * time.Second},
		{"respects the cap", exp, 5, 10 * time.Second},
		{"huge attempt is the cap", exp, math.MaxInt, 10 * time.Second},
		{"shrinking factor", queuey.Backoff{Base: time.Second, Factor: 0.5}, 2, 500 * time.Millisecond},
		{"shrinking factor never underflows", queuey.Backoff{Base: time.Second, Factor: 0.5}, math.MaxInt, 0},
		{"factor 3 from 500ms", queuey.Backoff{Base: 500 * time.Millisecond, Factor: 3}, 1, 500 * time.Millisecond},
		{"NaN factor is constant", queuey.Backoff{Base: time.Second, Factor: math.NaN()}, 5, time.Second},
		{"infinite factor is constant", queuey.Backoff{Base: time.Second, Factor: math.Inf(1)}, 5, time.Second},
		{"negative factor is constant", queuey.Backoff{Base: time.Second, Factor: -2}, 5, time.Second},
		{"no cap stops at the longest hold", queuey.Backoff{Base: time.Hour, Factor: 10}, 50, 2147483647 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.backoff.Delay(tc.attempt); got != tc.want {
				t.Errorf("Delay(%d): got %v, want %v", tc.attempt, got, tc.want)
			}
		})
	}
}

func TestFullJitterStaysWithinBounds(t *testing.T) {
	b := queuey.Backoff{Base: time.Second, Factor: 2, Max: 10 * time.Second, Jitter: true}
	below, distinct := 0, map[time.Duration]bool{}
	for range 2000 {
		d := b.Delay(3) // computed: 4 s
		if d < 0 || d > 4*time.Second {
			t.Fatalf("jittered delay %v outside [0, 4s]", d)
		}
		if d < 4*time.Second {
			below++
		}
		distinct[d] = true
	}
	if below == 0 || len(distinct) < 100 {
		t.Errorf("jitter looks constant: %d below the computed delay, %d distinct values", below, len(distinct))
	}
	if d := b.Delay(math.MaxInt); d > 10*time.Second {
		t.Errorf("jittered huge attempt: got %v, want at most the 10s cap", d)
	}
}

// DelayWith draws its jitter from the source it is given: the same seed
// gives the same delays, another seed others; a backoff without Jitter
// draws nothing; a nil source is the global one, as for Delay.
func TestDelayWithDrawsFromItsSource(t *testing.T) {
	b := queuey.ExponentialBackoff()
	draw := func(seed uint64) []time.Duration {
		r := rand.New(rand.NewPCG(seed, 0))
		var ds []time.Duration
		for attempt := 1; attempt <= 8; attempt++ {
			ds = append(ds, b.DelayWith(attempt, r))
		}
		return ds
	}
	if one, again := draw(1), draw(1); !slices.Equal(one, again) {
		t.Errorf("seed 1 twice: %v, then %v", one, again)
	}
	if one, two := draw(1), draw(2); slices.Equal(one, two) {
		t.Errorf("seeds 1 and 2 drew the same: %v", one)
	}
	r, same := rand.New(rand.NewPCG(1, 0)), rand.New(rand.NewPCG(1, 0))
	d := queuey.FixedBackoff(time.Second).DelayWith(3, r)
	if drew := r.Uint64() != same.Uint64(); d != time.Second || drew {
		t.Errorf("a backoff without jitter: got %v, and drew from the source: %t", d, drew)
	}
	if d := b.DelayWith(2, nil); d < 0 || d > 2*time.Second {
		t.Errorf("DelayWith(2, nil): got %v, want within [0, 2s]", d)
	}
}

// DecideWith draws only for a job that runs again.
func TestDecideWithDrawsOnlyToRetry(t *testing.T) {
	r, same := rand.New(rand.NewPCG(7, 0)), rand.New(rand.NewPCG(7, 0))
	if _, retry := queuey.ExponentialRetries(3).DecideWith(3, r); retry || r.Uint64() != same.Uint64() {
		t.Errorf("the last attempt: retry %t, or it drew from the source", retry)
	}
}

// A seeded source makes a jittered backoff the same in every run, as
// clocktest's Options.Seed does for a worker (WorkerConfig.Rand).
func ExampleRetryPolicy_DecideWith() {
	policy := queuey.ExponentialRetries(4) // 1 s, doubling, full jitter
	r := rand.New(rand.NewPCG(1, 2))
	for attempt := 1; attempt <= 4; attempt++ {
		delay, retry := policy.DecideWith(attempt, r)
		fmt.Printf("failed attempt %d: retry %t after %v\n", attempt, retry, delay.Round(time.Millisecond))
	}
	// Output:
	// failed attempt 1: retry true after 676ms
	// failed attempt 2: retry true after 923ms
	// failed attempt 3: retry true after 2.034s
	// failed attempt 4: retry false after 0s
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name      string
		policy    queuey.RetryPolicy
		attempt   int
		wantRetry bool
	}{
		{"default policy has no retries", queuey.RetryPolicy{}, 1, false},
		{"one attempt gives up at once", queuey.NoRetries(), 1, false},
		{"three attempts: 1 retries", queuey.FixedRetries(3, time.Second), 1, true},
		{"three attempts: 2 retries", queuey.FixedRetries(3, time.Second), 2, true},
		{"three attempts: 3 gives up", queuey.FixedRetries(3, time.Second), 3, false},
		{"three attempts: huge gives up", queuey.FixedRetries(3, time.Second), math.MaxInt, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, retry := tc.policy.Decide(tc.attempt); retry != tc.wantRetry {
				t.Errorf("Decide(%d): got retry %t, want %t", tc.attempt, retry, tc.wantRetry)
			}
		})
	}
	// The delay is the backoff of the attempt that failed.
	p := queuey.RetryPolicy{MaxAttempts: 5, Backoff: queuey.Backoff{Base: time.Second, Factor: 2}}
	if d, _ := p.Decide(3); d != 4*time.Second {
		t.Errorf("Decide(3) delay: got %v, want 4s", d)
	}
}

func TestResultErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{queuey.Defer(30*time.Second, ""), "job deferred for 30s: deferred"},
		{queuey.Defer(1500*time.Millisecond, "rate limited"), "job deferred for 1.5s: rate limited"},
		{queuey.Fatalf("bad %d", 1), "job failed (fatal): bad 1"},
		{queuey.Retryable(errString("flaky")), "job failed (retryable): flaky"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	if queuey.Retryable(nil) != nil || queuey.Fatal(nil) != nil {
		t.Errorf("wrapping nil must stay nil")
	}
}

type errString string

func (e errString) Error() string { return string(e) }
