package queuey_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/clocktest"
)

// foreignBody is an envelope as another producer writes it: a field this
// version does not know beside the ones it does.
func foreignBody(t *testing.T, p plan) []byte {
	t.Helper()
	payload, err := json.Marshal(p)
	must(t, err)
	e := broker.NewEnvelope("alpha_job", qAlpha, payload, time.Unix(1_700_000_000, 0))
	e.Unknown = json.RawMessage(`{"tenant_id":"t-42"}`)
	body, err := e.Encode()
	must(t, err)
	return body
}

// Metadata another producer put on a job (an envelope field this version
// does not know, a header of its own) is still on the job after a
// deferral, a retry, a dead letter and a replay.
func TestForeignMetadataSurvivesEveryRepublish(t *testing.T) {
	var mu sync.Mutex
	var seen []string // per delivery: the header, and whether the body kept the field
	hooks := &queuey.Hooks{Deliver: func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, d.Headers["x-tenant"])
		return ctx, nil
	}}
	clocktest.Run(t, app, &clocktest.Options{Worker: queuey.WorkerConfig{Hooks: hooks}}, func(t *testing.T, h *clocktest.Harness) {
		handleAll(t, h.Worker, h.Clock)
		headers := map[string]string{"x-tenant": "acme"}
		// Deferred once, then failing once: three deliveries.
		must(t, h.Backend.Publish(t.Context(), broker.Message{ID: "a", Queue: qAlpha, Headers: headers,
			Body: foreignBody(t, plan{Name: "a", Defers: 1, DeferFor: time.Second, Fail: 1})}))
		must(t, h.Backend.Publish(t.Context(), broker.Message{ID: "b", Queue: qAlpha, Headers: headers,
			Body: foreignBody(t, plan{Name: "b", Fatal: true})}))
		h.Advance(5 * time.Second)
		dead := h.Backend.DeadLetters(qAlpha)
		if len(dead) != 1 || dead[0].Headers["x-tenant"] != "acme" || !strings.Contains(string(dead[0].Body), `"tenant_id":"t-42"`) {
			t.Fatalf("dead letters: %+v, want b's with its header and field", dead)
		}
		dl, err := queuey.NewDeadLetters(t.Context(), h.Backend, app, &queuey.ProducerConfig{Clock: h.Clock})
		must(t, err)
		_, err = dl.Replay(t.Context(), "alpha", queuey.ReplayOptions{Select: queuey.All()})
		must(t, err)
		h.Advance(time.Second)
		for _, m := range h.Backend.Acked(qAlpha) {
			if !strings.Contains(string(m.Body), `"tenant_id":"t-42"`) {
				t.Errorf("a delivery of %s lost the unknown field: %s", m.ID, m.Body)
			}
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if want := 5; len(seen) != want || strings.Count(strings.Join(seen, ","), "acme") != want {
		t.Errorf("x-tenant of each delivery: %q, want acme on each of %d", seen, want)
	}
}
