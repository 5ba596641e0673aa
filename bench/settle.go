package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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

// settleResult is one run of scenario 8: first runs settled/s, and the CPU
// time per job the broker and this process spent meanwhile.
type settleResult struct{ rate, brokerUs, selfUs float64 }

// settleSeries is a run set's results, run by run.
type settleSeries struct{ rate, broker, self series }

func (s *settleSeries) add(r settleResult) {
	s.rate, s.broker, s.self = append(s.rate, r.rate), append(s.broker, r.brokerUs), append(s.self, r.selfUs)
}

// firstDelivery starts a timed run of scenario 8 at its first delivery,
// queuey's and raw amqp091's alike: what comes before (queuey's worker
// declares its queues and opens its channels as it starts; raw's rig has
// done so before its run) is not settling.
type firstDelivery struct {
	once sync.Once
	c    chan struct{}
}

func newFirstDelivery() *firstDelivery { return &firstDelivery{c: make(chan struct{})} }

// seen marks a delivery; the first one starts the run.
func (f *firstDelivery) seen() { f.once.Do(func() { close(f.c) }) }

// wait waits for the first delivery and returns when it came and the CPU
// times read then.
func (f *firstDelivery) wait() (time.Time, cpuTimes, error) {
	select {
	case <-f.c:
		return time.Now(), readCPU(), nil
	case <-time.After(time.Minute):
		return time.Time{}, cpuTimes{}, errors.New("no delivery in a minute")
	}
}

// settled is the result of n jobs settled since start, cpu being the CPU
// times read then.
func settled(n int, start time.Time, cpu cpuTimes) settleResult {
	r := settleResult{rate: float64(n) / time.Since(start).Seconds()}
	r.brokerUs, r.selfUs = cpu.perJob(n)
	return r
}

// libSettle enqueues n jobs of mode, then starts one worker and returns the
// jobs/s at which their first runs are settled (acked, or held again and
// then acked): the rate of the settling side, hold actor included.
func libSettle(ctx context.Context, cfg config, mode string) (settleResult, error) {
	var count atomic.Int64
	done, first := make(chan struct{}), newFirstDelivery()
	hooks := &queuey.Hooks{Deliver: func(ctx context.Context, info *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		if info.Job.Kind != "settle" {
			return ctx, nil
		}
		first.seen()
		return ctx, func(queuey.Outcome) {
			if count.Add(1) == int64(cfg.settleN) {
				close(done)
			}
		}
	}}
	r, err := newLibRig(ctx, cfg, "settle-"+mode, hooks, func(r *libRig) error { return queuey.Handle(r.worker, handleSettle) })
	if err != nil {
		return settleResult{}, err
	}
	defer deleteQueues(cfg.amqpURL, broker.HoldQueueName(r.queue, settleWait))
	defer r.close()
	err = enqueueAll(ctx, cfg.publishers, cfg.settleN, func() error {
		_, err := r.producer.Enqueue(ctx, settleJob{Mode: mode, Pad: r.pad})
		return err
	})
	if err != nil {
		return settleResult{}, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop, r.ran = stop, make(chan error, 1)
	go func() { r.ran <- r.worker.Run(runCtx) }()
	start, cpu, err := first.wait()
	if err != nil {
		return settleResult{}, fmt.Errorf("%s: %w", mode, err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return settleResult{}, fmt.Errorf("%s: %d of %d first runs settled after 5 minutes", mode, count.Load(), cfg.settleN)
	}
	return settled(cfg.settleN, start, cpu), r.close()
}

// scenarioSettle is scenario 8: N jobs that each defer once, and N that
// each fail once and retry, against N that succeed, through one worker,
// and against raw amqp091-go doing the same work, at each prefetch of
// -settle-prefetch: how much the settling of a job costs.
func scenarioSettle(cfg config) ([]row, error) {
	var rows []row
	for _, p := range cfg.settlePrefetch {
		c := cfg
		c.prefetch = p
		r, err := settleAt(c)
		if err != nil {
			return rows, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// settleAt is scenario 8 at cfg's prefetch: the five run sets in turn,
// in the other order every second round.
func settleAt(cfg config) ([]row, error) {
	ctx := context.Background()
	var ok, deferred, retried, rawOK, rawHeld settleSeries
	runs := []struct {
		name string
		into *settleSeries
		run  func() (settleResult, error)
	}{
		{"succeed", &ok, func() (settleResult, error) { return libSettle(ctx, cfg, "succeed") }},
		{"defer", &deferred, func() (settleResult, error) { return libSettle(ctx, cfg, "defer") }},
		{"retry", &retried, func() (settleResult, error) { return libSettle(ctx, cfg, "retry") }},
		{"raw ack", &rawOK, func() (settleResult, error) { return rawSettle(cfg, false) }},
		{"raw republish", &rawHeld, func() (settleResult, error) { return rawSettle(cfg, true) }},
	}
	for round := range cfg.count {
		for i := range runs {
			r := runs[i]
			if round%2 == 1 {
				r = runs[len(runs)-1-i]
			}
			var v settleResult
			var err error
			pprof.Do(ctx, pprof.Labels("run", r.name), func(context.Context) { v, err = r.run() })
			if err != nil {
				return nil, wrap(r.name, err)
			}
			r.into.add(v)
		}
	}
	name := fmt.Sprintf("8 settle %d jobs, prefetch %d", cfg.settleN, cfg.prefetch)
	return []row{
		settleRow(name, "first runs settled/s: defer once vs succeed", deferred.rate, ok.rate, 0.8, false),
		settleRow(name, "first runs settled/s: fail once (retry) vs succeed", retried.rate, ok.rate, 0.8, false),
		settleRow(name, "raw amqp091: republish+confirm+ack vs ack (the broker's ceiling)", rawHeld.rate, rawOK.rate, 0, false),
		settleRow(name, "defer once: queuey vs raw republish", deferred.rate, rawHeld.rate, 0.9, true),
		settleRow(name, "fail once (retry): queuey vs raw republish", retried.rate, rawHeld.rate, 0.9, false),
		settleRow(name, "succeed: queuey vs raw ack", ok.rate, rawOK.rate, 0.9, false),
		infoRow(cpuRow(name, "defer once: broker CPU µs/job, queuey vs raw republish", deferred.broker, rawHeld.broker, 0)),
		infoRow(cpuRow(name, "defer once: Go CPU µs/job, queuey vs raw republish", deferred.self, rawHeld.self, 0)),
		infoRow(cpuRow(name, "succeed: broker CPU µs/job, queuey vs raw ack", ok.broker, rawOK.broker, 0)),
		infoRow(cpuRow(name, "succeed: Go CPU µs/job, queuey vs raw ack", ok.self, rawOK.self, 0)),
	}, nil
}

// settleRow is one row of scenario 8: lib against base, run by run, with
// a goal of at least min (none when 0).
func settleRow(name, metric string, lib, base series, min float64, headline bool) row {
	rs := ratios(lib, base)
	r := row{scenario: name, metric: metric, lib: rate(lib.median()), base: rate(base.median()),
		ratio: ratioStr(rs.median()), spread: rs.spread(), headline: headline}
	if min > 0 {
		r.goal, r.result = fmt.Sprintf("≥ %g", min), passIf(rs.median() >= min)
	}
	return r
}

// rawSettle is scenario 8's baseline in plain amqp091-go: n messages on a
// queue declared as queuey's, then one consumer with the same prefetch
// that acks each (republish false) or first publishes it into a hold queue
// declared as queuey's and acks it once that publish is confirmed, with
// as many confirms in flight as deliveries. It returns deliveries
// settled/s and the CPU they cost.
func rawSettle(cfg config, republish bool) (settleResult, error) {
	r, err := newRawRig(cfg, "settle-raw", false)
	if err != nil {
		return settleResult{}, err
	}
	defer r.close()
	hold := broker.HoldQueueName(r.queue, settleWait)
	defer deleteQueues(cfg.amqpURL, hold)
	spec := broker.QueueSpec{Name: r.queue, MaxPriority: maxPriority, Durable: true}
	if _, err := r.w.ch.QueueDeclare(hold, true, false, false, false, amqp.Table(broker.HoldQueueArgs(spec.Name, settleWait))); err != nil {
		return settleResult{}, err
	}
	for range cfg.settleN {
		if err := r.w.publish(r.queue, rawPublishing(jsonBody(time.Now().UnixNano(), bodySize))); err != nil {
			return settleResult{}, err
		}
	}
	if err := r.w.drain(); err != nil {
		return settleResult{}, err
	}
	pub, err := r.conn.Channel()
	if err != nil {
		return settleResult{}, err
	}
	if err := pub.Confirm(false); err != nil {
		return settleResult{}, err
	}
	if r.cch, err = r.conn.Channel(); err != nil {
		return settleResult{}, err
	}
	if err := r.cch.Qos(cfg.prefetch, 0, false); err != nil {
		return settleResult{}, err
	}
	r.consumed = make(chan struct{})
	first := newFirstDelivery()
	deliveries, err := r.cch.Consume(r.queue, "", false, false, false, false, nil)
	if err != nil {
		close(r.consumed)
		return settleResult{}, err
	}
	var acked atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(r.consumed)
		for d := range deliveries {
			first.seen()
			settleRaw(pub, hold, d, republish, func() {
				if acked.Add(1) == int64(cfg.settleN) {
					close(done)
				}
			})
		}
	}()
	start, cpu, err := first.wait()
	if err != nil {
		return settleResult{}, fmt.Errorf("raw: %w", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return settleResult{}, fmt.Errorf("raw: %d of %d settled after 5 minutes", acked.Load(), cfg.settleN)
	}
	return settled(cfg.settleN, start, cpu), nil
}

// settleRaw acks d, after publishing it into hold and waiting (on a
// goroutine of its own) for the confirm when republish is set.
func settleRaw(pub *amqp.Channel, hold string, d amqp.Delivery, republish bool, acked func()) {
	if !republish {
		_ = d.Ack(false)
		acked()
		return
	}
	p := rawPublishing(d.Body)
	p.Priority = maxPriority
	c, err := pub.PublishWithDeferredConfirm("", hold, true, false, p)
	if err != nil {
		_ = d.Nack(false, true)
		return
	}
	go func() {
		if ok := c.Wait(); ok {
			_ = d.Ack(false)
			acked()
		}
	}()
}
