package actor_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/queuey-go/queuey/actor"
)

// Query is a message that asks a counter for its total after adding Add.
type Query struct {
	Add   int
	Reply actor.Reply[int]
}

func TestAsk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		total := 0
		a := actor.New("counter", 4, func(_ context.Context, q Query) error {
			total += q.Add
			if total < 0 {
				q.Reply.Send(0, errBoom)
				return nil
			}
			q.Reply.Send(total, nil)
			q.Reply.Send(-1, nil) // ignored: a Reply delivers at most once
			return nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() { _ = a.Run(ctx) }()

		for _, tc := range []struct {
			add     int
			want    int
			wantErr error
		}{
			{add: 2, want: 2},
			{add: 3, want: 5},
			{add: -10, wantErr: errBoom},
		} {
			got, err := actor.Ask(ctx, a, func(r actor.Reply[int]) Query { return Query{Add: tc.add, Reply: r} })
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("Ask(add %d) = %d, %v; want %d, %v", tc.add, got, err, tc.want, tc.wantErr)
			}
		}
	})
}

func TestAskReturnsWhenCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := actor.New("silent", 1, func(context.Context, Query) error { return nil }) // never answers
		runCtx, stop := context.WithCancel(t.Context())
		defer stop()
		go func() { _ = a.Run(runCtx) }()

		ctx, cancel := context.WithCancel(t.Context())
		asked := make(chan error, 1)
		go func() {
			_, err := actor.Ask(ctx, a, func(r actor.Reply[int]) Query { return Query{Reply: r} })
			asked <- err
		}()
		synctest.Wait()
		select {
		case err := <-asked:
			t.Fatalf("Ask returned %v before ctx ended, want it to wait", err)
		default:
		}
		cancel()
		if err := <-asked; !errors.Is(err, context.Canceled) {
			t.Errorf("Ask = %v, want context.Canceled", err)
		}
	})
}

func TestZeroReplyDiscards(t *testing.T) {
	var r actor.Reply[int]
	r.Send(1, nil) // must neither block nor panic
}
