package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadPeersRealSample(t *testing.T) {
	p, err := readPeers(filepath.Join("testdata", "peers.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Systems) != 6 || p.N != 2000 || p.Servers["RabbitMQ"] != "3.10.8" {
		t.Errorf("%+v", p)
	}
	q, ok := p.queuey()
	if !ok || len(q.Rates) != 1 {
		t.Fatalf("queuey: %+v %v", q, ok)
	}
	rows := peerSummaryRows(p)
	if len(rows) != 1 || strings.Count(rows[0].baseline, ";") != 4 || !strings.Contains(rows[0].baseline, "machinery v2 v2.0.13: ") ||
		!strings.HasPrefix(rows[0].goal, "≥ 1.1 vs machinery v2 ") {
		t.Errorf("summary rows %+v", rows)
	}
}

func TestPeersTableShowsAFailure(t *testing.T) {
	p := &peersReport{N: 10, Count: 1, Systems: []peerSystem{
		{Name: "queuey", Module: "github.com/queuey-go/queuey", Version: "this tree", Rates: series{100}, ServerUs: series{1}, SelfUs: series{2}},
		{Name: "asynq", Module: "github.com/hibiken/asynq", Version: "v0.26.0", Error: "dial tcp: refused"},
	}}
	var b strings.Builder
	writePeers(&b, p)
	if !strings.Contains(b.String(), "| asynq | `github.com/hibiken/asynq` v0.26.0 | failed: dial tcp: refused |") {
		t.Errorf("no failure row in\n%s", b.String())
	}
	if rows := peerSummaryRows(p); len(rows) != 0 {
		t.Errorf("a failed peer in the summary: %+v", rows)
	}
}

func TestReadPeersRejectsEmptyAndBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"empty.json": `{"systems": []}`, "bad.json": `{`} {
		path := filepath.Join(dir, name)
		_ = os.WriteFile(path, []byte(text), 0o644)
		if _, err := readPeers(path); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
