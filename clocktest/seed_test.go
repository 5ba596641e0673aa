package clocktest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

// flaky is a job that always fails, on a queue of ExponentialRetries(3):
// it runs three times, waiting a jittered 0-1 s and then 0-2 s, each
// rounded up to the whole second (RetryGranularity).
type flaky struct{ N int }

var flakies = queuey.Queue{Name: "flaky", Prefetch: 1, Retry: new(queuey.ExponentialRetries(3))}

func (flaky) Kind() string        { return "flaky" }
func (flaky) Queue() queuey.Queue { return flakies }

var flakySet = queuey.QueueSet{Prefix: "ct", Queues: []queuey.Queue{flakies}}

// jitterTrace is what the random choices of one run decided: the run
// times of each job (offsets from Epoch, by job number), and the exact
// backoffs the retry policy drew, before their rounding.
type jitterTrace struct {
	Times, Backoffs map[int][]time.Duration
}

// runFlaky enqueues three flaky jobs and lets them run out their
// attempts, in a harness seeded by opts; then, when set, it calls then
// inside the bubble.
func runFlaky(t *testing.T, opts *clocktest.Options, then func(t *testing.T, trace jitterTrace)) (trace jitterTrace, seed uint64) {
	t.Helper()
	trace = jitterTrace{Times: map[int][]time.Duration{}, Backoffs: map[int][]time.Duration{}}
	var mu sync.Mutex
	byID := map[string]int{}
	opts.Worker.Hooks = &queuey.Hooks{Publish: func(ctx context.Context, p *queuey.PublishInfo) func(error) {
		if p.Op == queuey.OpRetry {
			mu.Lock()
			trace.Backoffs[byID[p.JobID]] = append(trace.Backoffs[byID[p.JobID]], p.Delay)
			mu.Unlock()
		}
		return nil
	}}
	clocktest.Run(t, flakySet, opts, func(t *testing.T, h *clocktest.Harness) {
		seed = h.Seed
		if err := queuey.Handle(h.Worker, func(context.Context, flaky, queuey.JobContext) error {
			return errors.New("upstream down")
		}); err != nil {
			t.Fatal(err)
		}
		for n := 1; n <= 3; n++ {
			id, err := h.Producer.Enqueue(t.Context(), flaky{N: n})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			byID[id] = n
			mu.Unlock()
		}
		h.Advance(time.Minute)
		for _, r := range h.Log.Runs() {
			n := byID[r.JobID]
			trace.Times[n] = append(trace.Times[n], r.At.Sub(clocktest.Epoch))
		}
		if then != nil {
			then(t, trace)
		}
	})
	return trace, seed
}

// With a seed, ExponentialRetries(3)'s jitter is the same in every run:
// the backoffs to the nanosecond, and so the run times. With seed 2 the
// jobs' third runs come at 2 s, 3 s and 2 s; with the global source, each
// was 2 s in some runs and 3 s in others.
func TestSeedFixesEveryRunTime(t *testing.T) {
	first, seed := runFlaky(t, &clocktest.Options{Seed: 2}, nil)
	if seed != 2 {
		t.Errorf("Harness.Seed: got %d, want 2", seed)
	}
	want := map[int][]time.Duration{
		1: {0, time.Second, 2 * time.Second},
		2: {0, time.Second, 3 * time.Second},
		3: {0, time.Second, 2 * time.Second},
	}
	if !reflect.DeepEqual(first.Times, want) {
		t.Errorf("run times with seed 2: got %v, want %v (backoffs drawn: %v)", first.Times, want, first.Backoffs)
	}
	second, _ := runFlaky(t, &clocktest.Options{Seed: 2}, nil)
	if !reflect.DeepEqual(first, second) {
		t.Errorf("two runs with seed 2 differ:\n%v\n%v", first, second)
	}
	t.Logf("seed 2: run times %v, backoffs %v", first.Times, first.Backoffs)
}

// refusingHolds refuses the first four holds, as a broker refusing a hold
// queue's declaration would; it records when each was tried.
type refusingHolds struct {
	*memory.Backend
	now   func() time.Time
	mu    sync.Mutex
	tries []time.Duration // offsets from Epoch
}

func (r *refusingHolds) Hold(ctx context.Context, msg broker.Message, ttl time.Duration) error {
	r.mu.Lock()
	r.tries = append(r.tries, r.now().Sub(clocktest.Epoch))
	n := len(r.tries)
	r.mu.Unlock()
	if n <= 4 {
		return errors.New("hold queue refused")
	}
	return r.Backend.Hold(ctx, msg, ttl)
}

// The republish backoff of a refused hold (RepublishDelay, doubling,
// jittered between half and all of it) is drawn from the seeded source
// too: the same seed, the same tries at the same times.
func TestSeedFixesRepublishBackoffs(t *testing.T) {
	run := func() []time.Duration {
		var r *refusingHolds
		opts := &clocktest.Options{Seed: 4, WrapBackend: func(b *memory.Backend) broker.Backend {
			r = &refusingHolds{Backend: b}
			return r
		}}
		clocktest.Run(t, set, opts, func(t *testing.T, h *clocktest.Harness) {
			r.now = h.Clock.Now
			if err := queuey.Handle(h.Worker, func(context.Context, ping, queuey.JobContext) error {
				return queuey.Defer(time.Minute, "later")
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.Producer.Enqueue(t.Context(), ping{}); err != nil {
				t.Fatal(err)
			}
			h.WaitFor("the fifth try", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.tries) == 5 })
		})
		return r.tries
	}
	first, second := run(), run()
	if !slices.Equal(first, second) {
		t.Errorf("two runs with seed 4 tried the hold at different times:\n%v\n%v", first, second)
	}
	for i := 1; i < len(first); i++ { // waits of 1, 2, 4, 8 s, jittered to between half and all
		wait, full := first[i]-first[i-1], time.Second<<(i-1)
		if wait < full/2 || wait > full {
			t.Errorf("wait before try %d: %v, want between %v and %v", i+1, wait, full/2, full)
		}
	}
	t.Logf("seed 4: hold tried at %v", first)
}

// With Options.Seed 0, the seed comes from QUEUEY_SEED.
func TestSeedComesFromTheEnvironment(t *testing.T) {
	t.Setenv(clocktest.SeedEnv, "42")
	clocktest.Run(t, set, nil, func(t *testing.T, h *clocktest.Harness) {
		if h.Seed != 42 {
			t.Errorf("Harness.Seed with %s=42: got %d", clocktest.SeedEnv, h.Seed)
		}
	})
}

// seedLine is the line a failed test logs.
var seedLine = regexp.MustCompile(`clocktest: seed (\d+); rerun with QUEUEY_SEED=(\d+)`)

// A failed test logs its seed, and rerun with it, makes the same random
// choices: the child below, on a random seed, fails and logs its seed and
// its jitter; run again with QUEUEY_SEED set to that seed, it logs the
// same.
func TestAFailedTestLogsItsSeedToRerunWith(t *testing.T) {
	out, _, err := runChild(t, "TestChildFailsAfterJitter")
	if err == nil {
		t.Fatalf("the child passed; want it failed:\n%s", out)
	}
	m := seedLine.FindStringSubmatch(out)
	if m == nil || m[1] != m[2] {
		t.Fatalf("no seed line (%v) in the child's output:\n%s", seedLine, out)
	}
	replay, _, _ := runChild(t, "TestChildFailsAfterJitter", clocktest.SeedEnv+"="+m[1])
	if got, want := jitterLine(replay), jitterLine(out); got == "" || got != want {
		t.Errorf("rerun with %s=%s: jitter %q, first run %q", clocktest.SeedEnv, m[1], got, want)
	}
	if !strings.Contains(replay, m[0]) {
		t.Errorf("the rerun did not log %q:\n%s", m[0], replay)
	}
	t.Logf("first run and rerun with seed %s: %s", m[1], jitterLine(out))
}

// A failed test whose seed is fixed says so, without a rerun line: the
// environment would not change it.
func TestAFailedTestLogsItsFixedSeed(t *testing.T) {
	out, _, err := runChild(t, "TestChildFailsWithAFixedSeed")
	if err == nil || !strings.Contains(out, "clocktest: seed 7 (Options.Seed)") || strings.Contains(out, "rerun with") {
		t.Errorf("want a failure that logs %q and no rerun line; got %v:\n%s", "clocktest: seed 7 (Options.Seed)", err, out)
	}
}

// TestChildFailsWithAFixedSeed is TestAFailedTestLogsItsFixedSeed's
// child: it fails on purpose.
func TestChildFailsWithAFixedSeed(t *testing.T) {
	childOnly(t)
	clocktest.Run(t, set, &clocktest.Options{Seed: 7}, func(t *testing.T, h *clocktest.Harness) {
		t.Error("failing on purpose")
	})
}

// jitterLine is the line of the child's output that says its jitter.
func jitterLine(out string) string {
	for line := range strings.Lines(out) {
		if _, after, ok := strings.Cut(line, "jitter: "); ok {
			return strings.TrimSpace(after)
		}
	}
	return ""
}

// TestChildFailsAfterJitter is TestAFailedTestLogsItsSeedToRerunWith's
// child: it fails on purpose.
func TestChildFailsAfterJitter(t *testing.T) {
	childOnly(t)
	runFlaky(t, &clocktest.Options{}, func(t *testing.T, trace jitterTrace) {
		var parts []string
		for _, n := range slices.Sorted(maps.Keys(trace.Backoffs)) {
			parts = append(parts, fmt.Sprintf("job %d %v", n, trace.Backoffs[n]))
		}
		t.Logf("jitter: %s", strings.Join(parts, "; "))
		t.Errorf("failing on purpose (%s=%q)", clocktest.SeedEnv, os.Getenv(clocktest.SeedEnv))
	})
}
