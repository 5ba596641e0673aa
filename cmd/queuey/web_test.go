package main

import (
	"io"
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
