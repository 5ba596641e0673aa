package queuey_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

// atOnce counts the calls of run in progress and the most there were.
type atOnce struct{ running, peak atomic.Int32 }

func (a *atOnce) run(f func() error) error {
	n := a.running.Add(1)
	defer a.running.Add(-1)
	for {
		p := a.peak.Load()
		if n <= p || a.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return f()
}

// The cap on running handlers holds, and is reached, whether the queues'
// handler pools (min(prefetch, concurrency) each: 2+1+1, 4+1+1, 4+1+1)
// could exceed it (Concurrency 2 and 5) or not (6, the default outside
// clocktest).
func TestConcurrencyIsCapped(t *testing.T) {
	for _, c := range []struct {
		concurrency int
		want        int32
	}{{2, 2}, {5, 5}, {6, 6}} {
		t.Run(fmt.Sprintf("concurrency=%d", c.concurrency), func(t *testing.T) {
			var at atOnce
			count := at.run
			opts := &clocktest.Options{Worker: queuey.WorkerConfig{Concurrency: c.concurrency}}
			clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, j alphaJob, jc queuey.JobContext) error {
					return count(func() error { return j.run(ctx, h.Clock, jc) })
				}))
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error {
					return count(func() error { return j.run(ctx, h.Clock, jc) })
				}))
				must(t, queuey.Handle(h.Worker, func(ctx context.Context, j gammaJob, jc queuey.JobContext) error {
					return count(func() error { return j.run(ctx, h.Clock, jc) })
				}))
				block := plan{Block: time.Second}
				for range 8 {
					mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{block}))
					mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{block}))
					mustID(t)(h.Producer.Enqueue(t.Context(), gammaJob{block}))
				}
				h.Advance(30 * time.Second)
				if h.Log.Len() != 24 || at.peak.Load() != c.want {
					t.Errorf("got %d runs with at most %d at once, want 24 with at most %d", h.Log.Len(), at.peak.Load(), c.want)
				}
			})
		})
	}
}

func TestDefaultConcurrencyIsTheSumOfPrefetch(t *testing.T) {
	w, err := queuey.NewWorker(memory.New(nil), app, nil)
	must(t, err)
	if got := w.Concurrency(); got != 4+1+1 {
		t.Errorf("got %d, want 6 (alpha 4 + beta 1 + gamma 1)", got)
	}
	w, err = queuey.NewWorker(memory.New(nil), app, &queuey.WorkerConfig{Queues: []string{"alpha", "alpha"}})
	must(t, err)
	if got := w.Concurrency(); got != 4 {
		t.Errorf("one queue named twice: got %d, want 4", got)
	}
}
