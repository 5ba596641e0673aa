package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/queuey-go/queuey/examples/internal/tourtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestTour(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	lines := tourtest.Lines(out.String())

	// What every backend shows: the deferral, the retry, the dead letter.
	tourtest.Check(t, lines, "quickstart")

	t.Run("summary", func(t *testing.T) {
		tourtest.InOrder(t, lines,
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
