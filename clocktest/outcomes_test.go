package clocktest_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/clocktest"
)

// A job that defers once and then succeeds has two outcomes, in order;
// Await waits for them, and gives up with its ctx.
func TestOutcomesRecordsEachDeliverysOutcome(t *testing.T) {
	var seen clocktest.Outcomes
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: seen.Hooks()}}
	clocktest.Run(t, set, opts, func(t *testing.T, h *clocktest.Harness) {
		deferred := false
		if err := queuey.Handle(h.Worker, func(context.Context, ping, queuey.JobContext) error {
			if !deferred {
				deferred = true
				return queuey.Defer(time.Minute, "later")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		id, err := h.Producer.Enqueue(t.Context(), ping{})
		if err != nil {
			t.Fatal(err)
		}
		h.Advance(time.Second)
		short, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if got, err := seen.Await(short, id, 2); !errors.Is(err, context.DeadlineExceeded) || len(got) != 1 {
			t.Fatalf("Await before the deferral is over: %v, %v; want one outcome and the deadline", got, err)
		}
		h.Advance(time.Minute)
		got, err := seen.Await(t.Context(), id, 2)
		want := []queuey.Result{queuey.Deferred, queuey.Succeeded}
		if err != nil || !slices.Equal(got, want) || !slices.Equal(seen.Of(id), want) {
			t.Fatalf("outcomes %v (%v), want %v", got, err, want)
		}
	})
}
