package queuey

import (
	"context"
	"errors"
	"sync"
	"testing"
)

type ctxKey struct{}

// A job's ctx is its task's until it is told: the task's values, its
// end; told, it ends with the cause ErrJobCancelled, whether its Done was
// asked for before or not.
func TestAJobCtxIsItsTasksUntilItIsTold(t *testing.T) {
	for _, askedFirst := range []bool{false, true} {
		parent := context.WithValue(context.Background(), ctxKey{}, "v")
		j := &jobCtx{Context: parent, id: "job"}
		if askedFirst {
			_ = j.Done()
		}
		if j.Err() != nil || j.Value(ctxKey{}) != "v" || j.told() {
			t.Fatalf("asked first %v: before tell: err %v, value %v, told %v", askedFirst, j.Err(), j.Value(ctxKey{}), j.told())
		}
		j.tell()
		<-j.Done()
		if !errors.Is(j.Err(), context.Canceled) || !errors.Is(context.Cause(j), ErrJobCancelled) || !j.told() || j.Value(ctxKey{}) != "v" {
			t.Fatalf("asked first %v: after tell: err %v, cause %v, told %v", askedFirst, j.Err(), context.Cause(j), j.told())
		}
		j.end()
	}
}

// The task's end reaches the job's ctx, before and after its Done is
// asked for; a job over is not told, and its Done, asked for late, is
// closed.
func TestAJobCtxEndsWithItsTaskAndNotAfterItsJob(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	j := &jobCtx{Context: parent, id: "job"}
	cancel(errStopTimedOut)
	if !errors.Is(context.Cause(j), errStopTimedOut) {
		t.Fatalf("cause %v, want the task's", context.Cause(j))
	}
	<-j.Done()

	over := &jobCtx{Context: context.Background(), id: "over"}
	over.end()
	over.tell()
	<-over.Done()
	if over.told() {
		t.Fatal("a job over was told")
	}
}

// Told while its handler asks for Done, Err and Value from goroutines of
// its own, and ended: no race, one cancelCtx (every Done is the same
// channel).
func TestAJobCtxToldWhileItsHandlerLooks(t *testing.T) {
	j := &jobCtx{Context: context.Background(), id: "job"}
	var wg sync.WaitGroup
	dones := make(chan (<-chan struct{}), 8)
	for range 8 {
		wg.Go(func() {
			d := j.Done()
			_, _ = j.Err(), j.Value(ctxKey{})
			dones <- d
			<-d
		})
	}
	j.tell()
	wg.Wait()
	j.end()
	close(dones)
	first := <-dones
	for d := range dones {
		if d != first {
			t.Fatal("Done gave two channels: two cancelCtx were made")
		}
	}
}
