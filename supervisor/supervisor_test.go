package supervisor_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/queuey-go/queuey/internal/panicniltest"
	"github.com/queuey-go/queuey/supervisor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errBoom = errors.New("boom")

// Outcomes a test can make a child return with: send one on its kill channel.
var (
	fail     = func() error { return errBoom }
	finish   = func() error { return nil }
	panicked = func() error { panic("boom") }
)

// harness records what children do. Tests run inside a synctest bubble, with
// a mock clock the test advances; synctest.Wait tells when the supervisor
// and its children are idle, so every assertion is exact.
type harness struct {
	clock *clock.Mock
	mu    sync.Mutex
	start map[string]int // starts per child
	stops []string       // children that returned because their ctx ended, in order
	logs  lockedBuffer
}

func newHarness() *harness {
	return &harness{clock: clock.NewMock(), start: map[string]int{}}
}

// spec fills in the test clock, a captured logger and, unless set, a Rand
// returning 1 so that the backoff is exactly MinBackoff * 2^(n-1).
func (h *harness) spec(s supervisor.Spec) supervisor.Spec {
	s.Name = "worker"
	s.Clock = h.clock
	s.Logger = slog.New(slog.NewTextHandler(&h.logs, nil))
	if s.Rand == nil {
		s.Rand = func() float64 { return 1 }
	}
	return s
}

// child returns a Permanent child that runs until its ctx ends, or until the
// test sends it an outcome to return (or panic) with.
func (h *harness) child(name string) (supervisor.Child, chan<- func() error) {
	kill := make(chan func() error)
	return supervisor.Child{Name: name, Restart: supervisor.Permanent, Run: func(ctx context.Context) error {
		h.record(func() { h.start[name]++ })
		select {
		case <-ctx.Done():
			h.record(func() { h.stops = append(h.stops, name) })
			return nil
		case f := <-kill:
			return f()
		}
	}}, kill
}

func (h *harness) record(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f()
}

// check compares the starts and stops so far with want.
func (h *harness) check(t *testing.T, wantStarts map[string]int, wantStops []string) {
	t.Helper()
	synctest.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	if diff := cmp.Diff(wantStarts, h.start); diff != "" {
		t.Errorf("starts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantStops, h.stops); diff != "" {
		t.Errorf("stops (-want +got):\n%s", diff)
	}
}

// advance moves the mock clock and lets everything that was due run.
func (h *harness) advance(d time.Duration) {
	synctest.Wait() // timers are registered only once the loop is idle
	h.clock.Add(d)
	synctest.Wait()
}

// running is a Run in progress.
type running struct {
	cancel context.CancelFunc
	result chan error
}

func start(t *testing.T, s *supervisor.Supervisor) running {
	ctx, cancel := context.WithCancel(t.Context())
	r := running{cancel: cancel, result: make(chan error, 1)}
	go func() { r.result <- s.Run(ctx) }()
	synctest.Wait()
	return r
}

// stop cancels Run and returns its result.
func (r running) stop() error {
	r.cancel()
	return <-r.result
}

func (r running) assertRunning(t *testing.T) {
	t.Helper()
	synctest.Wait()
	select {
	case err := <-r.result:
		t.Fatalf("Run returned %v, want it still running", err)
	default:
	}
}

func TestOnlyTheExitedChildIsRestarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness()
		a, _ := h.child("a")
		b, killB := h.child("b")
		c, _ := h.child("c")
		r := start(t, supervisor.New(h.spec(supervisor.Spec{}), a, b, c))
		h.check(t, map[string]int{"a": 1, "b": 1, "c": 1}, nil)

		killB <- fail
		h.advance(100 * time.Millisecond)
		h.check(t, map[string]int{"a": 1, "b": 2, "c": 1}, nil)

		if err := r.stop(); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}

func TestEveryExitIsRestarted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		outcome   func() error
		wantStart int
	}{
		{"returns nil", finish, 2},
		{"fails", fail, 2},
		{"panics", panicked, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness()
				c, kill := h.child("c")
				r := start(t, supervisor.New(h.spec(supervisor.Spec{}), c))
				kill <- tc.outcome
				h.advance(time.Hour)
				h.check(t, map[string]int{"c": tc.wantStart}, nil)
				r.assertRunning(t)
				if err := r.stop(); err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
			})
		})
	}
}

func TestRestartWaitsTheBackoff(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rand       float64
		wantDelays []time.Duration
	}{
		{"full jitter factor", 1, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}},
		{"half jitter factor", 0.5, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 150 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness()
				c, kill := h.child("c")
				r := start(t, supervisor.New(h.spec(supervisor.Spec{
					MinBackoff: 100 * time.Millisecond,
					MaxBackoff: 300 * time.Millisecond,
					Intensity:  10,
					Period:     time.Hour,
					Rand:       func() float64 { return tc.rand },
				}), c))

				for i, delay := range tc.wantDelays {
					kill <- fail
					h.advance(delay - time.Nanosecond)
					h.check(t, map[string]int{"c": i + 1}, nil)
					h.advance(time.Nanosecond)
					h.check(t, map[string]int{"c": i + 2}, nil)
				}
				if err := r.stop(); err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
				if logs := h.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "delay="+tc.wantDelays[0].String()) {
					t.Errorf("logs do not show a WARN restart with the delay:\n%s", logs)
				}
			})
		})
	}
}

func TestPendingRestartIsAbandonedWhenCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness()
		c, kill := h.child("c")
		r := start(t, supervisor.New(h.spec(supervisor.Spec{}), c))
		kill <- fail
		synctest.Wait()
		if err := r.stop(); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		h.advance(time.Hour)
		h.check(t, map[string]int{"c": 1}, nil)
	})
}

func TestEscalation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness()
		a, _ := h.child("a")
		b, killB := h.child("queue:emails")
		c, _ := h.child("c")
		r := start(t, supervisor.New(h.spec(supervisor.Spec{
			Intensity: 2,
			Rand:      func() float64 { return 0 }, // restart at once
		}), a, b, c))

		for range 3 {
			killB <- fail
		}
		err := <-r.result

		var esc *supervisor.EscalationError
		if !errors.As(err, &esc) {
			t.Fatalf("Run = %v, want an *EscalationError", err)
		}
		want := &supervisor.EscalationError{Supervisor: "worker", Child: "queue:emails", Restarts: 3, Period: 10 * time.Second, Last: errBoom}
		if diff := cmp.Diff(*want, *esc, cmp.Comparer(func(x, y error) bool { return x == y })); diff != "" {
			t.Errorf("EscalationError (-want +got):\n%s", diff)
		}
		if got, want := err.Error(), "supervisor worker: child queue:emails restarted 3 times in 10s, giving up: boom"; got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}
		if !errors.Is(err, errBoom) {
			t.Errorf("errors.Is(%v, errBoom) = false, want true", err)
		}
		h.check(t, map[string]int{"a": 1, "queue:emails": 3, "c": 1}, []string{"c", "a"})
	})
}

func TestIntensityCountsOnlyThePeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness()
		c, kill := h.child("c")
		r := start(t, supervisor.New(h.spec(supervisor.Spec{
			Intensity: 1,
			Period:    time.Minute,
			Rand:      func() float64 { return 0 },
		}), c))

		kill <- fail
		h.advance(time.Minute) // the first restart leaves the window
		kill <- fail
		r.assertRunning(t)
		h.check(t, map[string]int{"c": 3}, nil)
		if err := r.stop(); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}

func TestPanickingChildIsRestartedWithThePanicInItsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness()
		c, kill := h.child("c")
		r := start(t, supervisor.New(h.spec(supervisor.Spec{Intensity: 1}), c))

		kill <- panicked
		h.advance(100 * time.Millisecond)
		h.check(t, map[string]int{"c": 2}, nil)
		if logs := h.logs.String(); !strings.Contains(logs, "child c panicked: boom") || !strings.Contains(logs, "stack=") {
			t.Errorf("restart log lacks the panic and its stack:\n%s", logs)
		}

		kill <- panicked // beyond the intensity: the panic comes back in the error
		err := <-r.result
		var crash *supervisor.CrashError
		if !errors.As(err, &crash) {
			t.Fatalf("Run = %v, want it to wrap a *CrashError", err)
		}
		if crash.Child != "c" || crash.Panic != "boom" || !strings.Contains(string(crash.Stack), "supervisor_test.go") {
			t.Errorf("CrashError{Child: %q, Panic: %v, Stack: %d bytes}, want child c, panic boom and a stack through the test", crash.Child, crash.Panic, len(crash.Stack))
		}
	})
}

// A child that panics with nil under GODEBUG=panicnil=1, where recover
// gives nil, has crashed all the same: beyond the intensity the crash
// comes back in Run's error, as any panic's. The test runs itself again
// with the setting.
func TestAChildPanickingWithNilUnderPanicnilHasCrashed(t *testing.T) {
	if !panicniltest.Under(t) {
		return
	}
	synctest.Test(t, func(t *testing.T) {
		h := newHarness()
		c, kill := h.child("c")
		r := start(t, supervisor.New(h.spec(supervisor.Spec{Intensity: 1}), c))
		kill <- func() error { panic(nil) }
		h.advance(100 * time.Millisecond)
		kill <- func() error { panic(nil) } // beyond the intensity
		var crash *supervisor.CrashError
		if err := <-r.result; !errors.As(err, &crash) {
			t.Fatalf("Run = %v, want it to wrap a *CrashError", err)
		}
		if _, ok := crash.Panic.(*runtime.PanicNilError); !ok {
			t.Errorf("CrashError.Panic = %#v, want a *runtime.PanicNilError", crash.Panic)
		}
	})
}

func TestGracefulStopInReverseOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness()
		var children []supervisor.Child
		for _, name := range []string{"a", "b", "c", "d"} {
			c, _ := h.child(name)
			children = append(children, c)
		}
		r := start(t, supervisor.New(h.spec(supervisor.Spec{}), children...))
		if err := r.stop(); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		h.check(t, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}, []string{"d", "c", "b", "a"})
	})
}

func TestChildThatIgnoresCtxIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness()
		release := make(chan struct{})
		stubborn := supervisor.Child{Name: "stubborn", Run: func(ctx context.Context) error {
			<-ctx.Done()
			<-release // ignores ctx until the test lets it go
			return nil
		}}
		b, _ := h.child("b")
		r := start(t, supervisor.New(h.spec(supervisor.Spec{ShutdownTimeout: 5 * time.Second}), stubborn, b))

		r.cancel()
		h.advance(5*time.Second - time.Nanosecond)
		r.assertRunning(t)
		h.advance(time.Nanosecond)

		err := <-r.result
		want := &supervisor.ShutdownError{Supervisor: "worker", Children: []string{"stubborn"}, Timeout: 5 * time.Second}
		var got *supervisor.ShutdownError
		if !errors.As(err, &got) {
			t.Fatalf("Run = %v, want a *ShutdownError", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ShutdownError (-want +got):\n%s", diff)
		}
		if msg, want := err.Error(), "supervisor worker: children did not stop within 5s: stubborn"; msg != want {
			t.Errorf("Error() = %q, want %q", msg, want)
		}
		h.check(t, map[string]int{"b": 1}, []string{"b"})
		close(release) // the bubble ends only when every goroutine has
	})
}

func TestInvalidSpec(t *testing.T) {
	ok := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name     string
		spec     supervisor.Spec
		children []supervisor.Child
		want     string
	}{
		{"unnamed child", supervisor.Spec{}, []supervisor.Child{{Run: ok}}, "child 0 has no name"},
		{"duplicate child", supervisor.Spec{}, []supervisor.Child{{Name: "a", Run: ok}, {Name: "a", Run: ok}}, `child name "a" is used twice`},
		{"nil Run", supervisor.Spec{}, []supervisor.Child{{Name: "a"}}, `child "a" has no Run`},
		{"unknown restart", supervisor.Spec{}, []supervisor.Child{{Name: "a", Run: ok, Restart: 7}}, "unknown restart policy 7"},
		{"restart other than Permanent", supervisor.Spec{}, []supervisor.Child{{Name: "a", Run: ok, Restart: 1}}, "unknown restart policy 1"},
		{"negative intensity", supervisor.Spec{Intensity: -1}, nil, "intensity -1 is negative"},
		{"negative period", supervisor.Spec{Period: -time.Second}, nil, "period -1s is negative"},
		{"backoff bounds swapped", supervisor.Spec{MinBackoff: time.Minute, MaxBackoff: time.Second}, nil, "min backoff 1m0s exceeds max backoff 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Name = "worker"
			err := supervisor.New(tc.spec, tc.children...).Run(t.Context())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer the supervisor's logger may write to while
// the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
