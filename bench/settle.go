package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
)

// settleJob is scenario 8's job: on its first run it succeeds, defers or
// fails, as Mode says.
type settleJob struct {
	Mode string `json:"mode"`
	Pad  string `json:"pad"`
}

func (settleJob) Kind() string        { return "settle" }
func (settleJob) Queue() queuey.Queue { return queuey.Queue{Name: "work"} }

// settleWait is how long a deferral or retry of scenario 8 waits: longer
// than a run, so that no job comes back while its first runs are timed.
const settleWait = 30 * time.Second

// RetryPolicy makes a failure wait settleWait.
func (settleJob) RetryPolicy() queuey.RetryPolicy {
	return queuey.RetryPolicy{MaxAttempts: 2, Backoff: queuey.FixedBackoff(settleWait)}
}

// handleSettle is scenario 8's handler.
func handleSettle(_ context.Context, j settleJob, jc queuey.JobContext) error {
	switch {
	case j.Mode == "defer" && jc.Deferrals == 0:
		return queuey.Defer(settleWait, "bench")
	case j.Mode == "retry" && jc.Attempt == 1:
		return errors.New("bench failure")
	}
	return nil
}

// libSettle enqueues n jobs of mode, then starts one worker and returns the
// jobs/s at which their first runs are settled (acked, or held again and
// then acked): the rate of the settling side, hold actor included.
func libSettle(ctx context.Context, cfg config, mode string) (float64, error) {
	var settled atomic.Int64
	done := make(chan struct{})
	hooks := &queuey.Hooks{Deliver: func(ctx context.Context, info *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		if info.Job.Kind != "settle" {
			return ctx, nil
		}
		return ctx, func(queuey.Outcome) {
			if settled.Add(1) == int64(cfg.settleN) {
				close(done)
			}
		}
	}}
	r, err := newLibRig(ctx, cfg, "settle-"+mode, hooks, func(r *libRig) error { return queuey.Handle(r.worker, handleSettle) })
	if err != nil {
		return 0, err
	}
	defer deleteQueues(cfg.amqpURL, broker.HoldQueueName(r.queue, settleWait))
	defer r.close()
	err = enqueueAll(ctx, cfg.publishers, cfg.settleN, func() error {
		_, err := r.producer.Enqueue(ctx, settleJob{Mode: mode, Pad: r.pad})
		return err
	})
	if err != nil {
		return 0, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop, r.ran = stop, make(chan error, 1)
	start := time.Now()
	go func() { r.ran <- r.worker.Run(runCtx) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("%s: %d of %d first runs settled after 5 minutes", mode, settled.Load(), cfg.settleN)
	}
	return float64(cfg.settleN) / time.Since(start).Seconds(), r.close()
}

// scenarioSettle is scenario 8: N jobs that each defer once, and N that
// each fail once and retry, against N that succeed, through one worker:
// how much the hold actor's publishes cost the settling of a job.
func scenarioSettle(cfg config) ([]row, error) {
	ctx := context.Background()
	var ok, deferred, retried series
	for round := range cfg.count {
		modes := []string{"succeed", "defer", "retry"}
		if round%2 == 1 {
			modes = []string{"retry", "defer", "succeed"}
		}
		for _, m := range modes {
			rate, err := libSettle(ctx, cfg, m)
			if err != nil {
				return nil, wrap(m, err)
			}
			switch m {
			case "succeed":
				ok = append(ok, rate)
			case "defer":
				deferred = append(deferred, rate)
			default:
				retried = append(retried, rate)
			}
		}
	}
	name := fmt.Sprintf("8 settle %d jobs, prefetch %d", cfg.settleN, cfg.prefetch)
	dr, rr := ratios(deferred, ok), ratios(retried, ok)
	return []row{
		{scenario: name, metric: "first runs settled/s: defer once vs succeed", lib: rate(deferred.median()), base: rate(ok.median()),
			ratio: ratioStr(dr.median()), goal: "≥ 0.8", result: passIf(dr.median() >= 0.8), spread: dr.spread()},
		{scenario: name, metric: "first runs settled/s: fail once (retry) vs succeed", lib: rate(retried.median()), base: rate(ok.median()),
			ratio: ratioStr(rr.median()), goal: "≥ 0.8", result: passIf(rr.median() >= 0.8), spread: rr.spread()},
	}, nil
}
