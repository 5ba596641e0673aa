package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/console"
	"github.com/queuey-go/queuey/fleet"
)

// The demo's queues and jobs: mail that is sent, an API that defers calls
// for a while, and reports whose half fail until they are dead letters.
var (
	demoMail    = queuey.Queue{Name: "mail", Retry: &queuey.RetryPolicy{MaxAttempts: 3, Backoff: queuey.FixedBackoff(2 * time.Second)}}
	demoAPI     = queuey.Queue{Name: "api"}
	demoReports = queuey.Queue{Name: "reports", Retry: &queuey.RetryPolicy{MaxAttempts: 2, Backoff: queuey.FixedBackoff(5 * time.Second)}}
	demoSet     = queuey.QueueSet{Prefix: "demo", Queues: []queuey.Queue{demoMail, demoAPI, demoReports}}
)

type demoSend struct {
	To string `json:"to"`
	N  int    `json:"n"`
}

func (demoSend) Kind() string        { return "send_mail" }
func (demoSend) Queue() queuey.Queue { return demoMail }

type demoCall struct {
	N int `json:"n"`
}

func (demoCall) Kind() string        { return "call_api" }
func (demoCall) Queue() queuey.Queue { return demoAPI }

type demoReport struct {
	N int `json:"n"`
}

func (demoReport) Kind() string        { return "build_report" }
func (demoReport) Queue() queuey.Queue { return demoReports }

// startDemo runs the demo's producer, worker, fleet agent and console on
// a memory backend, and returns the console and what stops them all.
func startDemo(ctx context.Context, logger *slog.Logger) (http.Handler, func(), error) {
	backend := memory.New(nil)
	schedule := queuey.Schedule{Name: "nightly-digest", Job: demoReport{N: -1}, Every: 10 * time.Second}
	agent, err := fleet.NewAgent(backend, demoSet, &fleet.Options{Version: "demo", Schedules: []queuey.Schedule{schedule}, Interval: 2 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	w, err := queuey.NewWorker(backend, demoSet, &queuey.WorkerConfig{Hooks: agent.Hooks(nil), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, err
	}
	demoHandlers(w)
	if err := w.AddSchedule(schedule); err != nil {
		return nil, nil, err
	}
	p, err := queuey.NewProducer(ctx, backend, demoSet, nil)
	if err != nil {
		return nil, nil, err
	}
	c, err := console.New(ctx, backend, demoSet, &console.Options{Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{w.Run, c.Run, func(ctx context.Context) error { return agent.Run(ctx, w) },
		func(ctx context.Context) error { return demoFeed(ctx, p) }} {
		wg.Go(func() { _ = run(ctx) })
	}
	return c, func() { cancel(); wg.Wait(); _ = backend.Close() }, nil
}

// demoHandlers: mail goes out, every third API call is deferred 15 s,
// odd reports fail (into the dead letters after two attempts) and every
// seventh is fatal.
func demoHandlers(w *queuey.Worker) {
	_ = queuey.Handle(w, func(ctx context.Context, j demoSend, jc queuey.JobContext) error { return nil })
	_ = queuey.Handle(w, func(ctx context.Context, j demoCall, jc queuey.JobContext) error {
		if j.N%3 == 0 && jc.Deferrals == 0 {
			return queuey.Defer(15*time.Second, "rate limited (429)")
		}
		return nil
	})
	_ = queuey.Handle(w, func(ctx context.Context, j demoReport, jc queuey.JobContext) error {
		switch {
		case j.N >= 0 && j.N%7 == 0:
			return queuey.Fatalf("report %d: template <missing> not found", j.N)
		case j.N%2 == 1:
			return errors.New("report service answered 503")
		}
		return nil
	})
}

// demoFeed enqueues a job every 300 ms until ctx ends.
func demoFeed(ctx context.Context, p *queuey.Producer) error {
	t := time.NewTicker(300 * time.Millisecond)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var job queuey.Job = demoSend{To: "user@example.com", N: n}
		switch n % 4 {
		case 1:
			job = demoCall{N: n}
		case 3:
			job = demoReport{N: n}
		}
		_, _ = p.Enqueue(ctx, job)
	}
}
