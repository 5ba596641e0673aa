// Package tourtest checks the output of the quick-start tour
// (examples/internal/tour), so that every example that runs it asserts the
// same things, whatever its backend.
package tourtest

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// stamp is the elapsed-time prefix of a tour line.
var stamp = regexp.MustCompile(`^\s*\d+\.\d\ds\s+`)

// Lines splits the tour's output into lines, without their time stamps and
// with runs of spaces collapsed, so that only the order and the content are
// compared, never the timing.
func Lines(out string) []string {
	var lines []string
	for l := range strings.Lines(out) {
		lines = append(lines, strings.Join(strings.Fields(stamp.ReplaceAllString(l, "")), " "))
	}
	return lines
}

// Check asserts what the tour shows on any backend: the deferred call
// overtakes the backlog, a failed attempt is retried, and a fatal failure is
// dead-lettered with its reason. prefix is the tour's queue-name prefix.
func Check(t *testing.T, lines []string, prefix string) {
	t.Helper()
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
		InOrder(t, lines,
			"-> call_api deferred for 1s (rate limited (429)): held, then back ahead of the backlog; no attempt spent",
			"run call_api attempt 1, deferrals 1, priority 10",
		)
	})

	t.Run("a failed attempt is retried", func(t *testing.T) {
		InOrder(t, lines,
			"run sync attempt 1, deferrals 0, priority 0",
			"-> sync failed (connection reset by peer): retried after the backoff, attempt 2 of 3",
			"run sync attempt 2, deferrals 0, priority 0",
			"-> sync ok: acked",
		)
	})

	t.Run("a fatal failure is dead-lettered with its reason", func(t *testing.T) {
		InOrder(t, lines,
			`-> send_email fatal (invalid address "ada@"): dead-lettered at once`,
			"summary",
			prefix+".jobs.dead: 1 left",
			`dead letter on `+prefix+`.jobs: send_email (attempt 1): fatal error: invalid address "ada@"`,
			prefix+".api.dead: 0 left",
		)
	})
}

// InOrder checks that lines holds each of want, in that order.
func InOrder(t *testing.T, lines []string, want ...string) {
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
