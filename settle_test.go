package queuey_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
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

// A deferral is logged at INFO, not DEBUG as a success is, nor WARN as a
// failure: one "job deferred" line per deferral, with its delay and reason,
// whether the handler returned Defer or PauseQueue. A success writes
// nothing at INFO.
func TestADeferralIsLoggedAtInfo(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result error // of the job's first run; the second succeeds
	}{
		{"Defer", queuey.Defer(2*time.Second, "upstream busy")},
		{"PauseQueue", queuey.PauseQueue(2*time.Second, "upstream busy")},
		{"a success", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			var id string
			clocktest.Run(t, app, &clocktest.Options{Logger: logger}, func(t *testing.T, h *clocktest.Harness) {
				must(t, queuey.Handle(h.Worker, func(_ context.Context, _ alphaJob, jc queuey.JobContext) error {
					if jc.Deferrals > 0 {
						return nil
					}
					return tc.result
				}))
				id = mustID(t)(h.Producer.Enqueue(t.Context(), alphaJob{}))
				h.Advance(10 * time.Second)
			})
			lines := jsonLines(t, logs.Bytes(), "job_id", id)
			if tc.result == nil {
				if len(lines) != 0 {
					t.Errorf("a success logged %v at INFO or above, want nothing", lines)
				}
				return
			}
			var deferred []map[string]any
			for _, l := range lines {
				if l["msg"] == "job deferred" {
					deferred = append(deferred, l)
				}
			}
			if len(deferred) != 1 {
				t.Fatalf("INFO lines \"job deferred\": got %v, want one", deferred)
			}
			l := deferred[0]
			if l["level"] != "INFO" || l["delay"] != float64(2*time.Second) || l["reason"] != "upstream busy" {
				t.Errorf("deferral line: got %v, want level INFO, delay 2s (in ns), reason \"upstream busy\"", l)
			}
		})
	}
}
