package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readmeText is a README with the summary markers.
const readmeText = "# queuey\r\n\nIntro.\n\n## Benchmarks\n\nText before.\n\n" +
	summaryBegin + "\nold | table\n" + summaryEnd + "\n\nText after, ünïcode, no newline at the end"

func TestReplaceSummaryKeepsTheRestByteForByte(t *testing.T) {
	out, err := replaceSummary([]byte(readmeText), "new block\n")
	if err != nil {
		t.Fatal(err)
	}
	before := readmeText[:strings.Index(readmeText, summaryBegin)+len(summaryBegin)+1]
	after := readmeText[strings.Index(readmeText, summaryEnd):]
	if want := before + "new block\n" + after; string(out) != want {
		t.Errorf("got\n%q\nwant\n%q", out, want)
	}
	again, err := replaceSummary(out, "new block\n")
	if err != nil || string(again) != string(out) {
		t.Errorf("a second replacement changed the file: %v\n%q", err, again)
	}
}

func TestReplaceSummaryFailsOnBadMarkers(t *testing.T) {
	for name, text := range map[string]string{
		"no markers":   "# README\n",
		"no begin":     "a\n" + summaryEnd + "\n",
		"no end":       summaryBegin + "\nb\n",
		"out of order": summaryEnd + "\nx\n" + summaryBegin + "\n",
		"two begins":   summaryBegin + "\n" + summaryBegin + "\n" + summaryEnd + "\n",
		"one line":     summaryBegin + " " + summaryEnd + "\n",
	} {
		if _, err := replaceSummary([]byte(text), "x\n"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	_, err := replaceSummary([]byte("# README\n"), "x\n")
	if err == nil || !strings.Contains(err.Error(), summaryBegin) {
		t.Errorf("the error does not name the missing marker: %v", err)
	}
}

func TestWriteReadmeRewritesOnlyTheBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(path, []byte(readmeText), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := fixtureReport(t, []int{1, 5}, 2)
	if err := writeReadme(path, "BENCHMARKS.md", rep); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	text := string(got)
	if !strings.HasPrefix(text, readmeText[:strings.Index(readmeText, summaryBegin)]) ||
		!strings.HasSuffix(text, readmeText[strings.Index(readmeText, summaryEnd):]) {
		t.Errorf("the text around the block changed:\n%s", text)
	}
	for _, want := range []string{
		"| [1 case 0: metric 1.0](BENCHMARKS.md#scenario-1-rabbitmq-end-to-end) | 5.53k/s | 4.32k/s | 1.28 | ≥ 0.95 PASS |",
		"0.95 vs machinery v2;",
		"tracing's hooks vs the bare OpenTelemetry calls",
		"[BENCHMARKS.md](BENCHMARKS.md)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}
	if strings.Contains(text, "metric 1.1") {
		t.Errorf("a row that is no headline is in the summary:\n%s", text)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
}

func TestWriteReadmeLeavesAFileWithoutMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "README.md")
	_ = os.WriteFile(path, []byte("# README\n"), 0o644)
	if err := writeReadme(path, "BENCHMARKS.md", fixtureReport(t, []int{1}, 1)); err == nil {
		t.Fatal("no error")
	}
	if got, _ := os.ReadFile(path); string(got) != "# README\n" {
		t.Errorf("file changed: %q", got)
	}
	if err := checkReadme(path); err == nil {
		t.Error("checkReadme: no error")
	}
}

func TestLinkFromIsRelativeToTheReadme(t *testing.T) {
	for _, c := range []struct{ from, doc, want string }{
		{"README.md", "BENCHMARKS.md", "BENCHMARKS.md"},
		{"/tmp/README.md", "/tmp/B.md", "B.md"},
		{"docs/README.md", "BENCHMARKS.md", "../BENCHMARKS.md"},
	} {
		if got := linkFrom(c.from, c.doc); got != c.want {
			t.Errorf("linkFrom(%q, %q) = %q, want %q", c.from, c.doc, got, c.want)
		}
	}
}
