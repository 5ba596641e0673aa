package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// queuey web learns each queue's declaration as queuey dead does: a
// quorum queue is served with the management API and no flag; without
// the API, the refusal names the flag that fixes it.
func TestWebReadsEachQueuesDeclarationFromTheBroker(t *testing.T) {
	t.Parallel()
	f := quorumFixture(t, "replicated")
	base := []string{"-url", f.url, "-prefix", f.set.Prefix, "-queues", "replicated"}

	flags, err := parseWeb(base, io.Discard)
	must(t, err)
	h, stop, err := openConsole(t.Context(), flags, quiet)
	if err != nil {
		t.Fatalf("openConsole: %v", err)
	}
	defer stop()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "quorum") {
		t.Errorf("GET /: %d, want 200 and the queue's type, quorum", rec.Code)
	}

	flags, err = parseWeb(append(base, "-management", "off"), io.Discard)
	must(t, err)
	if _, _, err := openConsole(t.Context(), flags, quiet); err == nil || !strings.Contains(err.Error(), "give -type quorum") {
		t.Errorf("openConsole without the API: %v, want a refusal that names -type quorum", err)
	}
	flags, err = parseWeb(append(base, "-management", "off", "-type", "quorum"), io.Discard)
	must(t, err)
	_, stop2, err := openConsole(t.Context(), flags, quiet)
	if err != nil {
		t.Fatalf("openConsole with -type quorum: %v", err)
	}
	stop2()
}

// queuey web refuses to listen beyond loopback without a credential, and
// says why; with one, every request must carry it.
func TestWebRefusesAnOpenListenWithoutAToken(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{"127.0.0.1:0": true, "localhost:8080": true, "[::1]:0": true, "0.0.0.0:8080": false, "192.0.2.7:80": false} {
		err := checkListen(addr, "")
		if (err == nil) != ok {
			t.Errorf("checkListen(%q, no token) = %v, want ok=%v", addr, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "QUEUEY_WEB_TOKEN") {
			t.Errorf("checkListen(%q) = %v: does not say how to allow it", addr, err)
		}
		if err := checkListen(addr, "s3cret"); err != nil {
			t.Errorf("checkListen(%q, a token) = %v, want nil", addr, err)
		}
	}
	h := withToken(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), "s3cret")
	for _, c := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"Bearer s3cret", 200}} {
		req := httptest.NewRequest("GET", "/", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want || strings.Contains(rec.Body.String(), "s3cret") {
			t.Errorf("%q: %d, want %d, and never the token in the answer", c.auth, rec.Code, c.want)
		}
	}
}
