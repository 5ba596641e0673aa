package main

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stamp is the elapsed-time prefix of a tour line.
var stamp = regexp.MustCompile(`^\s*\d+\.\d\ds\s+`)

// tourLines runs the tour and returns its output lines, without their time
// stamps and with runs of spaces collapsed, so that only the order and the
// content are compared, never the timing.
func tourLines(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	var lines []string
	for l := range strings.Lines(out.String()) {
		lines = append(lines, strings.Join(strings.Fields(stamp.ReplaceAllString(l, "")), " "))
	}
	return lines
}

func TestTour(t *testing.T) {
	lines := tourLines(t)

	t.Run("the deferred call overtakes the backlog", func(t *testing.T) {
		// The API queue hands out one job at a time, so its run order is
		// fixed: the call, the report that was running when it came back,
		// the call again at top priority with the same attempt, the rest.
		var got []string
		for _, l := range lines {
			if strings.HasPrefix(l, "run call_api") || strings.HasPrefix(l, "run report") {
				got = append(got, l)
			}
		}
		want := []string{
			"run call_api attempt 1, deferrals 0, priority 0",
			"run report 1 attempt 1, deferrals 0, priority 0",
			"run call_api attempt 1, deferrals 1, priority 10",
			"run report 2 attempt 1, deferrals 0, priority 0",
			"run report 3 attempt 1, deferrals 0, priority 0",
			"run report 4 attempt 1, deferrals 0, priority 0",
			"run report 5 attempt 1, deferrals 0, priority 0",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("API queue runs (-want +got):\n%s", diff)
		}
		inOrder(t, lines,
			"-> call_api deferred for 1s (rate limited (429)): held, then back ahead of the backlog; no attempt spent",
			"run call_api attempt 1, deferrals 1, priority 10",
		)
	})

	t.Run("a failed attempt is retried", func(t *testing.T) {
		inOrder(t, lines,
			"run sync attempt 1, deferrals 0, priority 0",
			"-> sync failed (connection reset by peer): retried after the backoff, attempt 2 of 3",
			"run sync attempt 2, deferrals 0, priority 0",
			"-> sync ok: acked",
		)
	})

	t.Run("a fatal failure is dead-lettered with its reason", func(t *testing.T) {
		inOrder(t, lines,
			`-> send_email fatal (invalid address "ada@"): dead-lettered at once`,
			`dead letter on quickstart.jobs: send_email (attempt 1): fatal error: invalid address "ada@"`,
		)
	})

	t.Run("summary", func(t *testing.T) {
		inOrder(t, lines,
			"-> greet ok: acked",
			"summary",
			// Acks count runs: sync's first run was acked once its retry was held.
			"quickstart.jobs: 4 deliveries acked, 0 pending",
			"quickstart.api: 7 deliveries acked, 0 pending",
			"hold queues used: quickstart.api.deferred.1000 (1), quickstart.jobs.deferred.200 (1)",
		)
		if last := lines[len(lines)-1]; !strings.HasPrefix(last, "done in ") {
			t.Errorf("last line = %q, want done in ...", last)
		}
	})
}

// inOrder checks that lines holds each of want, in that order.
func inOrder(t *testing.T, lines []string, want ...string) {
	t.Helper()
	from := 0
	for _, w := range want {
		i := slices.Index(lines[from:], w)
		if i < 0 {
			t.Errorf("no line %q after line %d", w, from)
			return
		}
		from += i + 1
	}
}

func TestInterrupted(t *testing.T) {
	// An interrupt mid-tour stops the worker gracefully and reports it.
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	var out strings.Builder
	err := run(ctx, &out)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("run = %v, want an interrupted error\noutput:\n%s", err, out.String())
	}
}
