package queuey_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/queuey-go/queuey/clocktest"
)

// A worker's per-job lines are at the levels of ARCHITECTURE.md's table
// ("Logging"): a success and the start of a run are DEBUG, so that a busy
// worker's log is its trouble; a deferral is INFO, a retry WARN, a dead
// letter ERROR.
func TestPerJobLinesAreLoggedAtTheirLevels(t *testing.T) {
	logs := &logRecorder{}
	clocktest.Run(t, app, &clocktest.Options{Logger: slog.New(logs)}, func(t *testing.T, h *clocktest.Harness) {
		ctx, id := t.Context(), mustID(t)
		handleAll(t, h.Worker, h.Clock)
		var fine []string
		for _, name := range []string{"a", "b", "c"} {
			fine = append(fine, id(h.Producer.Enqueue(ctx, gammaJob{named(name)})))
		}
		id(h.Producer.Enqueue(ctx, gammaJob{deferring(1, time.Second)}))
		id(h.Producer.Enqueue(ctx, alphaJob{plan{Name: "flaky", Fail: 1}}))
		id(h.Producer.Enqueue(ctx, betaJob{plan{Name: "doomed", Fatal: true}}))
		h.Advance(time.Minute)
		if n := h.Log.Len(); n != 8 {
			t.Fatalf("runs: got %d, want 8", n)
		}
		logs.mu.Lock()
		for _, l := range logs.lines {
			for _, job := range fine {
				if l.Attrs["job_id"] == job && l.Level >= slog.LevelInfo {
					t.Errorf("a job that went fine logged %q at %v, want nothing above DEBUG", l.Msg, l.Level)
				}
			}
		}
		logs.mu.Unlock()
		for _, want := range []struct {
			msg   string
			level slog.Level
		}{
			{"running job", slog.LevelDebug},
			{"job succeeded", slog.LevelDebug},
			{"job deferred", slog.LevelInfo},
			{"job failed; retrying", slog.LevelWarn},
			{"job failed fatally", slog.LevelError},
		} {
			if lvl, ok := logs.levelOf(want.msg); !ok || lvl != want.level {
				t.Errorf("%q logged at %v (found %t), want %v", want.msg, lvl, ok, want.level)
			}
		}
	})
}
