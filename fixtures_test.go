package queuey_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/goleak"

	"github.com/queuey-go/queuey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fixtures follow the Rust crate's: three queues with different retry
// and priority settings.
var (
	alpha = queuey.Queue{Name: "alpha", Prefetch: 4, Retry: &queuey.RetryPolicy{MaxAttempts: 3, Backoff: queuey.FixedBackoff(time.Second)}}
	beta  = queuey.Queue{Name: "beta", Prefetch: 1}
	gamma = queuey.Queue{Name: "gamma", Prefetch: 1, MaxPriority: queuey.NoPriorities}
	app   = queuey.QueueSet{Prefix: "test", Queues: []queuey.Queue{alpha, beta, gamma}}
)

// plan says what a test job's handler does on each run.
type plan struct {
	Name     string        `json:"name"`
	Fail     int           `json:"fail,omitempty"`      // fail while Attempt <= Fail
	Defers   int           `json:"defers,omitempty"`    // defer while Deferrals < Defers
	DeferFor time.Duration `json:"defer_for,omitempty"` // how long each deferral asks for
	Fatal    bool          `json:"fatal,omitempty"`
	Panic    int           `json:"panic,omitempty"` // panic while Attempt <= Panic
	Block    time.Duration `json:"block,omitempty"` // wait this long on the clock (or until ctx ends)
}

type alphaJob struct{ plan }
type betaJob struct{ plan }
type gammaJob struct{ plan }
type orphanJob struct{ plan } // on alpha; no handler is ever registered

func (alphaJob) Kind() string               { return "alpha_job" }
func (alphaJob) Queue() queuey.Queue        { return alpha }
func (betaJob) Kind() string                { return "beta_job" }
func (betaJob) Queue() queuey.Queue         { return beta }
func (gammaJob) Kind() string               { return "gamma_job" }
func (gammaJob) Queue() queuey.Queue        { return gamma }
func (orphanJob) Kind() string              { return "orphan_job" }
func (orphanJob) Queue() queuey.Queue       { return alpha }
func named(n string) plan                   { return plan{Name: n} }
func deferring(n int, d time.Duration) plan { return plan{Defers: n, DeferFor: d} }

// run carries out the plan.
func (p plan) run(ctx context.Context, c clock.Clock, jc queuey.JobContext) error {
	if p.Block > 0 {
		t := c.Timer(p.Block)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	switch {
	case jc.Attempt <= p.Panic:
		panic(fmt.Sprintf("boom on attempt %d", jc.Attempt))
	case p.Fatal:
		return queuey.Fatalf("%s cannot be done", p.Name)
	case jc.Deferrals < p.Defers:
		return queuey.Defer(p.DeferFor, "rate limited")
	case jc.Attempt <= p.Fail:
		return fmt.Errorf("%s failed on attempt %d", p.Name, jc.Attempt)
	}
	return nil
}

// runUntilIdle runs w, inside a clocktest bubble, until everything in the
// bubble waits, then stops it.
func runUntilIdle(t *testing.T, w *queuey.Worker) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	synctest.Wait()
	stop()
	must(t, <-stopped)
}

// handleAll registers the plan-driven handlers of the three queues.
func handleAll(t *testing.T, w *queuey.Worker, c clock.Clock) {
	t.Helper()
	must(t, queuey.Handle(w, func(ctx context.Context, j alphaJob, jc queuey.JobContext) error { return j.run(ctx, c, jc) }))
	must(t, queuey.Handle(w, func(ctx context.Context, j betaJob, jc queuey.JobContext) error { return j.run(ctx, c, jc) }))
	must(t, queuey.Handle(w, func(ctx context.Context, j gammaJob, jc queuey.JobContext) error { return j.run(ctx, c, jc) }))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustID(t *testing.T) func(string, error) string {
	return func(id string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
}

// logRecorder keeps the worker's log lines for assertions on their levels.
type logRecorder struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string // each attribute's value, as text
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	attrs := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, logLine{rec.Level, rec.Message, attrs})
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// levelOf returns the level of the first line with msg.
func (r *logRecorder) levelOf(msg string) (slog.Level, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		if l.Msg == msg {
			return l.Level, true
		}
	}
	return 0, false
}

// attrOf returns the attribute key of the first line with msg.
func (r *logRecorder) attrOf(msg, key string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		if l.Msg == msg {
			v, ok := l.Attrs[key]
			return v, ok
		}
	}
	return "", false
}

// worst is the highest level logged.
func (r *logRecorder) worst() slog.Level {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := slog.LevelDebug
	for _, l := range r.lines {
		w = max(w, l.Level)
	}
	return w
}

// count is the number of lines with msg at level.
func (r *logRecorder) count(msg string, level slog.Level) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lines {
		if l.Msg == msg && l.Level == level {
			n++
		}
	}
	return n
}

// countAt is the number of lines at level.
func (r *logRecorder) countAt(level slog.Level) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lines {
		n += btoi(l.Level == level)
	}
	return n
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// jsonLines are the lines of a JSON log whose attribute key is value.
func jsonLines(t *testing.T, logs []byte, key string, value any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range bytes.Lines(logs) {
		var l map[string]any
		must(t, json.Unmarshal(line, &l))
		if l[key] == value {
			out = append(out, l)
		}
	}
	return out
}
