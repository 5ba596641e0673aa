package brokertest

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// cancelKeep is how long the suite's records are kept.
const cancelKeep = time.Hour

// ledger is the backend as a broker.CancelLedger, or skips the test.
func (e *env) ledger() broker.CancelLedger {
	e.t.Helper()
	l, ok := e.b.(broker.CancelLedger)
	if !ok {
		e.t.Skip("the backend is not a broker.CancelLedger")
	}
	return l
}

// cancelPrefix returns a queue-set prefix of this test's own, and
// remembers for cleanup its ledger and the roll of its followers that the
// RabbitMQ backend keeps beside it.
func (e *env) cancelPrefix(name string) string {
	prefix := e.prefix + "." + name
	e.created = append(e.created, broker.CancelLedgerName(prefix), broker.CancelFollowersName(prefix))
	return prefix
}

// follow starts a follower of prefix's ledger, closed when the test ends.
func (e *env) follow(prefix string) broker.Listener {
	e.t.Helper()
	l, err := e.ledger().FollowCancels(e.t.Context(), prefix)
	if err != nil {
		e.t.Fatalf("follow the ledger of %q: %v", prefix, err)
	}
	e.t.Cleanup(l.Close)
	return l
}

// appendCancel appends each of bodies to prefix's ledger, in turn.
func (e *env) appendCancel(prefix string, bodies ...string) {
	e.t.Helper()
	for _, body := range bodies {
		if err := e.ledger().AppendCancel(e.t.Context(), prefix, []byte(body), cancelKeep); err != nil {
			e.t.Fatalf("append %q to the ledger of %q: %v", body, prefix, err)
		}
	}
}

// wantFollowers waits, within the suite's slack, for prefix's ledger to
// count want followers: a broker may count a follower that closed a
// little longer.
func (e *env) wantFollowers(prefix string, want int) {
	e.t.Helper()
	deadline := time.Now().Add(e.slack)
	for {
		n, err := e.ledger().CancelFollowers(e.t.Context(), prefix)
		if err != nil {
			e.t.Fatalf("followers of %q: %v", prefix, err)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the ledger of %q counts %d followers %v on, want %d", prefix, n, e.slack, want)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// read receives n messages from l, each within within, without failing
// the test: it may run beside the test's goroutine.
func read(l broker.Listener, n int, within time.Duration) ([]string, error) {
	var got []string
	for range n {
		select {
		case m, ok := <-l.Messages():
			if !ok {
				return got, fmt.Errorf("the follower ended after %d records: %v", len(got), l.Err())
			}
			got = append(got, string(m))
		case <-time.After(within):
			return got, fmt.Errorf("read %d records, then nothing within %v", len(got), within)
		}
	}
	return got, nil
}

// numbered is n records named after who: "who.0" to "who.<n-1>".
func numbered(who string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s.%d", who, i)
	}
	return out
}

// cancelTests are the broker.CancelLedger's: skipped for a backend that
// is none.
var cancelTests = []struct {
	name string
	run  func(e *env)
}{
	{"AFollowerReadsTheLedgerFromItsStartThenLive", func(e *env) {
		prefix := e.cancelPrefix("set")
		e.appendCancel(prefix, "before.0", "before.1")
		f := e.follow(prefix)
		wantIDs(e.t, e.hear(f, 2), "before.0", "before.1")
		e.appendCancel(prefix, "after.0", "after.1")
		wantIDs(e.t, e.hear(f, 2), "after.0", "after.1")
		e.silent(f, 200*time.Millisecond)
		// One that starts now reads it all, from the start.
		wantIDs(e.t, e.hear(e.follow(prefix), 4), "before.0", "before.1", "after.0", "after.1")
	}},
	{"ARecordIsReadByAFollowerThatStartsAfterItWasAppended", func(e *env) {
		prefix := e.cancelPrefix("set")
		e.appendCancel(prefix, "nobody followed")
		wantIDs(e.t, e.hear(e.follow(prefix), 1), "nobody followed")
	}},
	{"EveryFollowerReadsTheOneOrderOfConcurrentAppends", func(e *env) {
		prefix := e.cancelPrefix("set")
		ledger := e.ledger()
		a, b := e.follow(prefix), e.follow(prefix)
		const appenders, each = 4, 10
		var reads [2][]string
		var errs [2]error
		var wg sync.WaitGroup
		for i, f := range []broker.Listener{a, b} {
			wg.Go(func() { reads[i], errs[i] = read(f, appenders*each, 2*e.slack) })
		}
		appendErrs := make([]error, appenders)
		var appending sync.WaitGroup
		for i := range appenders {
			appending.Go(func() {
				for _, body := range numbered(fmt.Sprintf("appender%d", i), each) {
					if appendErrs[i] = ledger.AppendCancel(e.t.Context(), prefix, []byte(body), cancelKeep); appendErrs[i] != nil {
						return
					}
				}
			})
		}
		appending.Wait()
		wg.Wait()
		for _, err := range slices.Concat(appendErrs, errs[:]) {
			if err != nil {
				e.t.Fatal(err)
			}
		}
		wantIDs(e.t, reads[1], reads[0]...)
		for i := range appenders {
			who := fmt.Sprintf("appender%d.", i)
			mine := slices.DeleteFunc(slices.Clone(reads[0]), func(s string) bool { return !contains(s, who) })
			wantIDs(e.t, mine, numbered(who[:len(who)-1], each)...) // each appender's in its own order
		}
	}},
	{"AFollowersOwnAppendIsReadInItsPlace", func(e *env) {
		// The marker: a follower that appends once it follows, and reads
		// its record back, has read everything appended before it.
		prefix := e.cancelPrefix("set")
		e.appendCancel(prefix, "old.0", "old.1")
		f := e.follow(prefix)
		e.appendCancel(prefix, "marker")
		e.appendCancel(prefix, "new")
		wantIDs(e.t, e.hear(f, 4), "old.0", "old.1", "marker", "new")
	}},
	{"QueueSetsAreApart", func(e *env) {
		one, two := e.cancelPrefix("one"), e.cancelPrefix("two")
		e.appendCancel(one, "to one")
		f := e.follow(two)
		e.silent(f, 200*time.Millisecond)
		e.appendCancel(two, "to two")
		wantIDs(e.t, e.hear(f, 1), "to two")
		e.wantFollowers(one, 0)
	}},
	{"CancelFollowersCountsTheFollowers", func(e *env) {
		prefix := e.cancelPrefix("set")
		e.wantFollowers(prefix, 0)
		a, b := e.follow(prefix), e.follow(prefix)
		e.wantFollowers(prefix, 2)
		a.Close()
		e.wantFollowers(prefix, 1)
		e.appendCancel(prefix, "still followed")
		wantIDs(e.t, e.hear(b, 1), "still followed")
		b.Close()
		e.wantFollowers(prefix, 0)
	}},
	{"CloseEndsOneFollower", func(e *env) {
		prefix := e.cancelPrefix("set")
		stays, goes := e.follow(prefix), e.follow(prefix)
		goes.Close()
		if err := e.ended(goes); err != nil {
			e.t.Errorf("Err after Close: got %v, want nil", err)
		}
		goes.Close() // a second Close is harmless
		e.appendCancel(prefix, "after")
		wantIDs(e.t, e.hear(stays, 1), "after")
	}},
	{"ClosingTheBackendEndsFollowersAndRefusesTheLedger", func(e *env) {
		prefix := e.cancelPrefix("set")
		ledger := e.ledger()
		f := e.follow(prefix)
		if err := e.b.Close(); err != nil {
			e.t.Fatalf("close: %v", err)
		}
		wantErr(e.t, "follower Err after the backend's Close", e.ended(f), broker.ErrClosed)
		ctx := e.t.Context()
		wantErr(e.t, "append after close", ledger.AppendCancel(ctx, prefix, []byte("x"), cancelKeep), broker.ErrClosed)
		_, err := ledger.FollowCancels(ctx, prefix)
		wantErr(e.t, "follow after close", err, broker.ErrClosed)
		_, err = ledger.CancelFollowers(ctx, prefix)
		wantErr(e.t, "count followers after close", err, broker.ErrClosed)
	}},
	{"CancelKeepIsChecked", func(e *env) {
		prefix := e.cancelPrefix("set")
		for _, keep := range []time.Duration{0, -time.Second, broker.MaxCancelKeep + time.Millisecond} {
			err := e.ledger().AppendCancel(e.t.Context(), prefix, []byte("x"), keep)
			wantErr(e.t, "append kept "+keep.String(), err, broker.ErrInvalidDelay)
		}
		if err := e.ledger().AppendCancel(e.t.Context(), prefix, []byte("longest"), broker.MaxCancelKeep); err != nil {
			e.t.Fatalf("append kept MaxCancelKeep: %v", err)
		}
		wantIDs(e.t, e.hear(e.follow(prefix), 1), "longest")
	}},
	{"ARecordOfAFewKilobytesIsReadByteForByte", func(e *env) {
		prefix := e.cancelPrefix("set")
		body := make([]byte, 6<<10)
		for i := range body {
			body[i] = byte(i * 7)
		}
		if err := e.ledger().AppendCancel(e.t.Context(), prefix, body, cancelKeep); err != nil {
			e.t.Fatalf("append: %v", err)
		}
		f := e.follow(prefix)
		select {
		case got, ok := <-f.Messages():
			if !ok {
				e.t.Fatalf("the follower ended: %v", f.Err())
			}
			if !bytes.Equal(got, body) {
				e.t.Errorf("read %d bytes, not the %d appended", len(got), len(body))
			}
		case <-time.After(e.slack):
			e.t.Fatalf("nothing read within %v", e.slack)
		}
	}},
}
