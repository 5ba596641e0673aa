package queuey_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
)

// awayBackend is a backend whose queues' node is down for the first
// consumes: Consume fails with broker.ErrUnavailable while away > 0.
type awayBackend struct {
	broker.Backend
	away atomic.Int32
}

func (b *awayBackend) Consume(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	if b.away.Add(-1) >= 0 {
		return nil, broker.ErrUnavailable
	}
	return b.Backend.Consume(ctx, queue, prefetch)
}

// A queue whose node is down (a classic queue on a node a cluster lost)
// is consumed again every second until the node is back, for as long as
// that takes: the worker neither crashes nor gives the queue up (its
// supervisor would, after a few restarts), and says so once, at WARN.
func TestAQueueWhoseNodeIsDownIsConsumedOnceItIsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &awayBackend{Backend: memory.New(nil)}
		b.away.Store(30) // 30 s of a node away, many times the supervisor's intensity
		set := queuey.QueueSet{Queues: []queuey.Queue{beta}}
		p, err := queuey.NewProducer(t.Context(), b, set, nil)
		must(t, err)
		logs := &logRecorder{}
		w, err := queuey.NewWorker(b, set, &queuey.WorkerConfig{Logger: slog.New(logs)})
		must(t, err)
		ran := make(chan time.Time, 1)
		must(t, queuey.Handle(w, func(context.Context, betaJob, queuey.JobContext) error { ran <- time.Now(); return nil }))
		mustID(t)(p.Enqueue(t.Context(), betaJob{named("waits")}))
		ctx, stop := context.WithCancel(t.Context())
		stopped := make(chan error, 1)
		start := time.Now()
		go func() { stopped <- w.Run(ctx) }()
		at := <-ran
		if waited := at.Sub(start); waited < 30*time.Second || waited > 32*time.Second {
			t.Errorf("the job ran %v after the worker started, want once the node was back (30 s)", waited)
		}
		stop()
		must(t, <-stopped)
		if n := logs.count("queue is unavailable (its node is down); consuming again once it is back", slog.LevelWarn); n != 1 {
			t.Errorf("the queue's node being down was said %d times, want once", n)
		}
		if n := logs.count("queue resumed", slog.LevelInfo); n != 0 {
			t.Errorf("%d times \"queue resumed\" while no pause ended, want none", n)
		}
	})
}
