package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/inspect"
)

// Action names what a request would see or do, for Options.Authorize.
type Action string

// The pages and actions of the console.
const (
	ViewOverview    Action = "view_overview"
	ViewWaits       Action = "view_waits"
	ViewDeadLetters Action = "view_dead_letters" // the lists
	ViewDeadLetter  Action = "view_dead_letter"  // one whole, its payload and headers
	ViewSchedules   Action = "view_schedules"
	ViewWorkers     Action = "view_workers"
	Replay          Action = "replay"
	Delete          Action = "delete"
	Pause           Action = "pause"
	Resume          Action = "resume"
	Cancel          Action = "cancel" // a job, by its id (queuey.CancelJob)
)

// mutates says whether a changes something (and so needs a CSRF token and
// is refused in read-only mode).
func (a Action) mutates() bool {
	return a == Replay || a == Delete || a == Pause || a == Resume || a == Cancel
}

// Options configure a Console. A nil Options means every default.
type Options struct {
	// ReadOnly refuses every action (replay, delete, pause, resume,
	// cancel) and shows none. Default: actions allowed.
	ReadOnly bool
	// Authorize, when set, is called for every page and every action
	// before it is served; an error refuses it with 403 Forbidden and the
	// error's text. Default: everything allowed (mount the console behind
	// the service's own authentication).
	Authorize func(r *http.Request, a Action) error
	// Management reaches RabbitMQ's management API, for what a Backend
	// cannot tell (unacked messages, consumers, the hold queues and delay
	// levels). Default: none; the pages then say what they cannot show.
	// Ignored on the memory backend, which tells everything itself.
	Management *inspect.Management
	// Refresh is how often a page's live part is fetched again. Default
	// DefaultRefresh.
	Refresh time.Duration
	// Producer configures the producer replays publish with (its Clock
	// is the console's). Default: nil, the defaults.
	Producer *queuey.ProducerConfig
	// Clock tells the time of ages and waits. Default: the real clock.
	Clock clock.Clock
	// Logger receives the console's errors. Default slog.Default().
	Logger *slog.Logger
}

// DefaultRefresh is Options.Refresh's default.
const DefaultRefresh = 2 * time.Second

// Console serves the pages. Create it with New.
type Console struct {
	backend   broker.Backend
	set       queuey.QueueSet
	dead      *queuey.DeadLetters
	inspector inspect.Inspector
	opts      Options
	clock     clock.Clock
	log       *slog.Logger
	mux       *http.ServeMux
	roster    *roster
	requests  atomic.Uint64 // made to inspect the broker (BrokerRequests)
}

// New returns the console of set on backend. It declares set's queues, as
// a producer does (a replay publishes into them).
func New(ctx context.Context, backend broker.Backend, set queuey.QueueSet, opts *Options) (*Console, error) {
	if backend == nil {
		return nil, errors.New("console: nil backend")
	}
	c := &Console{backend: backend, set: set, clock: clock.New(), log: slog.Default()}
	if opts != nil {
		c.opts = *opts
	}
	if c.opts.Clock != nil {
		c.clock = c.opts.Clock
	}
	if c.opts.Logger != nil {
		c.log = c.opts.Logger
	}
	if c.opts.Refresh <= 0 {
		c.opts.Refresh = DefaultRefresh
	}
	c.inspector = inspect.For(backend, c.opts.Management)
	pc := queuey.ProducerConfig{}
	if c.opts.Producer != nil {
		pc = *c.opts.Producer
	}
	pc.Clock = c.clock
	dead, err := queuey.NewDeadLetters(ctx, backend, set, &pc)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c.dead = dead
	c.roster = newRoster(backend, set, c.clock, c.log)
	c.routes()
	return c, nil
}

// Run listens to the fleet's heartbeats (for the Workers and Schedules
// pages) until ctx ends, and returns then. Pages are served whether it
// runs or not; without it those pages say that no worker is heard.
func (c *Console) Run(ctx context.Context) error { return c.roster.run(ctx) }

// BrokerRequests counts the requests the pages made to inspect the broker
// since New: to its management API (one per 500 queues of the set a
// refresh of the Overview or Waits) or, without one, a passive declare per
// queue. The reads of dead letters are not counted (each is a depth and a
// consumer of the dead-letter queue), nor the heartbeats the console
// hears (they cost no request).
func (c *Console) BrokerRequests() uint64 { return c.requests.Load() }

// ServeHTTP serves the console's pages and actions.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	c.mux.ServeHTTP(w, r)
}
