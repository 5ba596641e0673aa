package mockctx_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"go.uber.org/goleak"

	"github.com/queuey-go/queuey/internal/mockctx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errStop = errors.New("stopped by the test")

// A ctx ends at its deadline, not before, with context.DeadlineExceeded
// as its error and its cause, and a child made of it by the standard
// library ends with it.
func TestACtxEndsAtItsDeadline(t *testing.T) {
	mock := clock.NewMock()
	ctx, cancel := mockctx.Guard(mock).WithTimeout(t.Context(), time.Minute)
	defer cancel()
	child, stopChild := context.WithCancel(ctx)
	defer stopChild()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(mock.Now().Add(time.Minute)) {
		t.Errorf("deadline %v (%v), want a minute from now", d, ok)
	}
	mock.Add(time.Minute - time.Millisecond)
	if err := ctx.Err(); err != nil {
		t.Fatalf("ended before its deadline: %v", err)
	}
	mock.Add(time.Millisecond)
	<-ctx.Done()
	<-child.Done()
	for name, err := range map[string]error{"error": ctx.Err(), "cause": context.Cause(ctx), "child's error": child.Err(), "child's cause": context.Cause(child)} {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want context.DeadlineExceeded", name, err)
		}
	}
}

// A ctx whose parent ends first ends with the parent's error and cause;
// one cancelled ends with context.Canceled; one due when it is made has
// ended already.
func TestACtxEndsWithItsParentOrItsCancel(t *testing.T) {
	mock := clock.NewMock()
	parent, stop := context.WithCancelCause(t.Context())
	ctx, cancel := mockctx.WithDeadline(mock, parent, mock.Now().Add(time.Hour))
	defer cancel()
	stop(errStop)
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), errStop) {
		t.Errorf("after the parent's end: error %v, cause %v; want context.Canceled and the parent's cause", ctx.Err(), context.Cause(ctx))
	}

	ctx, cancel = mockctx.WithDeadline(mock, t.Context(), mock.Now().Add(time.Hour))
	cancel()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("cancelled: error %v, want context.Canceled", ctx.Err())
	}
	mock.Add(time.Hour) // its timer was stopped: nothing more happens
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("cancelled, then past its deadline: error %v, want context.Canceled still", ctx.Err())
	}

	ctx, cancel = mockctx.WithDeadline(mock, t.Context(), mock.Now())
	defer cancel()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("due when made: error %v, want context.DeadlineExceeded", ctx.Err())
	}
}

// A parent whose deadline comes sooner keeps it.
func TestAParentsSoonerDeadlineIsKept(t *testing.T) {
	mock := clock.NewMock()
	guarded := mockctx.Guard(mock)
	parent, stop := guarded.WithTimeout(t.Context(), time.Second)
	defer stop()
	ctx, cancel := guarded.WithTimeout(parent, time.Hour)
	defer cancel()
	if d, _ := ctx.Deadline(); !d.Equal(mock.Now().Add(time.Second)) {
		t.Errorf("deadline %v, want the parent's, a second from now", d)
	}
	mock.Add(time.Second)
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("error %v, want the parent's context.DeadlineExceeded", ctx.Err())
	}
}

// Its error is read under the lock it is written under: reading it while
// the clock's move ends it is no data race (run under -race).
func TestACtxsErrorIsReadWhileTheClockEndsIt(t *testing.T) {
	mock := clock.NewMock()
	ctx, cancel := mockctx.Guard(mock).WithTimeout(t.Context(), time.Second)
	defer cancel()
	read := make(chan error)
	go func() {
		for ctx.Err() == nil {
			runtime.Gosched()
		}
		read <- ctx.Err()
	}()
	mock.Add(time.Second)
	if err := <-read; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("read %v, want context.DeadlineExceeded", err)
	}
}

// Guard leaves a clock that is not a *clock.Mock as it is.
func TestGuardLeavesOtherClocksAlone(t *testing.T) {
	real := clock.New()
	if mockctx.Guard(real) != real {
		t.Error("Guard wrapped the real clock")
	}
}

// A ctx made due of a parent that has ended ends as the parent did: its
// error and its cause agree.
func TestACtxOfAnEndedParentEndsAsItsParent(t *testing.T) {
	mock := clock.NewMock()
	parent, stop := context.WithCancelCause(t.Context())
	stop(errStop)
	ctx, cancel := mockctx.WithDeadline(mock, parent, mock.Now())
	defer cancel()
	if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), errStop) {
		t.Errorf("error %v, cause %v; want context.Canceled and the parent's cause", ctx.Err(), context.Cause(ctx))
	}
}

// A ctx printed while the clock ends it reads nothing without a lock (run
// under -race), and names its deadline.
func TestACtxPrintsItsDeadline(t *testing.T) {
	mock := clock.NewMock()
	ctx, cancel := mockctx.Guard(mock).WithTimeout(t.Context(), time.Second)
	defer cancel()
	printed := make(chan string)
	go func() { printed <- fmt.Sprint(ctx) }()
	mock.Add(time.Second)
	if s := <-printed; !strings.Contains(s, "WithDeadline("+mock.Now().String()) {
		t.Errorf("printed %q; want its deadline named", s)
	}
}
