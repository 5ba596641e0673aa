package brokertest

import (
	"sync"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// keyTests hold a broker.KeyLocker to its contract; Run runs them when
// the backend is one.
var keyTests = []struct {
	name string
	run  func(e *env, k broker.KeyLocker)
}{
	{"KeyIsHeldByOneIDUntilItsOwnRelease", func(e *env, k broker.KeyLocker) {
		name := e.key("k")
		e.wantTake(k, name, "a", time.Hour, "a")
		e.wantTake(k, name, "b", time.Hour, "a")
		e.wantTake(k, name, "a", time.Hour, "a") // its own holder takes it again
		e.wantHolder(k, name, "a")
		e.release(k, name, "b") // not b's: kept
		e.wantHolder(k, name, "a")
		e.release(k, name, "a")
		e.wantHolder(k, name, "")
		e.wantTake(k, name, "b", time.Hour, "b")
		e.wantHolder(k, name, "b")
	}},
	{"KeysAreApart", func(e *env, k broker.KeyLocker) {
		one, two := e.key("one"), e.key("two")
		e.wantTake(k, one, "a", time.Hour, "a")
		e.wantTake(k, two, "b", time.Hour, "b")
		e.release(k, one, "a")
		e.wantHolder(k, two, "b")
	}},
	{"KeyGoesWhenItsTTLEnds", func(e *env, k broker.KeyLocker) {
		name := e.key("k")
		e.wantTake(k, name, "a", time.Second, "a")
		e.wantTake(k, name, "b", time.Second, "a")
		deadline := time.Now().Add(time.Second + e.slack)
		for {
			if holder, err := k.TakeKey(e.t.Context(), name, "b", time.Second); err != nil || holder == "b" {
				if err != nil {
					e.t.Fatalf("take after the ttl: %v", err)
				}
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("key still held %v after its ttl of 1s", time.Second+e.slack)
			}
			<-time.After(50 * time.Millisecond)
		}
	}},
	{"KeyHeldForAnotherTTLIsHeld", func(e *env, k broker.KeyLocker) {
		name := e.key("k")
		e.wantTake(k, name, "a", time.Hour, "a")
		e.wantTake(k, name, "b", 2*time.Hour, "a")
		e.release(k, name, "a")
		e.wantTake(k, name, "b", 2*time.Hour, "b")
	}},
	{"OneOfManyTakersWins", func(e *env, k broker.KeyLocker) {
		name := e.key("k")
		const takers = 16
		holders := make([]string, takers)
		errs := make([]error, takers)
		var wg sync.WaitGroup
		for i := range takers {
			wg.Go(func() { holders[i], errs[i] = k.TakeKey(e.t.Context(), name, string(rune('a'+i)), time.Hour) })
		}
		wg.Wait()
		won := 0
		for i, h := range holders {
			if errs[i] != nil {
				e.t.Fatalf("taker %d: %v", i, errs[i])
			}
			if h == string(rune('a'+i)) {
				won++
			}
		}
		if won != 1 {
			e.t.Errorf("%d takers got the key (holders %q), want 1", won, holders)
		}
	}},
	{"KeyTTLIsChecked", func(e *env, k broker.KeyLocker) {
		for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, broker.MaxKeyTTL + time.Millisecond} {
			_, err := k.TakeKey(e.t.Context(), e.key("k"), "a", ttl)
			wantErr(e.t, "take for "+ttl.String(), err, broker.ErrInvalidDelay)
		}
	}},
}

// key returns the lock name of key in this test's set, and remembers its
// queues for cleanup.
func (e *env) key(key string) string {
	name := broker.KeyLockName(e.prefix, key)
	e.created = append(e.created, name, broker.KeyHolderName(name))
	return name
}

func (e *env) wantTake(k broker.KeyLocker, name, id string, ttl time.Duration, want string) {
	e.t.Helper()
	got, err := k.TakeKey(e.t.Context(), name, id, ttl)
	if err != nil || got != want {
		e.t.Fatalf("take for %s: got holder %q, %v; want %q", id, got, err, want)
	}
}

func (e *env) wantHolder(k broker.KeyLocker, name, want string) {
	e.t.Helper()
	got, err := k.KeyHolder(e.t.Context(), name)
	if err != nil || got != want {
		e.t.Fatalf("holder: got %q, %v; want %q", got, err, want)
	}
}

func (e *env) release(k broker.KeyLocker, name, id string) {
	e.t.Helper()
	if err := k.ReleaseKey(e.t.Context(), name, id); err != nil {
		e.t.Fatalf("release by %s: %v", id, err)
	}
}
