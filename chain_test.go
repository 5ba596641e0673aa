package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

// stepRun is one run of a chain's step, as a test sees it.
type stepRun struct {
	Kind        string
	At          time.Duration // since clocktest.Epoch
	Step, Steps int
	Attempt     int
	Deferrals   int
}

func stepRuns(h *clocktest.Harness, chain string) []stepRun {
	var out []stepRun
	for _, r := range h.Log.Runs() {
		if r.Chain.ID != chain {
			h.T.Errorf("run of %s in chain %q, want %q", r.Kind, r.Chain.ID, chain)
		}
		out = append(out, stepRun{Kind: r.Kind, At: r.At.Sub(clocktest.Epoch), Step: r.Chain.Step, Steps: r.Chain.Steps, Attempt: r.Attempt, Deferrals: r.Deferrals})
	}
	return out
}

// A chain of three whose first step defers 30 s and whose second fails
// once (a retry after 1 s) runs each step after the one before, at the
// exact times; a step's JobContext says where it stands.
func TestAChainRunsItsStepsInTurnThroughADeferralAndARetry(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		run := func(ctx context.Context, p plan, jc queuey.JobContext) error { return p.run(ctx, h.Clock, jc) }
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j alphaJob, jc queuey.JobContext) error { return run(ctx, j.plan, jc) }))
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error { return run(ctx, j.plan, jc) }))
		chain, err := h.Producer.EnqueueChain(t.Context(),
			alphaJob{deferring(1, 30*time.Second)},
			alphaJob{plan{Name: "two", Fail: 1}},
			betaJob{named("three")})
		must(t, err)
		h.Advance(29 * time.Second)
		if got := len(stepRuns(h, chain)); got != 1 {
			t.Fatalf("%d runs before the deferral is over, want 1", got)
		}
		h.Advance(2 * time.Second)
		want := []stepRun{
			{Kind: "alpha_job", At: 0, Step: 1, Steps: 3, Attempt: 1, Deferrals: 0},
			{Kind: "alpha_job", At: 30 * time.Second, Step: 1, Steps: 3, Attempt: 1, Deferrals: 1},
			{Kind: "alpha_job", At: 30 * time.Second, Step: 2, Steps: 3, Attempt: 1},
			{Kind: "alpha_job", At: 31 * time.Second, Step: 2, Steps: 3, Attempt: 2},
			{Kind: "beta_job", At: 31 * time.Second, Step: 3, Steps: 3, Attempt: 1},
		}
		if diff := cmp.Diff(want, stepRuns(h, chain)); diff != "" {
			t.Errorf("runs differ (-want +got):\n%s", diff)
		}
		ids := map[int]string{}
		for _, r := range h.Log.Runs() {
			if id, seen := ids[r.Chain.Step]; seen && id != r.JobID {
				t.Errorf("step %d ran as %s and %s", r.Chain.Step, id, r.JobID)
			}
			ids[r.Chain.Step] = r.JobID
		}
		if len(ids) != 3 || ids[1] == ids[2] || ids[2] == ids[3] {
			t.Errorf("steps' job ids %v, want one per step", ids)
		}
		if n := h.Backend.Pending(qAlpha) + h.Backend.Held(qAlpha) + h.Backend.Pending(qBeta); n != 0 {
			t.Errorf("%d messages left, want none", n)
		}
	})
}

// A step that is dead-lettered stops the chain; its dead letter carries
// the steps left, and its replay resumes the chain from that step.
func TestABrokenChainStopsAndItsReplayResumesIt(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		broken := true
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error {
			if j.Name == "two" && broken {
				return queuey.Fatalf("upstream is down")
			}
			return nil
		}))
		chain, err := h.Producer.EnqueueChain(t.Context(), betaJob{named("one")}, betaJob{named("two")}, betaJob{named("three")})
		must(t, err)
		h.Advance(time.Minute)
		if runs := stepRuns(h, chain); len(runs) != 2 || runs[1].Step != 2 {
			t.Fatalf("runs %+v, want steps 1 and 2, the chain stopped at 2", runs)
		}
		dl, err := queuey.NewDeadLetters(t.Context(), h.Backend, app, &queuey.ProducerConfig{Clock: h.Clock})
		must(t, err)
		list, err := dl.List(t.Context(), "beta")
		must(t, err)
		if len(list) != 1 || list[0].Chain != (queuey.ChainStep{ID: chain, Step: 2, Steps: 3}) || !strings.Contains(string(list[0].Body), `"next":[{"job_type":"beta_job"`) {
			t.Fatalf("dead letters %+v, want step 2 carrying step 3", list)
		}
		// To a worker that knows no chains (the Rust crate), a step is a
		// plain job; the chain is a member it does not know, and keeps.
		env, err := broker.DecodeEnvelope(list[0].Body)
		if err != nil || env.JobType != "beta_job" || string(env.Payload) != `{"name":"two"}` || !strings.HasPrefix(string(env.Unknown), `{"chain":{"id":"`+chain+`","step":2,"steps":3,`) {
			t.Fatalf("step 2 reads as %+v (unknown %s), %v", env, env.Unknown, err)
		}
		broken = false
		n, err := dl.Replay(t.Context(), "beta", queuey.ReplayOptions{Select: queuey.All()})
		if err != nil || n != 1 {
			t.Fatalf("replay: %d, %v", n, err)
		}
		h.Advance(time.Minute)
		var steps []int
		for _, r := range stepRuns(h, chain) {
			steps = append(steps, r.Step)
		}
		if diff := cmp.Diff([]int{1, 2, 2, 3}, steps); diff != "" {
			t.Errorf("steps run differ (-want +got):\n%s", diff)
		}
	})
}

// A chain is one trace: every step's publish is made under the ctx its
// step before ran with, as a tracer's hooks would carry a trace.
func TestAChainIsOneTrace(t *testing.T) {
	type traceKey struct{}
	hooks := &queuey.Hooks{
		Publish: func(ctx context.Context, p *queuey.PublishInfo) func(error) {
			trace, _ := ctx.Value(traceKey{}).(string)
			if trace == "" {
				trace = "trace-" + p.JobID
			}
			p.Headers["x-test-trace"] = trace
			return nil
		},
		Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
			return context.WithValue(ctx, traceKey{}, d.Headers["x-test-trace"]), nil
		},
	}
	clocktest.Run(t, app, &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: hooks}}, func(t *testing.T, h *clocktest.Harness) {
		traces := map[string]bool{}
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error {
			traces[ctx.Value(traceKey{}).(string)] = true
			return nil
		}))
		p, err := queuey.NewProducer(t.Context(), h.Backend, app, &queuey.ProducerConfig{Clock: h.Clock, Hooks: hooks})
		must(t, err)
		_, err = p.EnqueueChain(t.Context(), betaJob{named("one")}, betaJob{named("two")}, betaJob{named("three")})
		must(t, err)
		h.Advance(time.Second)
		if h.Log.Len() != 3 || len(traces) != 1 {
			t.Errorf("%d runs in traces %v, want 3 in one", h.Log.Len(), traces)
		}
	})
}

// A chain with a step that cannot be enqueued is refused whole.
func TestAChainWithABadStepPublishesNothing(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		_, err := h.Producer.EnqueueChain(t.Context(), betaJob{named("one")}, nil)
		if !errors.Is(err, queuey.ErrInvalidJob) || !strings.Contains(err.Error(), "chain step 2") {
			t.Errorf("got %v, want step 2 refused", err)
		}
		_, err = h.Producer.EnqueueChain(t.Context())
		if !errors.Is(err, queuey.ErrInvalidJob) {
			t.Errorf("empty chain: got %v", err)
		}
		if n := h.Backend.Pending(qBeta); n != 0 {
			t.Errorf("%d published, want none", n)
		}
	})
}

// A chain's steps run one after another, each knowing its place.
func ExampleProducer_EnqueueChain() {
	ctx := context.Background()
	backend := memory.New(nil)
	app := queuey.QueueSet{Prefix: "example", Queues: []queuey.Queue{emails}}
	producer, err := queuey.NewProducer(ctx, backend, app, nil)
	if err != nil {
		panic(err)
	}
	worker, err := queuey.NewWorker(backend, app, &queuey.WorkerConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	err = queuey.Handle(worker, func(ctx context.Context, job SendEmail, jc queuey.JobContext) error {
		fmt.Printf("step %d of %d: to %s\n", jc.Chain.Step, jc.Chain.Steps, job.To)
		if jc.Chain.Step == jc.Chain.Steps {
			close(done)
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- worker.Run(runCtx) }()
	if _, err := producer.EnqueueChain(ctx, SendEmail{To: "ada@example.com"}, SendEmail{To: "grace@example.com"}); err != nil {
		panic(err)
	}
	<-done
	stop()
	fmt.Println("worker stopped:", <-stopped)
	// Output:
	// step 1 of 2: to ada@example.com
	// step 2 of 2: to grace@example.com
	// worker stopped: <nil>
}
