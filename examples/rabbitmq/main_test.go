package main

import (
	"cmp"
	"context"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/queuey-go/queuey/examples/internal/scratch"
	"github.com/queuey-go/queuey/examples/internal/scratch/scratchtest"
	"github.com/queuey-go/queuey/examples/internal/tourtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testOptions points the tour at QUEUEY_AMQP_URL, or the local broker, with
// queues of its own.
func testOptions() options {
	return options{url: cmp.Or(os.Getenv("QUEUEY_AMQP_URL"), defaultURL), prefix: scratch.Prefix("quickstart-test")}
}

func TestTour(t *testing.T) {
	o := testOptions()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var out strings.Builder
	made, err := run(ctx, o, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s\noutput:\n%s", err, scratchtest.NeedsBroker, out.String())
	}
	t.Logf("output:\n%s", out.String())
	lines := tourtest.Lines(out.String())

	tourtest.Check(t, lines, o.prefix)

	t.Run("the password is never printed", func(t *testing.T) {
		u, _ := url.Parse(o.url)
		if pw, ok := u.User.Password(); ok && strings.Contains(out.String(), ":"+pw+"@") {
			t.Errorf("the output shows the URL's password")
		}
	})

	t.Run("the queues it made are gone", func(t *testing.T) {
		for _, name := range []string{"jobs", "jobs.dead", "jobs.deferred.200", "api", "api.dead", "api.deferred.1000"} {
			if q := o.prefix + "." + name; !slices.Contains(made, q) {
				t.Errorf("queues made = %v, want %s among them", made, q)
			}
		}
		scratchtest.AssertGone(t, o.url, made)
	})
}

func TestInterruptedCleansUp(t *testing.T) {
	// Interrupted while the deferred call waits in its hold queue, the
	// tour stops and its queues are deleted all the same.
	o := testOptions()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	out := &cancelOn{line: "run  report 1", cancel: cancel}
	made, err := run(ctx, o, out)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("run = %v, want an interrupted error\n%s\noutput:\n%s", err, scratchtest.NeedsBroker, out.String())
	}
	if !slices.Contains(made, o.prefix+".api.deferred.1000") {
		t.Errorf("queues made = %v, want the API's hold queue among them", made)
	}
	scratchtest.AssertGone(t, o.url, made)
}

// cancelOn is an output that calls cancel once line is written: an
// interrupt at a known point of the tour, not at a guessed time.
type cancelOn struct {
	line   string
	cancel context.CancelFunc
	mu     sync.Mutex
	b      strings.Builder
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if strings.Contains(string(p), c.line) {
		c.cancel()
	}
	return c.b.Write(p)
}

func (c *cancelOn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}
