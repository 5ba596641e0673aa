package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/queuey-go/queuey/broker"
)

// evilKind would, printed raw, turn the terminal red, ring its bell and
// start a row of its own.
const evilKind = "evil\x1b[31m\a\nfake-row"

// TestWireTextCannotDriveTheTerminal: what a dead letter carries (job id,
// kind, reason, correlation id, headers, payload) comes from the wire, and
// list and show print it escaped: no control byte reaches the terminal
// and no field starts a line of its own.
func TestWireTextCannotDriveTheTerminal(t *testing.T) {
	f := newFixture(t, jobs)
	backend := f.dial(t)
	defer backend.Close()
	env := broker.NewEnvelope(evilKind, f.queue, json.RawMessage("{\"note\":\"café 日本 \u009b2J\",\"title\":\"\\u001b]0;x\"}"), time.Now())
	env.CorrelationID = "corr\r\x07\u0085fake-row"
	msg, err := env.Message()
	must(t, err)
	msg.Headers = map[string]string{"x-evil\x1b": "\u009b31mfake-row\n"}
	must(t, backend.DeadLetter(t.Context(), broker.DeadLetter{Message: msg, Reason: "boom\x1b[2J\x7f\xff\nfake-row"}))

	r := cli(t, "", f.args("list")...)
	if r.code != exitOK {
		t.Fatalf("list: exit %d, want 0", r.code)
	}
	wantSafe(t, "list", r.stdout)
	if lines := strings.Count(r.stdout, "\n"); lines != 3 {
		t.Errorf("list printed %d lines, want 3 (the header, one row, the count)", lines)
	}
	if want := `evil\x1b[31m\a\nfake-row`; !strings.Contains(r.stdout, want) {
		t.Errorf("list shows no kind %s", want)
	}

	r = cli(t, "", f.args("show", "-id", env.JobID)...)
	if r.code != exitOK {
		t.Fatalf("show: exit %d, want 0", r.code)
	}
	wantSafe(t, "show", r.stdout)
	for _, want := range []string{`kind:        evil\x1b[31m\a\nfake-row`, "café 日本", `\u009b2J`, `corr\r\a\u0085fake-row`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show does not print %s", want)
		}
	}

	r = cli(t, "", f.args("list", "-json")...)
	wantSafe(t, "list -json", r.stdout)
	if list := f.listed(t); len(list) != 1 || list[0].Kind != evilKind || list[0].CorrelationID != env.CorrelationID {
		t.Errorf("list -json: %+v, want the kind and correlation id as they are, escaped in JSON", list)
	}
}

// wantSafe fails the test if out holds a byte or rune a terminal acts on
// (other than the ends of lines), or a line that a field started.
func wantSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s printed invalid UTF-8: %q", what, out)
	}
	for i, r := range out {
		if r != '\n' && (r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f) {
			t.Errorf("%s printed the control character %U at byte %d: %q", what, r, i, out)
			return
		}
	}
	for line := range strings.Lines(out) {
		if strings.HasPrefix(strings.TrimSpace(line), "fake-row") {
			t.Errorf("%s printed a line a dead letter's field started: %q", what, line)
		}
	}
}
