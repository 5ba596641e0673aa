package clocktest_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/clocktest"
)

// A handler that calls a real loopback server (httptest.NewServer) leaves
// a keep-alive connection whose reader waits on the network, which the
// bubble cannot see: the harness's wait for idleness would last until
// go test's -timeout (10 minutes). The watchdog ends the child below
// after its default 5 s instead, saying why and what to do, with the
// stack of that reader and the seed to rerun with.
func TestWatchdogEndsARunStuckOnARealHTTPServer(t *testing.T) {
	out, took, err := runChild(t, "TestChildCallsARealHTTPServer")
	if err == nil {
		t.Fatalf("the child passed; want it ended by the watchdog:\n%s", out)
	}
	for _, want := range []string{
		"clocktest: TestChildCallsARealHTTPServer: the harness has waited more than 5s of real time for the system to go idle, and it will not",
		"blocked where the bubble cannot see them",
		"real I/O inside the bubble: a network connection (an httptest.NewServer",
		"serve an HTTP API with h.NewHTTPServer(handler)",
		"raise Options.Watchdog",
		"[IO wait, synctest bubble ",
		"net/http.(*persistConn).readLoop",
		"; rerun with QUEUEY_SEED=",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the child's output lacks %q:\n%s", want, out)
		}
	}
	if took > 10*time.Second {
		t.Errorf("the child ended after %v, want within 10s", took)
	}
	t.Logf("ended by the watchdog after %v", took.Round(time.Millisecond))
}

// TestChildCallsARealHTTPServer is the child of
// TestWatchdogEndsARunStuckOnARealHTTPServer: the first test a user writes
// for a handler that calls an API.
func TestChildCallsARealHTTPServer(t *testing.T) {
	childOnly(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "charged")
	}))
	defer api.Close()
	clocktest.Run(t, paymentSet, nil, func(t *testing.T, h *clocktest.Harness) {
		if err := queuey.Handle(h.Worker, charger{client: api.Client(), url: api.URL}.handle); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Producer.Enqueue(t.Context(), Charge{Customer: "ada"}); err != nil {
			t.Fatal(err)
		}
		h.Advance(time.Second) // the call succeeds, but its connection stays open
		t.Error("the harness went idle with a real connection open")
	})
}

// Goroutines of the bubble left on real I/O when the test returns keep
// synctest.Test from returning: the watchdog says so too.
func TestWatchdogEndsARunWhoseBubbleCannotEnd(t *testing.T) {
	out, took, err := runChild(t, "TestChildLeavesARealConnectionOpen")
	if err == nil {
		t.Fatalf("the child passed; want it ended by the watchdog:\n%s", out)
	}
	for _, want := range []string{
		"clocktest: TestChildLeavesARealConnectionOpen: the test has returned, but for more than 1s of real time goroutines of its synctest bubble have not exited",
		"serve an HTTP API with h.NewHTTPServer(handler)",
		"net/http.(*persistConn).readLoop",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the child's output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("ended by the watchdog after %v", took.Round(time.Millisecond))
}

// TestChildLeavesARealConnectionOpen is the child of
// TestWatchdogEndsARunWhoseBubbleCannotEnd: the test itself calls a real
// server, and never starts the worker.
func TestChildLeavesARealConnectionOpen(t *testing.T) {
	childOnly(t)
	api := httptest.NewServer(http.NotFoundHandler())
	defer api.Close()
	clocktest.Run(t, paymentSet, &clocktest.Options{Watchdog: time.Second}, func(t *testing.T, h *clocktest.Harness) {
		resp, err := api.Client().Get(api.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	})
}

// A wait for idleness that outlasts the watchdog while a goroutine of the
// bubble is at work (running, not blocked) is let be: the handler below
// computes for longer than the 20 ms watchdog.
func TestWatchdogLetsASystemAtWorkBe(t *testing.T) {
	start := time.Now()
	clocktest.Run(t, set, &clocktest.Options{Watchdog: 20 * time.Millisecond}, func(t *testing.T, h *clocktest.Harness) {
		if err := queuey.Handle(h.Worker, func(context.Context, ping, queuey.JobContext) error {
			sum := sha256.Sum256(nil)
			for range 200_000 { // 100-300 ms, depending on the machine and -race
				sum = sha256.Sum256(sum[:])
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Producer.Enqueue(t.Context(), ping{}); err != nil {
			t.Fatal(err)
		}
		h.Advance(time.Second)
		if n := h.Log.Len(); n != 1 {
			t.Errorf("%d runs, want 1", n)
		}
	})
	t.Logf("a wait of about %v, under a 20ms watchdog", time.Since(start).Round(time.Millisecond))
}
