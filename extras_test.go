package queuey_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/clocktest"
)

func TestTheDeadLetterHookIsToldWhy(t *testing.T) {
	var mu sync.Mutex
	var causes []queuey.DeadLetterCause
	opts := &clocktest.Options{Worker: queuey.WorkerConfig{OnDeadLetter: func(ctx context.Context, dl queuey.DeadLetterEvent) {
		mu.Lock()
		defer mu.Unlock()
		causes = append(causes, dl.Cause)
	}, UnknownKindWait: -1}} // the orphan is dead-lettered at once
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		ctx, id := t.Context(), mustID(t)
		handleAll(t, h.Worker, h.Clock)
		id(h.Producer.Enqueue(ctx, betaJob{plan{Fatal: true}}))
		h.Advance(time.Second)
		id(h.Producer.Enqueue(ctx, betaJob{plan{Fail: 1}}))
		h.Advance(time.Second)
		id(h.Producer.Enqueue(ctx, orphanJob{}))
		h.Advance(time.Second)
		must(t, h.Backend.Publish(ctx, broker.Message{Queue: qBeta, Body: []byte("garbage")}))
		h.Advance(time.Second)
		mu.Lock()
		defer mu.Unlock()
		want := []queuey.DeadLetterCause{queuey.CauseFatal, queuey.CauseExhausted, queuey.CauseNoHandler, queuey.CauseMalformed}
		if diff := cmp.Diff(want, causes); diff != "" {
			t.Errorf("causes (-want +got):\n%s", diff)
		}
	})
}

func TestRetryPoliciesCanBeOverriddenAtRuntime(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		ctx, id := t.Context(), mustID(t)
		handleAll(t, h.Worker, h.Clock)
		// beta allows one attempt; give the queue three, 10 s apart.
		must(t, h.Worker.SetQueueRetryPolicy("beta", &queuey.RetryPolicy{MaxAttempts: 3, Backoff: queuey.FixedBackoff(10 * time.Second)}))
		a := id(h.Producer.Enqueue(ctx, betaJob{plan{Fail: 2}}))
		h.Advance(time.Minute)
		wantShapes(t, h.Log.Of(a), shape{1, 0, 0}, shape{2, 0, 0}, shape{3, 0, 0})
		if runs := h.Log.Of(a); runs[1].At.Sub(runs[0].At) != 10*time.Second || runs[0].MaxAttempts != 3 {
			t.Errorf("queue override: retry after %v with MaxAttempts %d, want 10s and 3", runs[1].At.Sub(runs[0].At), runs[0].MaxAttempts)
		}
		// A kind override wins over the queue's.
		must(t, h.Worker.SetKindRetryPolicy("beta_job", &queuey.RetryPolicy{MaxAttempts: 2, Backoff: queuey.FixedBackoff(time.Second)}))
		b := id(h.Producer.Enqueue(ctx, betaJob{plan{Fail: 99}}))
		h.Advance(time.Minute)
		wantShapes(t, h.Log.Of(b), shape{1, 0, 0}, shape{2, 0, 0})
		// Cleared, the queue's own policy (one attempt) is back.
		must(t, h.Worker.SetKindRetryPolicy("beta_job", nil))
		must(t, h.Worker.SetQueueRetryPolicy("beta", nil))
		c := id(h.Producer.Enqueue(ctx, betaJob{plan{Fail: 99}}))
		h.Advance(time.Minute)
		wantShapes(t, h.Log.Of(c), shape{1, 0, 0})
		if err := h.Worker.SetQueueRetryPolicy("nope", nil); !errors.Is(err, queuey.ErrUnknownQueue) {
			t.Errorf("unknown queue: got %v", err)
		}
		if err := h.Worker.SetKindRetryPolicy("x", &queuey.RetryPolicy{MaxAttempts: -1}); !errors.Is(err, queuey.ErrInvalidQueue) {
			t.Errorf("invalid policy: got %v", err)
		}
	})
}

func TestACorrelationIDTravelsThroughRetriesAndDeferrals(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		p := deferring(1, 5*time.Second)
		p.Fail = 1
		id := mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{p}, queuey.WithCorrelationID("order-17")))
		h.Advance(time.Minute)
		runs := h.Log.Of(id)
		if len(runs) != 3 {
			t.Fatalf("runs: got %d, want 3", len(runs))
		}
		for i, r := range runs {
			if r.CorrelationID != "order-17" {
				t.Errorf("run %d: correlation id %q, want order-17", i, r.CorrelationID)
			}
		}
		if _, err := h.Producer.Enqueue(t.Context(), alphaJob{}, queuey.WithCorrelationID("\xff")); !errors.Is(err, queuey.ErrInvalidJob) {
			t.Errorf("invalid correlation id: got %v", err)
		}
	})
}

func TestAnOverlongCorrelationIDIsRefused(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		long := strings.Repeat("c", 256)
		if _, err := h.Producer.Enqueue(t.Context(), alphaJob{}, queuey.WithCorrelationID(long)); !errors.Is(err, queuey.ErrInvalidJob) {
			t.Errorf("a 256-byte correlation id: got %v, want ErrInvalidJob", err)
		}
	})
}
