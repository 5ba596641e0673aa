package fleet_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
	"github.com/queuey-go/queuey/console"
	"github.com/queuey-go/queuey/fleet"
)

// On RabbitMQ, a worker's agent and a console whose connections are cut
// (their listeners end with them) listen again: the console hears the
// worker again, and a pause it sends reaches the worker.
func TestOnRabbitMQTheFleetListensAgainAfterALostConnection(t *testing.T) {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	rset := queuey.QueueSet{Prefix: "ft." + hex.EncodeToString(b), Queues: []queuey.Queue{mail}}
	defer rabbittest.DeleteQueues(t, rset.BrokerName("mail"), broker.DeadQueueName(rset.BrokerName("mail")),
		broker.CancelLedgerName(rset.Prefix), broker.CancelFollowersName(rset.Prefix))
	dial := func(name string) *rabbitmq.Backend {
		b := rabbittest.Dial(t, &rabbitmq.Options{ConnectionName: rset.Prefix + " " + name, Logger: quiet,
			ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	wb, cb := dial("worker"), dial("console")
	agent, err := fleet.NewAgent(wb, rset, &fleet.Options{Interval: 500 * time.Millisecond, Logger: quiet})
	must(t, err)
	w, err := queuey.NewWorker(wb, rset, &queuey.WorkerConfig{Hooks: agent.Hooks(nil), Logger: quiet})
	must(t, err)
	must(t, queuey.Handle(w, func(context.Context, mailJob, queuey.JobContext) error { return nil }))
	c, err := console.New(t.Context(), cb, rset, &console.Options{Logger: quiet})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { _ = w.Run(ctx) })
	wg.Go(func() { _ = agent.Run(ctx, w) })
	wg.Go(func() { _ = c.Run(ctx) })
	row := `data-worker="` + agent.ID() + `"`
	page := func(path string) string {
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Body.String()
	}
	eventually := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(within); !cond(); <-time.After(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, within)
			}
		}
	}
	eventually("the console hears the worker", 10*time.Second, func() bool { return strings.Contains(page("/workers?live=1"), row) })

	cut(t, rset.Prefix)
	eventually("the console says it does not hear the workers", 5*time.Second, func() bool {
		return strings.Contains(page("/workers?live=1"), "does not hear")
	})
	// Both listen again 1 s after their listeners ended (the first
	// backoff); the console then hears the next heartbeat.
	eventually("the console hears the worker again", 10*time.Second, func() bool {
		p := page("/workers?live=1")
		return strings.Contains(p, row) && !strings.Contains(p, "does not hear")
	})
	eventually("a pause reaches the worker", 10*time.Second, func() bool {
		pause(t, c)
		return !w.Paused()["mail"].IsZero()
	})
}

// pause asks the console to pause mail, as its form does.
func pause(t *testing.T, c *console.Console) {
	t.Helper()
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	var tok string
	for _, ck := range rec.Result().Cookies() {
		if ck.Name == "queuey_csrf" {
			tok = ck.Value
		}
	}
	req := httptest.NewRequest("POST", "/queues/mail/pause", strings.NewReader(url.Values{"for": {"1h"}, "csrf": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "queuey_csrf", Value: tok})
	rec = httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("pause: %d\n%s", rec.Code, rec.Body)
	}
}

// cut closes, through RabbitMQ's management API, every connection whose
// name starts with tag (the API learns of a connection a moment after it
// opens: it waits for one up to 15 s).
func cut(t *testing.T, tag string) {
	t.Helper()
	const api = "http://127.0.0.1:15672/api/connections"
	do := func(method, u string) *http.Response {
		req, _ := http.NewRequest(method, u, nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("management API: %v", err)
		}
		return resp
	}
	for deadline := time.Now().Add(15 * time.Second); ; <-time.After(200 * time.Millisecond) {
		resp := do(http.MethodGet, api+"?columns=name,client_properties")
		var conns []struct {
			Name  string `json:"name"`
			Props struct {
				Name string `json:"connection_name"`
			} `json:"client_properties"`
		}
		err := json.NewDecoder(resp.Body).Decode(&conns)
		resp.Body.Close()
		must(t, err)
		var closed []string
		for _, c := range conns {
			if strings.HasPrefix(c.Props.Name, tag) {
				do(http.MethodDelete, api+"/"+url.PathEscape(c.Name)).Body.Close()
				closed = append(closed, c.Props.Name)
			}
		}
		// The worker's and the console's publishing connections carry
		// the listeners.
		if len(closed) >= 2 {
			t.Logf("closed %s", strings.Join(closed, ", "))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections named %s*: %v, want the worker's and the console's", tag, closed)
		}
	}
}
