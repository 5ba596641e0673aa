package console_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/broker/rabbitmq/rabbittest"
	"github.com/queuey-go/queuey/console"
)

// A replay of n dead letters from the console, cut short after k of
// them: by the browser that asked for it going away (the request's ctx
// ends), or by the backend's connection dying under the read that holds
// the dead letters. Afterwards each letter is either on its work queue
// (replayed) or still dead: none lost, none in both. On both backends.
func TestAReplayCutShortLosesNothingAndDoublesNothing(t *testing.T) {
	const n, k = 10, 4
	for _, backend := range []string{"memory", "rabbitmq"} {
		for _, cut := range []string{"browser", "connection"} {
			t.Run(backend+"/"+cut, func(t *testing.T) {
				t.Parallel()
				r := newReplayRig(t, backend, cut, k)
				ids := r.deadLetters(n)
				code, body, err := r.replayAll()
				switch cut {
				case "browser":
					if !errors.Is(err, context.Canceled) {
						t.Errorf("the request: %d, %v; want it cancelled by the browser", code, err)
					}
				case "connection":
					if code != http.StatusInternalServerError || !strings.Contains(body, fmt.Sprintf("replayed %d, then", k)) {
						t.Errorf("the response: %d %q; want 500 saying replayed %d, then the error", code, body, k)
					}
				}
				select {
				case <-r.served: // the replay's handler has returned
				case <-time.After(30 * time.Second):
					t.Fatal("the replay's handler did not return")
				}
				work, dead := r.ids(r.queue), r.ids(broker.DeadQueueName(r.queue))
				all := slices.Concat(work, dead)
				slices.Sort(all)
				slices.Sort(ids)
				if !slices.Equal(all, ids) {
					t.Errorf("%d replayed and %d dead after the cut, %d letters in all, want each of the %d once:\nreplayed %v\ndead %v", len(work), len(dead), len(all), n, work, dead)
				}
				if len(work) != k {
					t.Errorf("%d replayed, want the %d before the cut", len(work), k)
				}
			})
		}
	}
}

// replayRig is a console over a backend that cuts a replay short.
type replayRig struct {
	t       *testing.T
	set     queuey.QueueSet
	queue   string // the work queue's broker name
	inner   broker.Backend
	cutter  *cutter
	srv     *httptest.Server
	client  *http.Client
	served  chan struct{} // a replay's handler returned
	cancel  context.CancelFunc
	connTag string // the RabbitMQ backend's connection name
}

func newReplayRig(t *testing.T, backend, cut string, k int) *replayRig {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	r := &replayRig{t: t, set: queuey.QueueSet{Prefix: "ct." + hex.EncodeToString(b), Queues: []queuey.Queue{{Name: "emails"}}}, served: make(chan struct{}, 1)}
	r.queue = r.set.BrokerName("emails")
	switch backend {
	case "memory":
		m := memory.New(nil)
		r.inner = m
		t.Cleanup(func() { _ = m.Close() })
	case "rabbitmq":
		r.connTag = r.set.Prefix + " console"
		rb := rabbittest.Dial(t, &rabbitmq.Options{ConnectionName: r.connTag, Logger: slog.New(slog.DiscardHandler),
			ReconnectMin: 50 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
		r.inner = rb
		t.Cleanup(func() {
			_ = rb.Close()
			rabbittest.DeleteQueues(t, r.queue, broker.DeadQueueName(r.queue), broker.CancelLedgerName(r.set.Prefix), broker.CancelFollowersName(r.set.Prefix))
		})
	}
	r.cutter = &cutter{Backend: r.inner, ex: r.inner.(broker.ExclusiveConsumer), k: k}
	switch cut {
	case "browser":
		r.cutter.afterPublish = func(readCtx context.Context) {
			r.cancel() // the browser goes away
			select {
			case <-readCtx.Done(): // the server saw it
			case <-time.After(10 * time.Second):
				t.Error("the server did not see the browser go")
			}
		}
	case "connection":
		r.cutter.afterAck = func(c broker.Consumer) {
			m, onMemory := r.inner.(*memory.Backend)
			if onMemory {
				m.Disconnect(broker.DeadQueueName(r.queue))
			}
			// The management API lists a connection some time after it
			// opens: closing what it lists may miss the consumer's. Close
			// again until the read has ended with its connection.
			for deadline := time.Now().Add(15 * time.Second); c.Err() == nil; <-time.After(200 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Error("the read of the dead letters outlived its connection")
					return
				}
				if onMemory {
					continue
				}
				if err := closeConnections(r.connTag); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}
	c, err := console.New(t.Context(), r.cutter, r.set, &console.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c.ServeHTTP(w, req)
		if req.Method == http.MethodPost {
			r.served <- struct{}{}
		}
	})))
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	jar, _ := cookiejar.New(nil)
	r.client = &http.Client{Jar: jar}
	return r
}

// deadLetters puts n dead letters on the queue and returns their ids.
func (r *replayRig) deadLetters(n int) []string {
	var ids []string
	for i := range n {
		env := broker.NewEnvelope("send", r.queue, json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), time.Now())
		msg, err := env.Message()
		if err != nil {
			r.t.Fatal(err)
		}
		if err := r.inner.DeadLetter(r.t.Context(), broker.DeadLetter{Message: msg, Reason: "fatal error: no"}); err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, env.JobID)
	}
	return ids
}

// replayAll asks the console to replay every dead letter, confirmed, and
// returns its answer.
func (r *replayRig) replayAll() (int, string, error) {
	r.t.Helper()
	resp, err := r.client.Get(r.srv.URL + "/ops/")
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
	u, _ := url.Parse(r.srv.URL + "/ops/")
	var tok string
	for _, c := range r.client.Jar.Cookies(u) {
		if c.Name == "queuey_csrf" {
			tok = c.Value
		}
	}
	form := url.Values{"scope": {"matching"}, "confirm": {"yes"}, "csrf": {tok}}
	var ctx context.Context
	ctx, r.cancel = context.WithCancel(r.t.Context())
	defer r.cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL+"/ops/dead/emails/replay", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = r.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

// ids are the job ids on queue, read by a consumer of the test's own and
// given back.
func (r *replayRig) ids(queue string) []string {
	r.t.Helper()
	ctx := r.t.Context()
	n, err := r.inner.Depth(ctx, queue)
	if err != nil {
		r.t.Fatal(err)
	}
	if n == 0 {
		return nil
	}
	c, err := r.inner.Consume(ctx, queue, n)
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.Cancel()
	var ids []string
	for range n {
		select {
		case d := <-c.Deliveries():
			ids = append(ids, d.Message().ID)
		case <-time.After(5 * time.Second):
			r.t.Fatalf("%s: %d of %d read", queue, len(ids), n)
		}
	}
	return ids
}

// closeConnections closes, through RabbitMQ's management API, every
// connection whose name starts with tag. The API learns of a connection
// a moment after it opens: it waits for one up to 15 s. (It is called
// from a handler's goroutine: it reports, it does not fail the test.)
func closeConnections(tag string) error {
	const api = "http://127.0.0.1:15672/api/connections"
	do := func(method, u string) (*http.Response, error) {
		req, _ := http.NewRequest(method, u, nil)
		req.SetBasicAuth("guest", "guest")
		req.Header.Set("X-Reason", "queuey test: the connection dies")
		return http.DefaultClient.Do(req)
	}
	for deadline := time.Now().Add(15 * time.Second); ; <-time.After(200 * time.Millisecond) {
		resp, err := do(http.MethodGet, api+"?columns=name,client_properties")
		if err != nil {
			return fmt.Errorf("management API: %w", err)
		}
		var conns []struct {
			Name  string `json:"name"`
			Props struct {
				Name string `json:"connection_name"`
			} `json:"client_properties"`
		}
		err = json.NewDecoder(resp.Body).Decode(&conns)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("management API: the connections: %w", err)
		}
		closed := 0
		for _, c := range conns {
			if strings.HasPrefix(c.Props.Name, tag) {
				resp, err := do(http.MethodDelete, api+"/"+url.PathEscape(c.Name))
				if err != nil {
					return fmt.Errorf("management API: closing %s: %w", c.Name, err)
				}
				resp.Body.Close()
				closed++
			}
		}
		if closed > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no connection named %s", tag)
		}
	}
}

// cutter is a backend that calls afterPublish once the k-th publish is
// confirmed, with the ctx of the read of the dead letters, or afterAck
// once the k-th dead letter is acked, with the read's consumer. Its
// consumers hand out a delivery only once the one before is settled, so
// that none is in the test's hands when it cuts.
type cutter struct {
	broker.Backend
	ex           broker.ExclusiveConsumer
	k            int
	afterPublish func(readCtx context.Context)
	afterAck     func(broker.Consumer)
	published    atomic.Int32
	acked        atomic.Int32
	mu           sync.Mutex
	readCtx      context.Context
}

func (c *cutter) Publish(ctx context.Context, m broker.Message) error {
	err := c.Backend.Publish(ctx, m)
	if err == nil && int(c.published.Add(1)) == c.k && c.afterPublish != nil {
		c.mu.Lock()
		readCtx := c.readCtx
		c.mu.Unlock()
		c.afterPublish(readCtx)
	}
	return err
}

func (c *cutter) ConsumeExclusive(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	inner, err := c.ex.ConsumeExclusive(ctx, queue, prefetch)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.readCtx = ctx
	c.mu.Unlock()
	cc := &cutConsumer{Consumer: inner, c: c, out: make(chan broker.Delivery), settled: make(chan struct{}, 1), done: make(chan struct{})}
	go cc.forward()
	return cc, nil
}

type cutConsumer struct {
	broker.Consumer
	c       *cutter
	out     chan broker.Delivery
	settled chan struct{}
	done    chan struct{}
	once    sync.Once
}

// forward hands out the inner consumer's deliveries one at a time: the
// next is taken from it only once the last is settled.
func (cc *cutConsumer) forward() {
	defer close(cc.out)
	for d := range cc.Consumer.Deliveries() {
		select {
		case cc.out <- &cutDelivery{Delivery: d, cc: cc}:
		case <-cc.done:
			return
		}
		select {
		case <-cc.settled:
		case <-cc.done:
			return
		}
	}
}

func (cc *cutConsumer) Deliveries() <-chan broker.Delivery { return cc.out }

func (cc *cutConsumer) Cancel() {
	cc.once.Do(func() { close(cc.done) })
	cc.Consumer.Cancel()
}

type cutDelivery struct {
	broker.Delivery
	cc *cutConsumer
}

func (d *cutDelivery) Ack(ctx context.Context) error {
	err := d.Delivery.Ack(ctx)
	if c := d.cc.c; err == nil && int(c.acked.Add(1)) == c.k && c.afterAck != nil {
		c.afterAck(d.cc.Consumer)
	}
	d.cc.settled <- struct{}{}
	return err
}

func (d *cutDelivery) Requeue(ctx context.Context) error {
	err := d.Delivery.Requeue(ctx)
	d.cc.settled <- struct{}{}
	return err
}
