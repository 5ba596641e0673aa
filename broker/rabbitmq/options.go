package rabbitmq

import (
	"crypto/tls"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
)

// Options configures a Backend. A nil Options means every default.
type Options struct {
	// ConnectionName is shown in the broker's management UI for the
	// publishing connection; the consumers' connections show it followed
	// by " (consume)", " (consume 2)" and so on. Default "queuey".
	ConnectionName string
	// PublishChannels is the size of the confirm-channel pool over which
	// publishes (Publish, PublishBatch, broadcasts) are spread. Default 4.
	// Holds and dead letters go on one more channel, of their own.
	PublishChannels int
	// ReconnectMin and ReconnectMax bound the jittered backoff between dials
	// after the connection is lost. Defaults 100 ms and 10 s.
	ReconnectMin, ReconnectMax time.Duration
	// Heartbeat is the AMQP heartbeat interval; a silent broker is detected
	// within two. Default 10 s.
	Heartbeat time.Duration
	// TLS configures amqps:// connections. Default: certificates verified
	// against the system roots, with the URL's host as server name.
	TLS *tls.Config
	// Clock times reconnects and the hold-queue redeclare rule. Default: the
	// real clock.
	Clock clock.Clock
	// Logger receives connection events. Default slog.Default().
	Logger *slog.Logger

	// consumeChannelMax, when set, is the channel_max the consume
	// connections ask of the broker, below the broker's own: a test's
	// way to spread few consumers over many connections
	// (SetConsumeChannelMax) without changing the broker's settings.
	consumeChannelMax uint16
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.ConnectionName == "" {
		out.ConnectionName = "queuey"
	}
	if out.PublishChannels <= 0 {
		out.PublishChannels = 4
	}
	if out.ReconnectMin <= 0 {
		out.ReconnectMin = 100 * time.Millisecond
	}
	if out.ReconnectMax <= 0 {
		out.ReconnectMax = 10 * time.Second
	}
	if out.Heartbeat <= 0 {
		out.Heartbeat = 10 * time.Second
	}
	if out.Clock == nil {
		out.Clock = clock.New()
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

// Redact returns rawURL with its password replaced by "xxxxx", for logs and
// errors. Whatever looks like user:password@host is redacted, with a
// scheme or without, and where url.Parse fails or reads it otherwise
// ("guest:pw@host" parses as a URL of scheme "guest"). A URL that does not
// parse and holds no user:password@ is replaced whole.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err == nil && u.Opaque == "" && (u.User != nil || !strings.Contains(rawURL, "@")) {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		return u.String()
	}
	start, end, ok := passwordSpan(rawURL)
	switch {
	case ok:
		return rawURL[:start] + "xxxxx" + rawURL[end:]
	case err != nil:
		return "(unparseable AMQP URL)"
	}
	return rawURL
}

// passwordSpan finds, as text, the password of a URL url.Parse may not
// read: what follows the user name's colon up to the last '@' (a password
// may hold an '@' or a '/' it should have escaped), after the scheme's
// "://" when it has one. ok is false when there is no user:password@.
func passwordSpan(rawURL string) (start, end int, ok bool) {
	from := 0
	if i := strings.Index(rawURL, "://"); i > 0 && isScheme(rawURL[:i]) {
		from = i + len("://")
	} else if strings.HasPrefix(rawURL, "//") {
		from = len("//")
	}
	at := strings.LastIndexByte(rawURL[from:], '@')
	if at < 0 {
		return 0, 0, false
	}
	colon := strings.IndexByte(rawURL[from:from+at], ':')
	if colon < 0 {
		return 0, 0, false
	}
	return from + colon + 1, from + at, true
}

// isScheme reports whether s is a URL scheme: a letter, then letters,
// digits, '+', '-' or '.'.
func isScheme(s string) bool {
	for i, c := range []byte(s) {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return s != ""
}

// containsSecret reports whether s quotes rawURL's password, as url.Parse
// reads it or as passwordSpan finds it, or the whole of a URL that does
// not parse.
func containsSecret(s, rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil && strings.Contains(s, rawURL) {
		return true
	}
	if err == nil {
		if pw, has := u.User.Password(); has && pw != "" && strings.Contains(s, pw) {
			return true
		}
	}
	start, end, ok := passwordSpan(rawURL)
	return ok && start < end && strings.Contains(s, rawURL[start:end])
}
