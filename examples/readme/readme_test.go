package readme_test

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/clocktest"
	"github.com/queuey-go/queuey/examples/readme"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestARateLimitedCallRunsAgainThirtySecondsLater(t *testing.T) {
	clocktest.Run(t, readme.App, nil, func(t *testing.T, h *clocktest.Harness) {
		var calls atomic.Int32
		api := h.NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				w.WriteHeader(http.StatusTooManyRequests) // then 200
			}
		}))
		if err := queuey.Handle(h.Worker, readme.CallAPIWith(api.Client())); err != nil {
			t.Fatal(err)
		}
		id, err := h.Producer.Enqueue(t.Context(), readme.CallAPI{URL: api.URL})
		if err != nil {
			t.Fatal(err)
		}
		h.Advance(29 * time.Second) // ran once, at 0 s: 429, deferred
		h.Advance(time.Second)      // ran again, at 30 s: same attempt, top priority
		runs := h.Log.Of(id)
		if len(runs) != 2 || runs[1].Attempt != 1 || runs[1].Deferrals != 1 || runs[1].Priority != 10 {
			t.Fatalf("runs: %+v", runs)
		}
	})
}

// goBlocks are README.md's Go code blocks.
var goBlocks = regexp.MustCompile("(?s)```go\n(.*?)```")

// Every Go example of the README is code of this package, as it is here:
// compiled, vetted, and (the test above) run.
func TestTheREADMEShowsTheseExamplesAsTheyAre(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var sources strings.Builder
	for _, name := range []string{"readme.go", "readme_test.go"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		sources.Write(b)
	}
	blocks := goBlocks.FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("README.md shows no Go code")
	}
	for _, b := range blocks {
		if !strings.Contains(sources.String(), string(b[1])) {
			t.Errorf("README.md shows Go code that is not in examples/readme as it is:\n%s", b[1])
		}
	}
}
