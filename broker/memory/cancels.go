package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// followerSlack is how many records a ledger follower holds unread, past
// those it was handed at its start, before it ends with
// broker.ErrFollowerBehind (its owner follows again, from the start).
const followerSlack = 1024

var _ broker.CancelLedger = (*Backend)(nil)

// ledger is a queue set's ledger of cancellations: its records kept, in
// order, and its followers.
type ledger struct {
	records   []ledgerRecord
	followers []*follower
}

// ledgerRecord is one record and when it may be dropped, on the
// backend's clock.
type ledgerRecord struct {
	body  []byte
	until time.Time
}

// AppendCancel implements broker.CancelLedger: the record goes to every
// follower of prefix's ledger and is kept for keep, on the backend's
// clock; records whose keep has ended are dropped then.
func (b *Backend) AppendCancel(ctx context.Context, prefix string, body []byte, keep time.Duration) error {
	if keep <= 0 || keep > broker.MaxCancelKeep {
		return fmt.Errorf("%w: a cancellation is kept for (0, %v], not %v", broker.ErrInvalidDelay, broker.MaxCancelKeep, keep)
	}
	if err := ended(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return broker.ErrClosed
	}
	l := b.ledgerLocked(prefix)
	now := b.clock.Now()
	l.records = slices.DeleteFunc(l.records, func(r ledgerRecord) bool { return !r.until.After(now) })
	l.records = append(l.records, ledgerRecord{body: slices.Clone(body), until: now.Add(keep)})
	for _, f := range slices.Clone(l.followers) {
		f.handLocked(body)
	}
	return nil
}

// FollowCancels implements broker.CancelLedger.
func (b *Backend) FollowCancels(ctx context.Context, prefix string) (broker.Listener, error) {
	if err := ended(ctx); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, broker.ErrClosed
	}
	l := b.ledgerLocked(prefix)
	now := b.clock.Now()
	f := &follower{feed: feed{b: b, ch: make(chan []byte, len(l.records)+followerSlack)}, l: l}
	for _, r := range l.records {
		if r.until.After(now) {
			f.ch <- slices.Clone(r.body)
		}
	}
	l.followers = append(l.followers, f)
	return f, nil
}

// CancelFollowers implements broker.CancelLedger.
func (b *Backend) CancelFollowers(ctx context.Context, prefix string) (int, error) {
	if err := ended(ctx); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, broker.ErrClosed
	}
	return len(b.ledgerLocked(prefix).followers), nil
}

func (b *Backend) ledgerLocked(prefix string) *ledger {
	if b.ledgers == nil {
		b.ledgers = map[string]*ledger{}
	}
	l := b.ledgers[prefix]
	if l == nil {
		l = &ledger{}
		b.ledgers[prefix] = l
	}
	return l
}

// follower reads one ledger.
type follower struct {
	feed
	l *ledger
}

func (f *follower) Close() {
	f.b.mu.Lock()
	defer f.b.mu.Unlock()
	f.endLocked(nil)
}

// handLocked hands the follower a record, or ends it if it has no room.
func (f *follower) handLocked(body []byte) {
	select {
	case f.ch <- slices.Clone(body):
	default:
		f.endLocked(broker.ErrFollowerBehind)
	}
}

func (f *follower) endLocked(err error) {
	if f.finishLocked(err) {
		f.l.followers = slices.DeleteFunc(f.l.followers, func(o *follower) bool { return o == f })
	}
}

// endFollowersLocked ends every ledger's followers, for Close.
func (b *Backend) endFollowersLocked() {
	for _, l := range b.ledgers {
		for _, f := range slices.Clone(l.followers) {
			f.endLocked(broker.ErrClosed)
		}
	}
}
