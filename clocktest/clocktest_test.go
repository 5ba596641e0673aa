package clocktest_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/clocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type ping struct{ N int }

var pings = queuey.Queue{Name: "pings", Prefetch: 1}

func (ping) Kind() string        { return "ping" }
func (ping) Queue() queuey.Queue { return pings }

var set = queuey.QueueSet{Prefix: "ct", Queues: []queuey.Queue{pings}}

func TestAdvanceRunsEverythingThatFallsDueAndReturnsIdle(t *testing.T) {
	clocktest.Run(t, set, nil, func(t *testing.T, h *clocktest.Harness) {
		// Each run defers the job by one more second than the last.
		if err := queuey.Handle(h.Worker, func(ctx context.Context, p ping, jc queuey.JobContext) error {
			if jc.Deferrals < 3 {
				return queuey.Defer(time.Duration(jc.Deferrals+1)*time.Second, "again")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		id, err := h.Producer.Enqueue(t.Context(), ping{})
		if err != nil {
			t.Fatal(err)
		}
		h.Advance(6 * time.Second) // 1 + 2 + 3: every deferral falls within
		runs := h.Log.Of(id)
		var offsets []time.Duration
		for _, r := range runs {
			offsets = append(offsets, r.At.Sub(clocktest.Epoch))
		}
		want := []time.Duration{0, time.Second, 3 * time.Second, 6 * time.Second}
		if len(offsets) != len(want) {
			t.Fatalf("run times: got %v, want %v", offsets, want)
		}
		for i := range want {
			if offsets[i] != want[i] {
				t.Errorf("run %d at %v, want %v", i, offsets[i], want[i])
			}
		}
		if got := h.Log.Order(); len(got) != 4 || got[3] != id {
			t.Errorf("order: got %v", got)
		}
		if h.Backend.InFlight("ct.pings") != 0 || h.Backend.Held("ct.pings") != 0 {
			t.Errorf("not idle after Advance")
		}
	})
}

func TestWaitForLetsVirtualTimePass(t *testing.T) {
	clocktest.Run(t, set, nil, func(t *testing.T, h *clocktest.Harness) {
		if err := queuey.Handle(h.Worker, func(context.Context, ping, queuey.JobContext) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Producer.EnqueueAfter(t.Context(), ping{}, 42*time.Second); err != nil {
			t.Fatal(err)
		}
		h.WaitFor("the delayed ping", func() bool { return h.Log.Len() == 1 })
		if at := h.Log.Runs()[0].At.Sub(clocktest.Epoch); at != 42*time.Second {
			t.Errorf("ran at %v, want 42s", at)
		}
	})
}

// childEnv names, in a child process of runChild, the test it is to run.
const childEnv = "CLOCKTEST_CHILD"

// childOnly skips t unless this process is runChild's child for it: such a
// test ends the process, or fails, on purpose.
func childOnly(t *testing.T) {
	t.Helper()
	if os.Getenv(childEnv) != t.Name() {
		t.Skip("run in a child process by the test that names it")
	}
}

// runChild runs the test named name in a child process of this test
// binary (as the Go standard library tests a crash), with env added to an
// environment without QUEUEY_SEED, and returns its output, how long it ran
// and how it exited.
func runChild(t *testing.T, name string, env ...string) (string, time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.timeout=1m")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, clocktest.SeedEnv+"=") || strings.HasPrefix(kv, childEnv+"=")
	})
	cmd.Env = append(cmd.Env, append(env, childEnv+"="+name)...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	return string(out), time.Since(start), err
}
