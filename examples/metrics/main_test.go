package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/queuey-go/queuey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The first twelve jobs settle (six succeed, three are deferred for an
// hour, three dead-lettered), then a scrape of /metrics shows the depth
// gauges and the job metrics side by side.
func TestMetricsShowsTheDepthGaugesWithTheJobMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	a, err := start(ctx, "127.0.0.1:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := a.wait(); err != nil {
			t.Error(err)
		}
	}()
	outcomes := map[queuey.Result]int{}
	for range firstJobs {
		select {
		case r := <-a.settled:
			outcomes[r]++
		case <-ctx.Done():
			t.Fatalf("only %v settled: %v", outcomes, ctx.Err())
		}
	}

	body := scrape(t, "http://"+a.addr+"/metrics")
	q := `messaging_destination_name="metrics.work"`
	for _, want := range []string{
		`queuey_queue_ready{` + q + `} 0`,
		`queuey_queue_unacked{` + q + `} 0`,
		`queuey_queue_held{` + q + `} 3`,
		`queuey_queue_dead{` + q + `} 3`,
		`queuey_queue_suspects{` + q + `} 0`,
		`queuey_jobs_total{` + q + `,queuey_outcome="succeeded"} 6`,
		`queuey_jobs_total{` + q + `,queuey_outcome="deferred"} 3`,
		`queuey_jobs_total{` + q + `,queuey_outcome="dead_lettered"} 3`,
		`queuey_jobs_in_flight{` + q + `} 0`,
	} {
		if !hasSample(body, want) {
			t.Errorf("/metrics has no sample %s; its queuey lines:\n%s", want, queueyLines(body))
		}
	}
	if !strings.Contains(body, "# TYPE queuey_queue_held gauge") {
		t.Errorf("queuey_queue_held is not a gauge; its queuey lines:\n%s", queueyLines(body))
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(b)
}

// hasSample reports whether body has the sample want (name{labels}
// value), whatever other labels the exporter adds (its scope's) after
// want's.
func hasSample(body, want string) bool {
	name, rest, _ := strings.Cut(want, "{")
	labels, value, _ := strings.Cut(rest, "} ")
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{(.*,)?` + labelsPattern(labels) + `(,.*)?\} ` + regexp.QuoteMeta(value) + `$`)
	return re.MatchString(body)
}

// labelsPattern matches the labels given, in order, with others between.
func labelsPattern(labels string) string {
	var parts []string
	for _, l := range strings.Split(labels, ",") {
		parts = append(parts, regexp.QuoteMeta(l))
	}
	return strings.Join(parts, `(,.*)?,`)
}

func queueyLines(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "queuey_") || strings.HasPrefix(l, "# TYPE queuey_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
