package mailbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/queuey-go/queuey/mailbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFIFO(t *testing.T) {
	mb := mailbox.New[int](3)
	ctx := t.Context()
	for i := range 3 {
		if err := mb.Put(ctx, i); err != nil {
			t.Fatalf("Put(%d) = %v, want nil", i, err)
		}
	}
	if got := mb.Len(); got != 3 {
		t.Errorf("Len() = %d, want 3", got)
	}
	if diff := cmp.Diff([]int{0, 1, 2}, getN(t, mb, 3)); diff != "" {
		t.Errorf("Get order (-want +got):\n%s", diff)
	}
}

func TestCapacity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int
		want     int
	}{
		{"negative is one", -3, 1},
		{"zero is one", 0, 1},
		{"one", 1, 1},
		{"five", 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mb := mailbox.New[int](tc.capacity)
				for i := range tc.want {
					if err := mb.Put(t.Context(), i); err != nil {
						t.Fatalf("Put #%d = %v, want nil", i, err)
					}
				}
				full, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				if err := mb.Put(full, 99); !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Put on a full mailbox = %v, want it to wait until its deadline", err)
				}
				if got := mb.Len(); got != tc.want {
					t.Errorf("Len() = %d, want %d", got, tc.want)
				}
			})
		})
	}
}

func TestPutBlocksWhileFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mb := mailbox.New[string](1)
		ctx := t.Context()
		if err := mb.Put(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		putDone := make(chan error, 1)
		go func() { putDone <- mb.Put(ctx, "b") }()

		synctest.Wait()
		select {
		case err := <-putDone:
			t.Fatalf("Put on a full mailbox returned %v, want it to block", err)
		default:
		}

		if diff := cmp.Diff([]string{"a"}, getN(t, mb, 1)); diff != "" {
			t.Errorf("first Get (-want +got):\n%s", diff)
		}
		if err := <-putDone; err != nil {
			t.Errorf("blocked Put = %v after a Get, want nil", err)
		}
		if diff := cmp.Diff([]string{"b"}, getN(t, mb, 1)); diff != "" {
			t.Errorf("second Get (-want +got):\n%s", diff)
		}
	})
}

func TestBlockedCallReturnsWhenWoken(t *testing.T) {
	for _, tc := range []struct {
		name string
		wake func(cancel context.CancelFunc, mb *mailbox.Mailbox[int])
		want error
	}{
		{"ctx cancelled", func(cancel context.CancelFunc, _ *mailbox.Mailbox[int]) { cancel() }, context.Canceled},
		{"mailbox closed", func(_ context.CancelFunc, mb *mailbox.Mailbox[int]) { mb.Close() }, mailbox.ErrClosed},
	} {
		for _, call := range []struct {
			name string
			prep func(mb *mailbox.Mailbox[int]) // makes the call block
			do   func(ctx context.Context, mb *mailbox.Mailbox[int]) error
		}{
			{"Put", func(mb *mailbox.Mailbox[int]) { _ = mb.Put(context.Background(), 0) }, func(ctx context.Context, mb *mailbox.Mailbox[int]) error { return mb.Put(ctx, 1) }},
			{"Get", func(*mailbox.Mailbox[int]) {}, func(ctx context.Context, mb *mailbox.Mailbox[int]) error {
				_, err := mb.Get(ctx)
				return err
			}},
		} {
			t.Run(call.name+"/"+tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					mb := mailbox.New[int](1)
					call.prep(mb)
					ctx, cancel := context.WithCancel(t.Context())
					defer cancel()
					done := make(chan error, 1)
					go func() { done <- call.do(ctx, mb) }()

					synctest.Wait()
					select {
					case err := <-done:
						t.Fatalf("%s returned %v before being woken, want it to block", call.name, err)
					default:
					}
					tc.wake(cancel, mb)
					if err := <-done; !errors.Is(err, tc.want) {
						t.Errorf("%s = %v, want %v", call.name, err, tc.want)
					}
				})
			})
		}
	}
}

func TestGetAfterCloseDrainsThenErrClosed(t *testing.T) {
	mb := mailbox.New[int](4)
	ctx := t.Context()
	_ = mb.Put(ctx, 0)
	_ = mb.Put(ctx, 1)
	_ = mb.Put(ctx, 2)
	mb.Close()
	mb.Close() // idempotent

	if diff := cmp.Diff([]int{0, 1, 2}, getN(t, mb, 3)); diff != "" {
		t.Errorf("Get after Close (-want +got):\n%s", diff)
	}
	if _, err := mb.Get(ctx); !errors.Is(err, mailbox.ErrClosed) {
		t.Errorf("Get on a closed, empty mailbox = %v, want ErrClosed", err)
	}
}

func TestPutAfterClose(t *testing.T) {
	mb := mailbox.New[int](4)
	mb.Close()
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()

	if err := mb.Put(t.Context(), 1); !errors.Is(err, mailbox.ErrClosed) {
		t.Errorf("Put = %v, want ErrClosed", err)
	}
	if err := mb.Put(cancelled, 1); !errors.Is(err, mailbox.ErrClosed) {
		t.Errorf("Put with a cancelled ctx = %v, want ErrClosed (closed is checked first)", err)
	}
	if got := mb.Len(); got != 0 {
		t.Errorf("Len() = %d, want 0", got)
	}
}

func TestCancelledCtxNeverEnqueues(t *testing.T) {
	mb := mailbox.New[int](4)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := mb.Put(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Put = %v, want context.Canceled", err)
	}
	if got := mb.Len(); got != 0 {
		t.Errorf("Len() = %d, want 0", got)
	}
}

func TestConcurrentProducersAndConsumersLoseNothing(t *testing.T) {
	const producers, consumers, perProducer = 8, 4, 500
	mb := mailbox.New[int](3) // small, so producers keep hitting backpressure
	ctx := t.Context()

	var produced sync.WaitGroup
	for p := range producers {
		produced.Go(func() {
			for i := range perProducer {
				if err := mb.Put(ctx, p*perProducer+i); err != nil {
					t.Errorf("Put: %v", err)
					return
				}
			}
		})
	}
	got := make(chan []int, consumers)
	for range consumers {
		go func() {
			var mine []int
			for {
				v, err := mb.Get(ctx)
				if err != nil {
					got <- mine
					return
				}
				mine = append(mine, v)
			}
		}()
	}
	produced.Wait()
	mb.Close()

	seen := make([]int, producers*perProducer)
	for range consumers {
		for _, v := range <-got {
			seen[v]++
		}
	}
	for v, n := range seen {
		if n != 1 {
			t.Errorf("message %d received %d times, want 1", v, n)
		}
	}
}

// getN takes n messages, failing the test if any Get errs.
func getN[T any](t *testing.T, mb *mailbox.Mailbox[T], n int) []T {
	t.Helper()
	out := make([]T, 0, n)
	for range n {
		v, err := mb.Get(t.Context())
		if err != nil {
			t.Fatalf("Get = %v, want a message", err)
		}
		out = append(out, v)
	}
	return out
}

// TryPut never waits: it takes what fits, says ErrFull past the capacity
// and ErrClosed once closed; what it took comes out of TryGet and Receive
// in order.
func TestTryPutAndTryGetNeverWait(t *testing.T) {
	mb := mailbox.New[int](2)
	if got := mb.Cap(); got != 2 {
		t.Fatalf("Cap() = %d, want 2", got)
	}
	for i := range 2 {
		if err := mb.TryPut(i); err != nil {
			t.Fatalf("TryPut(%d) = %v, want nil", i, err)
		}
	}
	if err := mb.TryPut(2); !errors.Is(err, mailbox.ErrFull) {
		t.Fatalf("TryPut on a full mailbox = %v, want ErrFull", err)
	}
	if v, ok := mb.TryGet(); !ok || v != 0 {
		t.Fatalf("TryGet() = %d, %v, want 0, true", v, ok)
	}
	select {
	case v := <-mb.Receive():
		if v != 1 {
			t.Fatalf("<-Receive() = %d, want 1", v)
		}
	default:
		t.Fatal("Receive() had nothing, want 1")
	}
	if v, ok := mb.TryGet(); ok {
		t.Fatalf("TryGet() on an empty mailbox = %d, true, want false", v)
	}
	mb.Close()
	if err := mb.TryPut(3); !errors.Is(err, mailbox.ErrClosed) {
		t.Fatalf("TryPut after Close = %v, want ErrClosed", err)
	}
}
