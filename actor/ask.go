package actor

import (
	"context"
	"fmt"
	"sync"
)

// Reply is the one-shot answer channel of an Ask. The actor keeps it in the
// message and calls Send once it has the answer. Copies share the channel.
// The zero Reply discards what is sent to it.
type Reply[R any] struct{ s *replyState[R] }

type replyState[R any] struct {
	once sync.Once
	ch   chan result[R] // buffered 1 so that Send never blocks the actor
}

type result[R any] struct {
	v   R
	err error
}

// newReply returns a Reply ready for one answer.
func newReply[R any]() Reply[R] {
	return Reply[R]{s: &replyState[R]{ch: make(chan result[R], 1)}}
}

// Send delivers the answer v, err. Only the first call delivers; later ones
// are ignored. Send never blocks, even if the asker has given up.
func (r Reply[R]) Send(v R, err error) {
	if r.s == nil {
		return
	}
	r.s.once.Do(func() { r.s.ch <- result[R]{v, err} })
}

// Ask sends build(reply) to a and waits for the actor to answer through
// reply. If ctx ends first it returns ctx's error, wrapped with the actor's
// name; an actor that crashes on the message never answers, so ctx is what
// bounds the wait. Send's errors (ErrStopped, ctx) are returned as they are.
func Ask[M, R any](ctx context.Context, a *Actor[M], build func(Reply[R]) M) (R, error) {
	var zero R
	reply := newReply[R]()
	if err := a.Send(ctx, build(reply)); err != nil {
		return zero, err
	}
	select {
	case res := <-reply.s.ch:
		return res.v, res.err
	case <-ctx.Done():
		return zero, fmt.Errorf("ask actor %s: %w", a.name, ctx.Err())
	}
}
