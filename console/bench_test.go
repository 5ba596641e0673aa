package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/console"
)

// BenchmarkOverview200Queues is the server time of the Overview of a set
// of 200 queues (goal: under 300 ms).
func BenchmarkOverview200Queues(b *testing.B) {
	big := queuey.QueueSet{Prefix: "bench"}
	for i := range 200 {
		big.Queues = append(big.Queues, queuey.Queue{Name: fmt.Sprintf("q%03d", i)})
	}
	c := benchConsole(b, big, memory.New(nil))
	serveBench(b, c, "/")
}

// BenchmarkDeadLettersFirstPageOf10000 is the server time of the first
// page of 10,000 dead letters (goal: under 300 ms).
func BenchmarkDeadLettersFirstPageOf10000(b *testing.B) {
	backend := memory.New(nil)
	c := benchConsole(b, set, backend)
	for range 10_000 {
		env := broker.NewEnvelope("send", set.BrokerName("emails"), json.RawMessage(`{"to":"a@example.com"}`), time.Now())
		msg, _ := env.Message()
		if err := backend.DeadLetter(context.Background(), broker.DeadLetter{Message: msg, Reason: "fatal error: no"}); err != nil {
			b.Fatal(err)
		}
	}
	serveBench(b, c, "/dead/emails")
}

func benchConsole(b *testing.B, s queuey.QueueSet, backend *memory.Backend) *console.Console {
	b.Cleanup(func() { _ = backend.Close() })
	c, err := console.New(b.Context(), backend, s, nil)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func serveBench(b *testing.B, c *console.Console, path string) {
	for b.Loop() {
		w := httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != 200 {
			b.Fatalf("%s: %d", path, w.Code)
		}
	}
}
