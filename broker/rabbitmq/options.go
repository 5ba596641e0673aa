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
	// publishing connection; the consumers' connection shows it followed
	// by " (consume)". Default "queuey".
	ConnectionName string
	// PublishChannels is the size of the confirm-channel pool. Default 4.
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
// errors. A URL that does not parse is replaced whole.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparseable AMQP URL)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// containsSecret reports whether s quotes rawURL's password.
func containsSecret(s, rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return strings.Contains(s, rawURL)
	}
	pw, has := u.User.Password()
	return has && pw != "" && strings.Contains(s, pw)
}
