package rabbitmq_test

import (
	"strings"
	"testing"

	"github.com/queuey-go/queuey/broker/rabbitmq"
)

// TestRedactHidesThePasswordOfAnythingLikeAURL: user:password@host is
// redacted with a scheme or without, and where url.Parse fails; the rest
// is kept, to say which broker it was.
func TestRedactHidesThePasswordOfAnythingLikeAURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"guest:s3cret@127.0.0.1:5672", "guest:xxxxx@127.0.0.1:5672"},
		{"guest:s3cret@127.0.0.1:5672/vh", "guest:xxxxx@127.0.0.1:5672/vh"},
		{"amqp://guest:s3cret@[bad", "amqp://guest:xxxxx@[bad"},
		{"amqp://guest:s3c/r#et@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"amqp://guest:s3c@ret@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"//guest:s3cret@127.0.0.1:5672/", "//guest:xxxxx@127.0.0.1:5672/"},
		{"amqps://user:s3cret@host:5671/vh", "amqps://user:xxxxx@host:5671/vh"},
		{"amqp://guest@127.0.0.1:5672/", "amqp://guest@127.0.0.1:5672/"},
		{"amqp://guest:123/s3c@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"}, // parses, port 123
		{"guest:s3c://ret@127.0.0.1:5672", "guest:xxxxx@127.0.0.1:5672"},
		{"127.0.0.1:5672", "(unparseable AMQP URL)"},
	} {
		got := rabbitmq.Redact(tc.in)
		if strings.Contains(got, "s3c") || got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestADialOfAURLWithoutASchemeHidesThePassword: url.Parse takes
// "guest:s3cret@host" for a URL of scheme "guest"; the error that says it
// is not an AMQP URL quotes it redacted.
func TestADialOfAURLWithoutASchemeHidesThePassword(t *testing.T) {
	t.Parallel()
	b, err := rabbitmq.Dial(t.Context(), "guest:s3cret@127.0.0.1:5672", nil)
	if err == nil {
		b.Close()
		t.Fatal("Dial succeeded")
	}
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "not an amqp:// or amqps:// URL") {
		t.Errorf("Dial without a scheme: %v; want it called not an AMQP URL, without the password", err)
	}
}
