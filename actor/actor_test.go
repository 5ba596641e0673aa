package actor_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/queuey-go/queuey/actor"
	"github.com/queuey-go/queuey/internal/panicniltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder returns an actor that appends each message to *got, crashing on
// "panic" and "fail" so tests can script a crash in the message stream.
func recorder(got *[]string) *actor.Actor[string] {
	return actor.New("rec", 8, func(_ context.Context, msg string) error {
		switch msg {
		case "panic":
			panic("boom")
		case "fail":
			return errBoom
		}
		*got = append(*got, msg)
		return nil
	})
}

var errBoom = errors.New("boom")

func sendAll(t *testing.T, a *actor.Actor[string], msgs ...string) {
	t.Helper()
	for _, m := range msgs {
		if err := a.Send(t.Context(), m); err != nil {
			t.Fatalf("Send(%q) = %v, want nil", m, err)
		}
	}
}

func TestHandlesInOrderThenStops(t *testing.T) {
	var got []string
	a := recorder(&got)
	sendAll(t, a, "a", "b", "c")
	a.Stop() // queued messages are still handled, then Run returns
	if err := a.Run(t.Context()); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, got); diff != "" {
		t.Errorf("handled (-want +got):\n%s", diff)
	}
}

func TestCrash(t *testing.T) {
	for _, tc := range []struct {
		name      string
		receive   actor.Receive[int]
		wantMsg   string
		wantPanic any
		wantIs    error
	}{
		{
			name:      "panic with a value",
			receive:   func(context.Context, int) error { panic("boom") },
			wantMsg:   "actor hold crashed: panic: boom",
			wantPanic: "boom",
		},
		{
			name:      "panic with an error",
			receive:   func(context.Context, int) error { panic(errBoom) },
			wantMsg:   "actor hold crashed: panic: boom",
			wantPanic: errBoom,
			wantIs:    errBoom,
		},
		{
			name:    "returned error",
			receive: func(context.Context, int) error { return errBoom },
			wantMsg: "actor hold crashed: boom",
			wantIs:  errBoom,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := actor.New("hold", 1, tc.receive)
			if err := a.Send(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			err := a.Run(t.Context())

			var crash *actor.CrashError
			if !errors.As(err, &crash) {
				t.Fatalf("Run = %v (%T), want a *CrashError", err, err)
			}
			if got := crash.Error(); got != tc.wantMsg {
				t.Errorf("Error() = %q, want %q", got, tc.wantMsg)
			}
			if crash.Actor != "hold" || crash.Panic != tc.wantPanic {
				t.Errorf("CrashError{Actor: %q, Panic: %v}, want {Actor: %q, Panic: %v}", crash.Actor, crash.Panic, "hold", tc.wantPanic)
			}
			if gotStack, wantStack := len(crash.Stack) > 0, tc.wantPanic != nil; gotStack != wantStack {
				t.Errorf("has stack = %v, want %v", gotStack, wantStack)
			}
			if tc.wantPanic != nil && !strings.Contains(string(crash.Stack), "actor_test.go") {
				t.Errorf("stack does not show the panicking receive:\n%s", crash.Stack)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false, want true", err, tc.wantIs)
			}
		})
	}
}

func TestRestartHandlesMessagesQueuedBeforeTheCrash(t *testing.T) {
	for _, crash := range []string{"panic", "fail"} {
		t.Run(crash, func(t *testing.T) {
			var got []string
			a := recorder(&got)
			sendAll(t, a, "a", crash, "b", "c")

			if err := a.Run(t.Context()); err == nil {
				t.Fatalf("first Run = nil, want a crash")
			}
			a.Stop()
			if err := a.Run(t.Context()); err != nil { // the restart
				t.Fatalf("second Run = %v, want nil", err)
			}
			if diff := cmp.Diff([]string{"a", "b", "c"}, got); diff != "" {
				t.Errorf("handled (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSendAfterStop(t *testing.T) {
	a := actor.New("hold", 1, func(context.Context, Query) error { return nil })
	a.Stop()
	a.Stop() // idempotent
	if err := a.Send(t.Context(), Query{}); !errors.Is(err, actor.ErrStopped) {
		t.Errorf("Send = %v, want ErrStopped", err)
	}
	_, err := actor.Ask(t.Context(), a, func(r actor.Reply[int]) Query { return Query{Reply: r} })
	if !errors.Is(err, actor.ErrStopped) {
		t.Errorf("Ask = %v, want ErrStopped", err)
	}
}

func TestConcurrentRunIsRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := actor.New("hold", 1, func(context.Context, int) error { return nil })
		ctx, cancel := context.WithCancel(t.Context())
		first := make(chan error, 1)
		go func() { first <- a.Run(ctx) }()
		synctest.Wait() // the first Run is now waiting in its mailbox

		if err := a.Run(ctx); !errors.Is(err, actor.ErrRunning) {
			t.Errorf("second Run = %v, want ErrRunning", err)
		}
		cancel()
		if err := <-first; err != nil {
			t.Errorf("first Run after cancel = %v, want nil", err)
		}
	})
}

func TestSendBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []string
		a := recorder(&got)
		for range 8 { // fill the mailbox; nothing is running yet
			sendAll(t, a, "x")
		}
		sent := make(chan error, 1)
		go func() { sent <- a.Send(t.Context(), "last") }()
		synctest.Wait()
		select {
		case err := <-sent:
			t.Fatalf("Send to a full mailbox returned %v, want it to block", err)
		default:
		}

		full, cancel := context.WithCancel(t.Context())
		cancel()
		if err := a.Send(full, "never"); !errors.Is(err, context.Canceled) {
			t.Errorf("Send with a cancelled ctx = %v, want context.Canceled", err)
		}

		ctx, stop := context.WithCancel(t.Context())
		ran := make(chan error, 1)
		go func() { ran <- a.Run(ctx) }()
		if err := <-sent; err != nil { // the loop made room
			t.Errorf("blocked Send = %v, want nil", err)
		}
		synctest.Wait()
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		if n := len(got); n != 9 || got[8] != "last" {
			t.Errorf("handled %d messages ending %q, want 9 ending %q", n, got[n-1], "last")
		}
	})
}

// A receive that panics with nil under GODEBUG=panicnil=1, where recover
// gives nil, has crashed all the same: the actor does not go on to its
// next message as if the receive had returned. The test runs itself again
// with the setting.
func TestAPanicWithNilUnderPanicnilIsACrash(t *testing.T) {
	if !panicniltest.Under(t) {
		return
	}
	a := actor.New("hold", 1, func(context.Context, int) error { panic(nil) })
	if err := a.Send(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	a.Stop()
	var crash *actor.CrashError
	if err := a.Run(t.Context()); !errors.As(err, &crash) {
		t.Fatalf("Run = %v, want a *CrashError", err)
	}
	if _, ok := crash.Panic.(*runtime.PanicNilError); !ok {
		t.Errorf("CrashError.Panic = %#v, want a *runtime.PanicNilError", crash.Panic)
	}
}
