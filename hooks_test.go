package queuey_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/clocktest"
)

// hookLog records what the hooks were told.
type hookLog struct {
	mu         sync.Mutex
	publishes  []queuey.PublishInfo
	deliveries []queuey.DeliveryInfo
	outcomes   []queuey.Outcome
}

func (l *hookLog) hooks() *queuey.Hooks {
	return &queuey.Hooks{
		Publish: func(ctx context.Context, p *queuey.PublishInfo) func(error) {
			p.Headers["traceparent"] = "from-" + string(p.Op)
			l.mu.Lock()
			l.publishes = append(l.publishes, *p)
			l.mu.Unlock()
			return nil
		},
		Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
			l.mu.Lock()
			l.deliveries = append(l.deliveries, *d)
			l.mu.Unlock()
			return ctx, func(o queuey.Outcome) {
				l.mu.Lock()
				l.outcomes = append(l.outcomes, o)
				l.mu.Unlock()
			}
		},
	}
}

func TestHooksFollowAJobThroughADeferralAndARetry(t *testing.T) {
	hl := &hookLog{}
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: hl.hooks()}}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		p, err := queuey.NewProducer(t.Context(), h.Backend, app, &queuey.ProducerConfig{Clock: h.Clock, Hooks: hl.hooks()})
		must(t, err)
		job := deferring(1, 30*time.Second)
		job.Fail = 1
		mustID(t)(p.Enqueue(t.Context(), alphaJob{job}))
		h.Advance(time.Minute)

		hl.mu.Lock()
		defer hl.mu.Unlock()
		type pub struct {
			Op                           queuey.PublishOp
			Attempt, Deferrals, Priority int
			Delay                        time.Duration
		}
		var pubs []pub
		for _, p := range hl.publishes {
			pubs = append(pubs, pub{p.Op, p.Attempt, p.Deferrals, p.Priority, p.Delay})
		}
		wantPubs := []pub{
			{queuey.OpEnqueue, 1, 0, 0, 0},
			{queuey.OpDeferral, 1, 1, 10, 30 * time.Second},
			{queuey.OpRetry, 2, 1, 0, time.Second},
		}
		if diff := cmp.Diff(wantPubs, pubs); diff != "" {
			t.Errorf("publishes (-want +got):\n%s", diff)
		}
		wantOut := []queuey.Outcome{
			{Result: queuey.Deferred, Delay: 30 * time.Second, Reason: "rate limited", Ran: true},
			{Result: queuey.Retried, Delay: time.Second, NextAttempt: 2, Ran: true},
			{Result: queuey.Succeeded, Ran: true},
		}
		if diff := cmp.Diff(wantOut, hl.outcomes, cmpopts.IgnoreFields(queuey.Outcome{}, "Err", "HandlerDuration")); diff != "" {
			t.Errorf("outcomes (-want +got):\n%s", diff)
		}
		if len(hl.deliveries) != 3 {
			t.Fatalf("deliveries: got %d, want 3", len(hl.deliveries))
		}
		for i, d := range hl.deliveries {
			if late := d.Started.Sub(d.DueAt); d.DueAt.IsZero() || late != 0 {
				t.Errorf("delivery %d started %v after it was due (due %v), want exactly on time", i, late, d.DueAt)
			}
			if want := "from-" + string(wantPubs[i].Op); d.Headers["traceparent"] != want {
				t.Errorf("delivery %d carried traceparent %q, want %q", i, d.Headers["traceparent"], want)
			}
		}
		if d := hl.deliveries[1]; d.Job.Deferrals != 1 || d.Job.Priority != 10 {
			t.Errorf("second delivery: %+v", d.Job)
		}
	})
}
