package memory

import (
	"context"
	"slices"

	"github.com/queuey-go/queuey/broker"
)

// listenerBuffer is how many messages a listener holds unread before it
// misses the next ones, as a broker drops what overflows a bounded queue.
const listenerBuffer = 256

var _ broker.Broadcaster = (*Backend)(nil)

// Broadcast implements broker.Broadcaster: body goes to every listener of
// topic that has room for it.
func (b *Backend) Broadcast(ctx context.Context, topic string, body []byte) error {
	if err := ended(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return broker.ErrClosed
	}
	for _, l := range b.listeners[topic] {
		select {
		case l.ch <- slices.Clone(body):
		default:
		}
	}
	return nil
}

// Listen implements broker.Broadcaster.
func (b *Backend) Listen(ctx context.Context, topic string) (broker.Listener, error) {
	if err := ended(ctx); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, broker.ErrClosed
	}
	if b.listeners == nil {
		b.listeners = map[string][]*listener{}
	}
	l := &listener{feed: feed{b: b, ch: make(chan []byte, listenerBuffer)}, topic: topic}
	b.listeners[topic] = append(b.listeners[topic], l)
	return l, nil
}

// feed is what a listener and a ledger follower share: a channel written
// under b.mu only, and why it ended.
type feed struct {
	b     *Backend
	ch    chan []byte
	err   error // under b.mu
	ended bool  // under b.mu
}

func (f *feed) Messages() <-chan []byte { return f.ch }

func (f *feed) Err() error {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	return f.err
}

// finishLocked ends the feed with err, and reports whether it was live.
func (f *feed) finishLocked(err error) bool {
	if f.ended {
		return false
	}
	f.ended, f.err = true, err
	close(f.ch)
	return true
}

type listener struct {
	feed
	topic string
}

func (l *listener) Close() {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	l.endLocked(nil)
}

func (l *listener) endLocked(err error) {
	if l.finishLocked(err) {
		l.b.listeners[l.topic] = slices.DeleteFunc(l.b.listeners[l.topic], func(o *listener) bool { return o == l })
	}
}

// endListenersLocked ends every listener, for Close.
func (b *Backend) endListenersLocked() {
	for _, ls := range b.listeners {
		for _, l := range slices.Clone(ls) {
			l.endLocked(broker.ErrClosed)
		}
	}
}
