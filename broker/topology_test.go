package broker_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey/broker"
)

const day = 24 * time.Hour

// Vectors of the Rust crate's deferred_ttl_ms (reference §4.2): both must pick
// the same hold queue for the same delay.
func TestHoldTTL(t *testing.T) {
	tests := []struct {
		name        string
		delay       time.Duration
		granularity time.Duration
		wantMs      int64
	}{
		{name: "30s at 1s", delay: 30 * time.Second, granularity: time.Second, wantMs: 30000},
		{name: "29.2s rounds up to 30s", delay: 29200 * time.Millisecond, granularity: time.Second, wantMs: 30000},
		{name: "1.001s rounds up to 2s", delay: 1001 * time.Millisecond, granularity: time.Second, wantMs: 2000},
		{name: "1.999s rounds up to 2s", delay: 1999 * time.Millisecond, granularity: time.Second, wantMs: 2000},
		{name: "1000001µs rounds up to 2s", delay: 1000001 * time.Microsecond, granularity: time.Second, wantMs: 2000},
		{name: "5ms waits one step", delay: 5 * time.Millisecond, granularity: time.Second, wantMs: 1000},
		{name: "1ns waits one step", delay: 1, granularity: time.Second, wantMs: 1000},
		{name: "zero waits one step", delay: 0, granularity: time.Second, wantMs: 1000},
		{name: "default granularity", delay: 1200 * time.Millisecond, granularity: broker.DefaultGranularity, wantMs: 2000},
		{name: "750ms at 250ms", delay: 750 * time.Millisecond, granularity: 250 * time.Millisecond, wantMs: 750},
		{name: "zero granularity keeps whole ms", delay: 7 * time.Millisecond, granularity: 0, wantMs: 7},
		{name: "zero granularity and zero delay wait 1ms", delay: 0, granularity: 0, wantMs: 1},
		{name: "zero granularity rounds ns up to 1ms", delay: 7*time.Millisecond + 1, granularity: 0, wantMs: 8},
		{name: "negative granularity acts as zero", delay: 7 * time.Millisecond, granularity: -time.Second, wantMs: 7},
		{name: "sub-millisecond granularity rounds up to 1ms", delay: 7 * time.Millisecond, granularity: time.Microsecond, wantMs: 7},
		{name: "huge granularity clamps to MaxHoldMs", delay: time.Second, granularity: time.Duration(math.MaxInt64), wantMs: broker.MaxHoldMs},
		{name: "MaxHoldMs at 1ms accepted", delay: broker.MaxHoldMs * time.Millisecond, granularity: time.Millisecond, wantMs: broker.MaxHoldMs},
		{name: "retry granularity 5s", delay: 1200 * time.Millisecond, granularity: 5 * time.Second, wantMs: 5000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := broker.HoldTTL(tt.delay, tt.granularity)
			if err != nil {
				t.Fatalf("HoldTTL(%v, %v) error = %v", tt.delay, tt.granularity, err)
			}
			if want := time.Duration(tt.wantMs) * time.Millisecond; got != want {
				t.Errorf("HoldTTL(%v, %v) = %v, want %v", tt.delay, tt.granularity, got, want)
			}
		})
	}
}

func TestHoldTTLRefuses(t *testing.T) {
	tests := []struct {
		name        string
		delay       time.Duration
		granularity time.Duration
		wantErr     error
		wantRounded time.Duration
		wantText    string
	}{
		{
			name:        "30 days",
			delay:       30 * day,
			granularity: time.Second,
			wantErr:     broker.ErrDelayTooLong,
			wantRounded: 30 * day,
			wantText:    "delay of 720h0m0s is longer than a hold queue can wait (596h31m23.647s); it was refused rather than released early",
		},
		{
			name:        "rounding crosses the cap",
			delay:       (broker.MaxHoldMs - 1) * time.Millisecond,
			granularity: time.Second,
			wantErr:     broker.ErrDelayTooLong,
			wantRounded: 2147484 * time.Second,
			wantText:    "delay of 596h31m23.646s rounds up to 596h31m24s, longer than a hold queue can wait (596h31m23.647s); it was refused rather than released early",
		},
		{
			name:        "25 days",
			delay:       25 * day,
			granularity: time.Millisecond,
			wantErr:     broker.ErrDelayTooLong,
			wantRounded: 25 * day,
			wantText:    "delay of 600h0m0s is longer than a hold queue can wait (596h31m23.647s); it was refused rather than released early",
		},
		{
			name:        "one ns over the cap",
			delay:       broker.MaxHoldMs*time.Millisecond + 1,
			granularity: 0,
			wantErr:     broker.ErrDelayTooLong,
			wantRounded: (broker.MaxHoldMs + 1) * time.Millisecond,
			wantText:    "delay of 596h31m23.647000001s is longer than a hold queue can wait (596h31m23.647s); it was refused rather than released early",
		},
		{
			name:        "longest duration",
			delay:       time.Duration(math.MaxInt64),
			granularity: time.Second,
			wantErr:     broker.ErrDelayTooLong,
			wantRounded: math.MaxInt64 / time.Millisecond * time.Millisecond, // the longest whole-ms Duration
			wantText:    "delay of 2562047h47m16.854775807s is longer than a hold queue can wait (596h31m23.647s); it was refused rather than released early",
		},
		{
			name:        "negative",
			delay:       -time.Second,
			granularity: time.Second,
			wantErr:     broker.ErrInvalidDelay,
			wantText:    "delay of -1s is negative",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := broker.HoldTTL(tt.delay, tt.granularity)
			if err == nil {
				t.Fatalf("HoldTTL(%v, %v) = %v, want an error", tt.delay, tt.granularity, got)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("HoldTTL(%v, %v) error = %v, want one matching %v", tt.delay, tt.granularity, err, tt.wantErr)
			}
			var derr *broker.DelayError
			if !errors.As(err, &derr) {
				t.Fatalf("HoldTTL(%v, %v) error = %T, want *broker.DelayError", tt.delay, tt.granularity, err)
			}
			want := broker.DelayError{Delay: tt.delay, Rounded: tt.wantRounded, Max: broker.MaxHoldMs * time.Millisecond, Err: tt.wantErr}
			if diff := cmp.Diff(want, *derr, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
				t.Errorf("DelayError mismatch (-want +got):\n%s", diff)
			}
			if got := err.Error(); got != tt.wantText {
				t.Errorf("Error() = %q, want %q", got, tt.wantText)
			}
		})
	}
}

// LongestHold is the longest delay HoldTTL takes at a granularity: it
// takes that, and refuses a nanosecond more.
func TestLongestHold(t *testing.T) {
	for _, tt := range []struct {
		granularity, want time.Duration
	}{
		{0, broker.MaxHoldMs * time.Millisecond},
		{time.Millisecond, broker.MaxHoldMs * time.Millisecond},
		{250 * time.Millisecond, 2147483500 * time.Millisecond},
		{time.Second, 2147483 * time.Second},
		{7 * time.Second, 2147481 * time.Second},
		{time.Hour, 596 * time.Hour},
		{broker.MaxHoldMs * time.Millisecond, broker.MaxHoldMs * time.Millisecond},
		{time.Duration(math.MaxInt64), broker.MaxHoldMs * time.Millisecond},
	} {
		got := broker.LongestHold(tt.granularity)
		if got != tt.want {
			t.Errorf("LongestHold(%v) = %v, want %v", tt.granularity, got, tt.want)
		}
		if ttl, err := broker.HoldTTL(got, tt.granularity); err != nil || ttl != got {
			t.Errorf("HoldTTL(LongestHold(%v)) = %v, %v; want it unchanged", tt.granularity, ttl, err)
		}
		if _, err := broker.HoldTTL(got+1, tt.granularity); !errors.Is(err, broker.ErrDelayTooLong) {
			t.Errorf("HoldTTL(LongestHold(%v) + 1ns) = %v, want ErrDelayTooLong", tt.granularity, err)
		}
	}
}

func TestQueueNames(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{name: "queue with prefix", got: broker.QueueName("myapp", "emails"), want: "myapp.emails"},
		{name: "queue without prefix", got: broker.QueueName("", "emails"), want: "emails"},
		{name: "dead queue", got: broker.DeadQueueName("myapp.emails"), want: "myapp.emails.dead"},
		{name: "hold queue", got: broker.HoldQueueName("myapp.emails", 30*time.Second), want: "myapp.emails.deferred.30000"},
		{name: "longest hold queue", got: broker.HoldQueueName("q", broker.MaxHoldMs*time.Millisecond), want: "q.deferred.2147483647"},
		{name: "hold queue rounds a fraction up", got: broker.HoldQueueName("q", 1500*time.Microsecond), want: "q.deferred.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestParseHoldQueueName(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantQueue string
		wantTTL   time.Duration
		wantOK    bool
	}{
		{name: "plain", in: "myapp.emails.deferred.30000", wantQueue: "myapp.emails", wantTTL: 30 * time.Second, wantOK: true},
		{name: "longest ttl", in: "q.deferred.2147483647", wantQueue: "q", wantTTL: broker.MaxHoldMs * time.Millisecond, wantOK: true},
		{name: "queue containing the infix", in: "a.deferred.5.deferred.1000", wantQueue: "a.deferred.5", wantTTL: time.Second, wantOK: true},
		{name: "work queue", in: "myapp.emails"},
		{name: "dead queue", in: "myapp.emails.dead"},
		{name: "no ttl", in: "q.deferred."},
		{name: "no queue", in: ".deferred.1000"},
		{name: "zero ttl", in: "q.deferred.0"},
		{name: "leading zero", in: "q.deferred.01000"},
		{name: "signed ttl", in: "q.deferred.+1000"},
		{name: "negative ttl", in: "q.deferred.-1000"},
		{name: "ttl over the cap", in: "q.deferred.2147483648"},
		{name: "ttl overflowing int64", in: "q.deferred.99999999999999999999"},
		{name: "trailing text", in: "q.deferred.1000x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue, ttl, ok := broker.ParseHoldQueueName(tt.in)
			if queue != tt.wantQueue || ttl != tt.wantTTL || ok != tt.wantOK {
				t.Errorf("ParseHoldQueueName(%q) = %q, %v, %v, want %q, %v, %v",
					tt.in, queue, ttl, ok, tt.wantQueue, tt.wantTTL, tt.wantOK)
			}
		})
	}
}

func TestParseHoldQueueNameInvertsHoldQueueName(t *testing.T) {
	for _, delay := range []time.Duration{0, time.Millisecond, 1200 * time.Millisecond, 30 * time.Second, 24 * day} {
		ttl, err := broker.HoldTTL(delay, broker.DefaultGranularity)
		if err != nil {
			t.Fatalf("HoldTTL(%v) error = %v", delay, err)
		}
		name := broker.HoldQueueName("myapp.emails", ttl)
		queue, gotTTL, ok := broker.ParseHoldQueueName(name)
		if !ok || queue != "myapp.emails" || gotTTL != ttl {
			t.Errorf("ParseHoldQueueName(%q) = %q, %v, %v, want %q, %v, true", name, queue, gotTTL, ok, "myapp.emails", ttl)
		}
	}
}

func TestHoldQueueArgs(t *testing.T) {
	tests := []struct {
		name  string
		queue string
		ttl   time.Duration
		want  map[string]any
	}{
		{
			name:  "30s",
			queue: "myapp.emails",
			ttl:   30 * time.Second,
			want: map[string]any{
				"x-message-ttl":             int64(30000),
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": "myapp.emails",
				"x-expires":                 int64(60000),
			},
		},
		{
			name:  "longest wait still fits x-expires",
			queue: "q",
			ttl:   broker.MaxHoldMs * time.Millisecond,
			want: map[string]any{
				"x-message-ttl":             int64(broker.MaxHoldMs),
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": "q",
				"x-expires":                 int64(2 * broker.MaxHoldMs),
			},
		},
		{
			name:  "x-expires clamps to MaxTTLMs",
			queue: "q",
			ttl:   3000000000 * time.Millisecond,
			want: map[string]any{
				"x-message-ttl":             int64(3000000000),
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": "q",
				"x-expires":                 int64(broker.MaxTTLMs),
			},
		},
		{
			name:  "fraction rounds up like the name",
			queue: "q",
			ttl:   1500 * time.Microsecond,
			want: map[string]any{
				"x-message-ttl":             int64(2),
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": "q",
				"x-expires":                 int64(4),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := broker.HoldQueueArgs(tt.queue, tt.ttl)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("HoldQueueArgs(%q, %v) mismatch (-want +got):\n%s", tt.queue, tt.ttl, diff)
			}
		})
	}
}

func TestQueueArgs(t *testing.T) {
	tests := []struct {
		name string
		spec broker.QueueSpec
		want map[string]any
	}{
		{name: "plain fifo queue", spec: broker.QueueSpec{Name: "q"}, want: map[string]any{}},
		{name: "durable changes no argument", spec: broker.QueueSpec{Name: "q", Durable: true}, want: map[string]any{}},
		{name: "default max priority", spec: broker.QueueSpec{Name: "q", MaxPriority: 10}, want: map[string]any{"x-max-priority": int64(10)}},
		{name: "highest max priority", spec: broker.QueueSpec{Name: "q", MaxPriority: 255}, want: map[string]any{"x-max-priority": int64(255)}},
		{name: "whole ms ttl", spec: broker.QueueSpec{Name: "q", MessageTTL: time.Minute}, want: map[string]any{"x-message-ttl": int64(60000)}},
		{name: "ttl rounds up", spec: broker.QueueSpec{Name: "q", MessageTTL: 1500 * time.Microsecond}, want: map[string]any{"x-message-ttl": int64(2)}},
		{name: "1ns ttl becomes 1ms", spec: broker.QueueSpec{Name: "q", MessageTTL: 1}, want: map[string]any{"x-message-ttl": int64(1)}},
		{name: "huge ttl clamps", spec: broker.QueueSpec{Name: "q", MessageTTL: 60 * day}, want: map[string]any{"x-message-ttl": int64(broker.MaxTTLMs)}},
		{name: "negative ttl is unset", spec: broker.QueueSpec{Name: "q", MessageTTL: -time.Second}, want: map[string]any{}},
		{
			name: "both",
			spec: broker.QueueSpec{Name: "q", MaxPriority: 5, MessageTTL: 30 * time.Second, Durable: true},
			want: map[string]any{"x-max-priority": int64(5), "x-message-ttl": int64(30000)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := broker.QueueArgs(tt.spec)
			if got == nil {
				t.Fatalf("QueueArgs(%+v) = nil, want a map", tt.spec)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("QueueArgs(%+v) mismatch (-want +got):\n%s", tt.spec, diff)
			}
		})
	}
}

func TestValidateQueueName(t *testing.T) {
	tests := []struct {
		name     string
		queue    string
		wantErr  bool
		wantText string
	}{
		{name: "ordinary", queue: "myapp.emails"},
		{name: "one byte", queue: "q"},
		{name: "235 bytes is the longest", queue: strings.Repeat("a", 235)},
		{name: "multi-byte runes count in bytes", queue: strings.Repeat("é", 117) + "a"}, // 235 bytes
		{name: "amq inside the name", queue: "myapp.amq.q"},
		{
			name:     "236 bytes leaves no room for hold queues",
			queue:    strings.Repeat("a", 236),
			wantErr:  true,
			wantText: `queue "` + strings.Repeat("a", 236) + `" leaves no room for its hold queues: "` + strings.Repeat("a", 236) + `.deferred.2147483647" is 256 bytes, over the 255-byte AMQP limit`,
		},
		{name: "255 bytes", queue: strings.Repeat("a", 255), wantErr: true},
		{
			name:     "256 bytes is over the AMQP limit",
			queue:    strings.Repeat("a", 256),
			wantErr:  true,
			wantText: `queue "` + strings.Repeat("a", 256) + `" is invalid: the name is 256 bytes, over the 255-byte AMQP limit`,
		},
		{name: "empty", queue: "", wantErr: true, wantText: `queue "" is invalid: the name is empty`},
		{name: "invalid utf-8", queue: "q\xff", wantErr: true, wantText: `queue "q\xff" is invalid: the name is not valid UTF-8`},
		{name: "reserved amq prefix", queue: "amq.emails", wantErr: true, wantText: `queue "amq.emails" is invalid: the "amq." prefix is reserved by RabbitMQ`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := broker.ValidateQueueName(tt.queue)
			if !tt.wantErr {
				if err != nil {
					t.Errorf("ValidateQueueName(%d bytes) error = %v, want nil", len(tt.queue), err)
				}
				return
			}
			if !errors.Is(err, broker.ErrInvalidName) {
				t.Fatalf("ValidateQueueName(%d bytes) error = %v, want one matching ErrInvalidName", len(tt.queue), err)
			}
			var nerr *broker.NameError
			if !errors.As(err, &nerr) {
				t.Fatalf("ValidateQueueName(%d bytes) error = %T, want *broker.NameError", len(tt.queue), err)
			}
			if nerr.Name != tt.queue {
				t.Errorf("NameError.Name = %q, want %q", nerr.Name, tt.queue)
			}
			if tt.wantText != "" && err.Error() != tt.wantText {
				t.Errorf("Error() = %q, want %q", err.Error(), tt.wantText)
			}
		})
	}
}

// Every name a valid queue leads to (work, dead, longest hold) fits the AMQP
// limit, which is what the guard is for.
func TestValidNamesLeaveRoomForEveryDerivedName(t *testing.T) {
	for n := 1; n <= 300; n++ {
		queue := strings.Repeat("q", n)
		if broker.ValidateQueueName(queue) != nil {
			continue
		}
		longest := broker.HoldQueueName(queue, broker.MaxHoldMs*time.Millisecond)
		for _, name := range []string{queue, broker.DeadQueueName(queue), longest} {
			if len(name) > broker.MaxNameBytes {
				t.Errorf("queue of %d bytes is valid but %q is %d bytes, want at most %d", n, name, len(name), broker.MaxNameBytes)
			}
		}
	}
}
