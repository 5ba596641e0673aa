package clocktest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/clocktest"
)

// Charge is a job that charges a customer through a payment API.
type Charge struct{ Customer string }

var payments = queuey.Queue{Name: "payments", Prefetch: 1}

func (Charge) Kind() string        { return "charge" }
func (Charge) Queue() queuey.Queue { return payments }

var paymentSet = queuey.QueueSet{Prefix: "ct", Queues: []queuey.Queue{payments}}

// charger handles Charge jobs: it calls the payment API at url and reads
// its answer, and defers the job by the API's Retry-After when the API
// answers 429.
type charger struct {
	client *http.Client
	url    string
}

func (c charger) handle(ctx context.Context, job Charge, _ queuey.JobContext) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/charges?customer="+url.QueryEscape(job.Customer), nil)
	if err != nil {
		return queuey.Fatal(err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	receipt, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		after := resp.Header.Get("Retry-After")
		secs, err := strconv.Atoi(after)
		if err != nil {
			return fmt.Errorf("%s without a Retry-After in seconds (%q)", resp.Status, after)
		}
		return queuey.Defer(time.Duration(secs)*time.Second, resp.Status+", Retry-After "+after)
	case resp.StatusCode >= 300:
		return fmt.Errorf("charge: %s: %s", resp.Status, receipt)
	}
	return nil
}

// rateLimited is an API that answers 429 with Retry-After: retryAfter
// (seconds) to its first limit calls, and 200 then.
func rateLimited(limit int64, retryAfter string, calls *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= limit {
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "charged", r.URL.Query().Get("customer"))
	})
}

// An HTTPServer stands in for httptest.NewServer: a handler calls the API
// through its Client, on in-memory connections. Here the API rate-limits
// the first call for a day, and the handler defers the job by that.
func ExampleNewHTTPServer() {
	var calls atomic.Int64
	api := clocktest.NewHTTPServer(rateLimited(1, "86400", &calls))
	defer api.Close()
	c := charger{client: api.Client(), url: api.URL}
	for range 2 {
		fmt.Println(c.handle(context.Background(), Charge{Customer: "ada"}, queuey.JobContext{}))
	}
	// Output:
	// job deferred for 24h0m0s: 429 Too Many Requests, Retry-After 86400
	// <nil>
}

// A handler that calls an API served by Harness.NewHTTPServer runs in
// virtual time: the API answers 429 with Retry-After: 15 days twice, the
// job is deferred by it twice, and runs its third time 30 days after the
// first, all in a few milliseconds of real time.
func TestHTTPServerLetsAHandlerCallAnAPIInVirtualTime(t *testing.T) {
	const fifteenDays = 15 * 24 * time.Hour
	start := time.Now()
	clocktest.Run(t, paymentSet, nil, func(t *testing.T, h *clocktest.Harness) {
		var calls atomic.Int64
		api := h.NewHTTPServer(rateLimited(2, strconv.Itoa(int(fifteenDays/time.Second)), &calls))
		if err := queuey.Handle(h.Worker, charger{client: api.Client(), url: api.URL}.handle); err != nil {
			t.Fatal(err)
		}
		id, err := h.Producer.Enqueue(t.Context(), Charge{Customer: "ada"})
		if err != nil {
			t.Fatal(err)
		}
		h.Advance(2*fifteenDays - time.Second)
		if n := h.Log.Len(); n != 2 {
			t.Fatalf("a second before 30 days: %d runs, want 2", n)
		}
		h.Advance(time.Second)
		var at []time.Duration
		for _, r := range h.Log.Of(id) {
			at = append(at, r.At.Sub(clocktest.Epoch))
		}
		if want := []time.Duration{0, fifteenDays, 2 * fifteenDays}; fmt.Sprint(at) != fmt.Sprint(want) {
			t.Errorf("runs at %v, want %v", at, want)
		}
		if n, acked := calls.Load(), h.Backend.AckedCount("ct.payments"); n != 3 || acked != 3 {
			t.Errorf("%d API calls and %d acks, want 3 and 3 (two deferrals and the charge)", n, acked)
		}
	})
	t.Logf("30 days of virtual time, three API calls, in %v of real time", time.Since(start))
}

// A closed HTTPServer refuses requests.
func TestClosedHTTPServerRefusesRequests(t *testing.T) {
	api := clocktest.NewHTTPServer(http.NotFoundHandler())
	api.Close()
	api.Close() // a no-op
	resp, err := api.Client().Get(api.URL)
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, clocktest.ErrHTTPServerClosed) {
		t.Errorf("a request to a closed server: got %v, want %v", err, clocktest.ErrHTTPServerClosed)
	}
}

// An HTTPServer made outside the bubble is refused inside it, with a
// message that says where to make it, rather than crash on the bubble's
// channels.
func TestHTTPServerMadeOutsideTheBubbleSaysSo(t *testing.T) {
	api := clocktest.NewHTTPServer(http.NotFoundHandler())
	defer api.Close()
	synctest.Test(t, func(t *testing.T) {
		resp, err := api.Client().Get(api.URL)
		if err == nil {
			resp.Body.Close()
			t.Fatal("a call in the bubble to a server made outside it went through")
		}
		if want := "inside the function of clocktest.Run"; !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want it to say %q", err, want)
		}
	})
}
