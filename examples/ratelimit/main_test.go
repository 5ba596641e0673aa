package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/queuey-go/queuey/examples/internal/scratch/scratchtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBothModesOnMemory runs the program's two modes against an API that
// allows 5 calls a second. The prefetch (2) is below the rate, so that the
// pause has calls to save: 10 jobs make the per-job deferral waste 5 calls
// in the first second, and the pause about the prefetch. Nothing here
// depends on exact timings, only on counts and on how they relate.
func TestBothModesOnMemory(t *testing.T) {
	cfg := config{Jobs: 10, Rate: 5, Prefetch: 2, Mode: "both"}
	sum, out := runOK(t, cfg)

	if got := modeNames(sum); !slices.Equal(got, []string{"defer", "pause"}) {
		t.Fatalf("modes run = %v, want [defer pause]", got)
	}
	for _, m := range sum.Modes {
		t.Run(m.Mode, func(t *testing.T) {
			checkMode(t, cfg, m)
			checkLifecycle(t, out, m)
		})
	}

	deferred, paused := sum.Modes[0], sum.Modes[1]
	t.Logf("calls answered 429: %d with per-job Defer, %d with PauseQueue (%d limited seconds, at most %d in one)",
		deferred.Limited, paused.Limited, paused.LimitedSeconds, paused.MostInASecond)
	t.Run("the pause wastes about the prefetch per limited second", func(t *testing.T) {
		// The calls in flight when the first 429 comes are wasted: at most
		// the prefetch. On a real clock one more can be: a delivery that
		// starts just after a handler returned PauseQueue (the pausing
		// handler acks before it pauses the queue, which lets the broker
		// hand out the next delivery, and the queue actor may already hold
		// it). Seen now and then under load, so the bound checked is the
		// prefetch plus one, and a second over the prefetch is logged.
		if paused.MostInASecond > cfg.Prefetch+1 {
			t.Errorf("pause: %d calls answered 429 in one second, want at most the prefetch (%d) plus one", paused.MostInASecond, cfg.Prefetch)
		}
		if paused.Limited > (cfg.Prefetch+1)*paused.LimitedSeconds {
			t.Errorf("pause: %d calls answered 429 over %d limited seconds, want at most the prefetch (%d) plus one each",
				paused.Limited, paused.LimitedSeconds, cfg.Prefetch)
		}
		if paused.MostInASecond > cfg.Prefetch {
			runs := slices.Clone(paused.Runs)
			slices.SortFunc(runs, func(a, b runRecord) int { return cmp.Compare(a.Started, b.Started) })
			var b strings.Builder
			for _, r := range runs {
				fmt.Fprintf(&b, "  started %.4fs, answered %.4fs: job %d, deferrals %d, %d -> %s\n",
					r.Started.Seconds(), r.At.Seconds(), r.Job, r.Deferrals, r.Status, r.Returned)
			}
			t.Logf("pause: %d calls answered 429 in one second, one more than the prefetch; the runs:\n%s", paused.MostInASecond, b.String())
		}
	})
	t.Run("the pause wastes fewer calls than per-job deferrals", func(t *testing.T) {
		if deferred.Limited == 0 {
			t.Fatalf("defer: no call was answered 429; the test shows nothing")
		}
		if paused.Limited >= deferred.Limited {
			t.Errorf("calls answered 429: %d with the pause, want fewer than the %d with per-job deferrals", paused.Limited, deferred.Limited)
		}
	})
	t.Run("summary side by side", func(t *testing.T) {
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^summary\s+defer\s+pause$`),
			regexp.MustCompile(`(?m)^  jobs succeeded\s+10\s+10$`),
			regexp.MustCompile(`(?m)^  calls OK \(200\)\s+10\s+10$`),
			regexp.MustCompile(`(?m)^  calls answered 429 \(wasted\)\s+` + strconv.Itoa(deferred.Limited) + `\s+` + strconv.Itoa(paused.Limited) + `$`),
			regexp.MustCompile(`(?m)^  dead letters\s+0\s+0$`),
			regexp.MustCompile(`(?m)^  wall time\s+\d+\.\ds\s+\d+\.\ds$`),
		} {
			if !want.MatchString(out) {
				t.Errorf("the output has no line matching %s", want)
			}
		}
	})
}

// checkMode checks one mode's runs: every job went through at its first
// attempt, and each run after a deferral came back at the top priority with
// one more deferral.
func checkMode(t *testing.T, cfg config, m modeSummary) {
	t.Helper()
	if m.Succeeded != cfg.Jobs || m.OK != cfg.Jobs || m.DeadLetters != 0 {
		t.Errorf("jobs succeeded %d, calls OK %d, dead letters %d; want %d, %d, 0", m.Succeeded, m.OK, m.DeadLetters, cfg.Jobs, cfg.Jobs)
	}
	byJob := map[int][]runRecord{}
	limited := 0
	for _, r := range m.Runs {
		if r.Attempt != 1 {
			t.Errorf("job %d ran at attempt %d: a 429 must not spend an attempt", r.Job, r.Attempt)
		}
		if r.Status == http.StatusTooManyRequests {
			limited++
		}
		byJob[r.Job] = append(byJob[r.Job], r)
	}
	if limited != m.Limited {
		t.Errorf("runs answered 429: %d, but the API counted %d", limited, m.Limited)
	}
	if len(byJob) != cfg.Jobs {
		t.Errorf("%d jobs ran, want %d", len(byJob), cfg.Jobs)
	}
	for job, runs := range byJob {
		for i, r := range runs {
			last := i == len(runs)-1
			switch {
			case i == 0 && (r.Priority != 0 || r.Deferrals != 0):
				t.Errorf("job %d, first run: priority %d, deferrals %d; want 0, 0", job, r.Priority, r.Deferrals)
			case i > 0 && (r.Priority != 10 || r.Deferrals != runs[i-1].Deferrals+1):
				t.Errorf("job %d, run %d after a deferral: priority %d, deferrals %d; want 10, %d",
					job, i+1, r.Priority, r.Deferrals, runs[i-1].Deferrals+1)
			}
			if want := http.StatusTooManyRequests; !last && (r.Status != want || r.RetryAfter != time.Second) {
				t.Errorf("job %d, run %d: answered %d, Retry-After %v, then ran again; want a 429 with Retry-After 1s", job, i+1, r.Status, r.RetryAfter)
			}
			if last && r.Status != http.StatusOK {
				t.Errorf("job %d: its last run was answered %d, want 200", job, r.Status)
			}
		}
	}
}

var (
	spanLine  = regexp.MustCompile(`^(\s*(?:└─ )?)(send|process) (\S+)\s+\+\d+\.\d{3}s\s+(\S+)`)
	traceLine = regexp.MustCompile(`^  trace [0-9a-f]{32}$`)
)

// checkLifecycle checks the lifecycle printed for m: one trace, a chain
// send (enqueue) → process (deferred) → send (deferral) → ... → process
// (succeeded), each span a child of the one before, with the deferred
// event on each deferring run.
func checkLifecycle(t *testing.T, out string, m modeSummary) {
	t.Helper()
	block := lifecycleBlock(out, m.Mode)
	if len(block) == 0 {
		t.Fatalf("no lifecycle printed for mode %s:\n%s", m.Mode, out)
	}
	t.Logf("lifecycle:\n%s", strings.Join(block, "\n"))
	traces := 0
	var kinds []string
	lastIndent := -1
	for i, l := range block {
		if traceLine.MatchString(l) {
			traces++
			continue
		}
		s := spanLine.FindStringSubmatch(l)
		if s == nil {
			continue
		}
		if s[3] != m.Queue {
			t.Errorf("span %q names %s, want the work queue %s", l, s[3], m.Queue)
		}
		kinds = append(kinds, s[2]+" "+s[4])
		if indent := utf8.RuneCountInString(s[1]); indent <= lastIndent {
			t.Errorf("span %q is not a child of the span above it", l)
		} else {
			lastIndent = indent
		}
		if s[2] == "process" && s[4] == "deferred" {
			if i+1 >= len(block) || !strings.Contains(block[i+1], `event deferred: delay_ms=1000 reason="429`) {
				t.Errorf("process span %q: want a deferred event with delay_ms=1000 on the next line", l)
			}
		}
	}
	if traces != 1 {
		t.Errorf("the job's spans are in %d traces, want one", traces)
	}
	// send enqueue, then (process deferred, send deferral) once or more,
	// then process succeeded.
	ok := len(kinds) >= 4 && len(kinds)%2 == 0 && kinds[0] == "send enqueue" && kinds[len(kinds)-1] == "process succeeded"
	for i := 1; ok && i < len(kinds)-1; i += 2 {
		ok = kinds[i] == "process deferred" && kinds[i+1] == "send deferral"
	}
	if !ok {
		t.Errorf("spans %q, want send enqueue → (process deferred → send deferral)+ → process succeeded", kinds)
	}
	if m.Mode == "pause" && !strings.Contains(strings.Join(block, "\n"), "event queue_paused: paused_until=") {
		t.Errorf("pause: the deferring run has no queue_paused event")
	}
}

// lifecycleBlock returns the lines of the lifecycle printed for mode: from
// its "lifecycle of job" line to the next blank line.
func lifecycleBlock(out, mode string) []string {
	section := out[strings.Index(out, "\n== "+mode+":")+1:]
	var block []string
	in := false
	for l := range strings.Lines(section) {
		l = strings.TrimRight(l, "\n")
		switch {
		case strings.HasPrefix(l, "lifecycle of job "):
			in = true
		case in && l == "":
			return block
		}
		if in {
			block = append(block, l)
		}
	}
	return block
}

// TestRabbitMQ runs both modes on the broker at QUEUEY_AMQP_URL, or the
// local one, and checks that the queues they made are gone afterwards.
func TestRabbitMQ(t *testing.T) {
	url := cmp.Or(os.Getenv("QUEUEY_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	cfg := config{Jobs: 5, Rate: 2, Prefetch: 2, Mode: "both", URL: url}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var out, errs syncBuilder
	sum, err := run(ctx, cfg, &out, &errs)
	if err != nil {
		t.Fatalf("run: %v\n%s\nstdout:\n%s\nstderr:\n%s", err, scratchtest.NeedsBroker, out.String(), errs.String())
	}
	t.Logf("output:\n%s", out.String())
	for _, m := range sum.Modes {
		if m.Succeeded != cfg.Jobs || m.DeadLetters != 0 || m.Limited == 0 {
			t.Errorf("%s: %d jobs succeeded, %d dead letters, %d calls answered 429; want %d, 0, some",
				m.Mode, m.Succeeded, m.DeadLetters, m.Limited, cfg.Jobs)
		}
		t.Run(m.Mode, func(t *testing.T) { checkLifecycle(t, out.String(), m) })
		for _, suffix := range []string{"", ".dead", ".deferred.1000"} {
			if q := m.Queue + suffix; !slices.Contains(sum.Queues, q) {
				t.Errorf("queues made = %v, want %s among them", sum.Queues, q)
			}
		}
	}
	if !strings.Contains(out.String(), "deleted the queues made: ") {
		t.Errorf("the output does not say the queues were deleted")
	}
	scratchtest.AssertGone(t, url, sum.Queues)
}

// A job still answered 429 after five deferrals gives up: Fatalf, dead-
// lettered. Eight jobs at one call a second, all prefetched: the last
// ones are still waiting after five deferrals.
func TestAJobGivesUpAfterFiveDeferrals(t *testing.T) {
	cfg := config{Jobs: 8, Rate: 1, Prefetch: 8, Mode: "defer"}
	sum, out := runOK(t, cfg)
	m := sum.Modes[0]
	if m.DeadLetters == 0 || m.Succeeded+m.DeadLetters != cfg.Jobs {
		t.Errorf("%d succeeded, %d dead letters; want some given up, and every job one or the other", m.Succeeded, m.DeadLetters)
	}
	if got := strings.Count(out, "Fatalf: dead-lettered"); got != m.DeadLetters {
		t.Errorf("runs printed as given up: %d, want one per dead letter (%d)", got, m.DeadLetters)
	}
	for _, r := range m.Runs {
		if r.Returned == "Fatalf: dead-lettered" && r.Deferrals != maxDeferrals {
			t.Errorf("job %d gave up after %d deferrals, want %d", r.Job, r.Deferrals, maxDeferrals)
		}
	}
}

// The spans go out through OpenTelemetry's stdout exporter, as JSON on
// stderr, each publish and each run.
func TestSpansAreExportedWithTheStdoutExporter(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var out, errs syncBuilder
	cfg := config{Jobs: 3, Rate: 5, Prefetch: 2, Mode: "defer", Spans: true}
	if _, err := run(ctx, cfg, &out, &errs); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, errs.String())
	}
	dec := json.NewDecoder(strings.NewReader(errs.String()))
	names := map[string]int{}
	for dec.More() {
		var span struct{ Name string }
		if err := dec.Decode(&span); err != nil {
			t.Fatalf("stderr is not a stream of JSON spans: %v\n%s", err, errs.String())
		}
		names[strings.Fields(span.Name)[0]]++
	}
	if names["send"] != cfg.Jobs || names["process"] != cfg.Jobs {
		t.Errorf("spans exported by kind of name: %v, want %d send and %d process", names, cfg.Jobs, cfg.Jobs)
	}
	if !strings.Contains(out.String(), "every span of this run: on stderr") {
		t.Errorf("the output does not say where the spans went")
	}
}

func TestOneMode(t *testing.T) {
	// -mode pause runs the pause alone, and the summary has one column.
	sum, out := runOK(t, config{Jobs: 3, Rate: 5, Prefetch: 2, Mode: "pause"})
	if got := modeNames(sum); !slices.Equal(got, []string{"pause"}) {
		t.Fatalf("modes run = %v, want [pause]", got)
	}
	if !regexp.MustCompile(`(?m)^summary\s+pause$`).MatchString(out) {
		t.Errorf("no one-column summary in:\n%s", out)
	}
	if !strings.Contains(out, "no job was deferred: no lifecycle to show") {
		t.Errorf("3 jobs at 5 calls a second: want no deferral, and the output to say so:\n%s", out)
	}
}

func TestBadFlags(t *testing.T) {
	for _, cfg := range []config{
		{Jobs: 1, Rate: 1, Prefetch: 1, Mode: "sometimes"},
		{Jobs: 0, Rate: 1, Prefetch: 1, Mode: "both"},
		{Jobs: 1, Rate: 0, Prefetch: 1, Mode: "both"},
	} {
		if _, err := run(t.Context(), cfg, &strings.Builder{}, &strings.Builder{}); err == nil {
			t.Errorf("run(%+v) = nil error, want a usage error", cfg)
		}
	}
}

func TestTheAPI(t *testing.T) {
	// One call a second, on a clock of the test's own: a second call in
	// the same second is answered 429 with a Retry-After of whole seconds,
	// rounded up; the next second allows a call again.
	a := newAPI(1)
	t0 := a.start
	call := func(at time.Duration) (int, string) {
		a.now = func() time.Time { return t0.Add(at) }
		w := httptest.NewRecorder()
		a.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		return w.Code, w.Header().Get("Retry-After")
	}
	for _, c := range []struct {
		at         time.Duration
		status     int
		retryAfter string
	}{
		{300 * time.Millisecond, http.StatusOK, ""},
		{400 * time.Millisecond, http.StatusTooManyRequests, "1"}, // 0.6 s to wait, rounded up
		{999 * time.Millisecond, http.StatusTooManyRequests, "1"},
		{time.Second, http.StatusOK, ""},
		{2100 * time.Millisecond, http.StatusOK, ""},
		{2200 * time.Millisecond, http.StatusTooManyRequests, "1"},
	} {
		if status, ra := call(c.at); status != c.status || ra != c.retryAfter {
			t.Errorf("call at %v: %d, Retry-After %q; want %d, %q", c.at, status, ra, c.status, c.retryAfter)
		}
	}
	want := apiCounts{OK: 3, Limited: 3, LimitedSeconds: 2, MostInASecond: 2}
	if got := a.counts(); got != want {
		t.Errorf("counts = %+v, want %+v", got, want)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"1":                             time.Second,
		" 120 ":                         2 * time.Minute,
		"0":                             0,
		"Wed, 01 Jan 2025 12:00:30 GMT": 30 * time.Second,
		"Wed, 01 Jan 2025 11:00:00 GMT": 0, // in the past: now
	} {
		if got, err := parseRetryAfter(h, now); err != nil || got != want {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v", h, got, err, want)
		}
	}
	for _, h := range []string{"", "-1", "soon", "1.5"} {
		if _, err := parseRetryAfter(h, now); err == nil {
			t.Errorf("parseRetryAfter(%q) = nil error, want one", h)
		}
	}
}

// runOK runs cfg on the memory backend and fails the test on an error.
func runOK(t *testing.T, cfg config) (summary, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var out, errs syncBuilder
	sum, err := run(ctx, cfg, &out, &errs)
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errs.String())
	}
	t.Logf("output:\n%s", out.String())
	if errs.String() != "" {
		t.Logf("stderr:\n%s", errs.String())
	}
	return sum, out.String()
}

func modeNames(sum summary) []string {
	var names []string
	for _, m := range sum.Modes {
		names = append(names, m.Mode)
	}
	return names
}

// syncBuilder is a strings.Builder safe for the concurrent writes of the
// handlers and the logger.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
