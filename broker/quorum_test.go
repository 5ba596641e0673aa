package broker_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/queuey-go/queuey/broker"
)

// A wait's routing key is its seconds in binary, highest bit first, one
// word each, then the queue; each level's bindings pick out its bit.
func TestDelayRoutingKeyAndBindings(t *testing.T) {
	key := broker.DelayRoutingKey(30, "app.emails") // 30 = 11110b
	want := strings.Repeat("0.", 17) + "1.1.1.1.0.app.emails"
	if key != want {
		t.Fatalf("key of 30 s: %q, want %q", key, want)
	}
	wait, pass := broker.DelayLevelBindings(4)
	if wantWait := strings.Repeat("*.", 17) + "1.#"; wait != wantWait {
		t.Errorf("level 4 waits on %q, want %q", wait, wantWait)
	}
	if wantPass := strings.Repeat("*.", 17) + "0.#"; pass != wantPass {
		t.Errorf("level 4 passes on %q, want %q", pass, wantPass)
	}
	if got := broker.DelayDeliverBinding("app.emails"); got != strings.Repeat("*.", broker.DelayLevels)+"app.emails" {
		t.Errorf("deliver binding: %q", got)
	}
	if got := broker.DelayLevelArgs(0)["x-dead-letter-exchange"]; got != broker.DelayDeliverExchange {
		t.Errorf("level 0 dead-letters to %v, want the delivering exchange", got)
	}
	// The levels together hold the longest hold there is.
	if most := time.Duration(1<<broker.DelayLevels-1) * time.Second; most < broker.MaxHoldMs*time.Millisecond {
		t.Errorf("the levels hold at most %v, less than MaxHoldMs", most)
	}
}

// The levels wait whole seconds, never less than asked.
func TestLevelsTTLRoundsUpToWholeSeconds(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{
		time.Millisecond: time.Second, time.Second: time.Second, 1500 * time.Millisecond: 2 * time.Second, 30 * time.Second: 30 * time.Second,
	} {
		if got := broker.LevelsTTL(in); got != want {
			t.Errorf("LevelsTTL(%v) = %v, want %v", in, got, want)
		}
	}
}

// A quorum queue must be durable, and its name must leave room for the
// delay routing key and hold no wildcard word.
func TestValidateSpecOfAQuorumQueue(t *testing.T) {
	ok := broker.QueueSpec{Name: "app.emails", Durable: true, Type: broker.Quorum}
	if err := broker.ValidateSpec(ok); err != nil {
		t.Fatalf("a valid quorum queue: %v", err)
	}
	for name, spec := range map[string]broker.QueueSpec{
		"transient":      {Name: "app.emails", Type: broker.Quorum},
		"too long":       {Name: strings.Repeat("q", 206), Durable: true, Type: broker.Quorum},
		"wildcard star":  {Name: "app.*.emails", Durable: true, Type: broker.Quorum},
		"wildcard hash":  {Name: "app.#", Durable: true, Type: broker.Quorum},
		"invalid at all": {Name: "", Durable: true, Type: broker.Quorum},
	} {
		err := broker.ValidateSpec(spec)
		if !errors.Is(err, broker.ErrInvalidName) && !errors.Is(err, broker.ErrNotReplicable) {
			t.Errorf("%s: %v, want ErrInvalidName or ErrNotReplicable", name, err)
		}
	}
	if err := broker.ValidateSpec(broker.QueueSpec{Name: strings.Repeat("q", 200), Type: broker.Classic}); err != nil {
		t.Errorf("a 200-byte classic queue: %v", err)
	}
}
