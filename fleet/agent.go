package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/internal/mockctx"
	"github.com/queuey-go/queuey/internal/relisten"
)

// Worker is what an Agent reads and steers: a *queuey.Worker (an
// interface so that a test can stand in for one).
type Worker interface {
	Concurrency() int
	InFlight(name string) int
	Pause(ctx context.Context, name string, until time.Time) error
	Resume(ctx context.Context, name string) error
	Paused() map[string]time.Time
	Schedules() []queuey.ScheduleStatus
}

// Options configure an Agent. A nil Options means every default.
type Options struct {
	// Queues names the queues the worker consumes (WorkerConfig.Queues).
	// Default: every queue of the set.
	Queues []string
	// Schedules are the schedules the worker was given (AddSchedule), for
	// their timetables in the heartbeat. Default: none; a schedule of the
	// worker's that is not here is reported without its timetable (who
	// leads it and its ticks only).
	Schedules []queuey.Schedule
	// Interval is how often the heartbeat goes. Default DefaultInterval.
	Interval time.Duration
	// Version is the service's version, to show. Default "".
	Version string
	// Clock times the heartbeats. Default: the real clock.
	Clock clock.Clock
	// Logger receives the agent's errors. Default slog.Default().
	Logger *slog.Logger
}

// Agent reports one worker to the fleet and carries out the fleet's
// commands on it. Create it with NewAgent, put its Hooks in the worker's
// config, and Run it beside the worker.
type Agent struct {
	bc       broker.Broadcaster
	set      queuey.QueueSet
	opts     Options
	id, host string
	started  time.Time
	done     map[string]*atomic.Uint64 // by queue name; the map is never written after NewAgent
	late     lateSamples               // from the hooks, taken at each heartbeat
}

// maxLateSamples bounds the lateness samples an Agent keeps between two
// heartbeats, across its queues.
const maxLateSamples = 4096

// lateSamples is a uniform sample (a reservoir) of the lateness of the
// jobs started since the last heartbeat: the hooks add to it under a
// mutex, with no channel send and no goroutine woken a delivery.
type lateSamples struct {
	mu   sync.Mutex
	seen int // since the last take
	s    []lateness
}

type lateness struct {
	queue string
	late  time.Duration
}

// add samples one job's lateness.
func (l *lateSamples) add(queue string, late time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen++
	switch {
	case len(l.s) < maxLateSamples:
		l.s = append(l.s, lateness{queue, late})
	default:
		if i := rand.IntN(l.seen); i < maxLateSamples {
			l.s[i] = lateness{queue, late}
		}
	}
}

// take empties the sample into into, by queue.
func (l *lateSamples) take(into map[string][]time.Duration) {
	l.mu.Lock()
	s := l.s
	l.s, l.seen = make([]lateness, 0, len(s)), 0
	l.mu.Unlock()
	for _, x := range s {
		into[x.queue] = append(into[x.queue], x.late)
	}
}

// NewAgent returns an agent for a worker of set on backend, which must be
// a broker.Broadcaster.
func NewAgent(backend broker.Backend, set queuey.QueueSet, opts *Options) (*Agent, error) {
	bc, ok := backend.(broker.Broadcaster)
	if !ok {
		return nil, fmt.Errorf("fleet: the %s backend cannot broadcast (it is no broker.Broadcaster)", backend.Name())
	}
	a := &Agent{bc: bc, set: set, done: map[string]*atomic.Uint64{}}
	if opts != nil {
		a.opts = *opts
	}
	if a.opts.Clock == nil {
		a.opts.Clock = clock.New()
	}
	a.opts.Clock = mockctx.Guard(a.opts.Clock) // a mock's timeout contexts, race-free
	if a.opts.Interval <= 0 {
		a.opts.Interval = DefaultInterval
	}
	if a.opts.Logger == nil {
		a.opts.Logger = slog.Default()
	}
	if len(a.opts.Queues) == 0 {
		for _, q := range set.Queues {
			a.opts.Queues = append(a.opts.Queues, q.Name)
		}
	}
	for _, q := range a.opts.Queues {
		a.done[q] = new(atomic.Uint64)
	}
	a.host, _ = os.Hostname()
	a.started = a.opts.Clock.Now()
	a.id = fmt.Sprintf("%s/%d/%d", a.host, os.Getpid(), a.started.UnixNano())
	return a, nil
}

// ID is how the fleet knows this worker.
func (a *Agent) ID() string { return a.id }

// Hooks are next (nil: none) with the agent's counting of jobs and their
// lateness added.
func (a *Agent) Hooks(next *queuey.Hooks) *queuey.Hooks {
	h := &queuey.Hooks{}
	if next != nil {
		h.Publish = next.Publish
	}
	h.Deliver = func(ctx context.Context, d *queuey.DeliveryInfo) (context.Context, func(queuey.Outcome)) {
		var after func(queuey.Outcome)
		if next != nil && next.Deliver != nil {
			ctx, after = next.Deliver(ctx, d)
		}
		if !d.DueAt.IsZero() {
			a.late.add(d.Queue, max(0, d.Started.Sub(d.DueAt)))
		}
		return ctx, func(o queuey.Outcome) {
			if c := a.done[d.Queue]; c != nil {
				c.Add(1)
			}
			if after != nil {
				after(o)
			}
		}
	}
	return h
}

// Run sends the heartbeats of w and carries out the commands for it until
// ctx ends, and returns nil then. A command listener that ends (its
// connection was lost) or cannot start is started again after a backoff
// (1 s, doubling up to 30 s), the heartbeats going
// on meanwhile; Run returns an error only when the backend is closed.
func (a *Agent) Run(ctx context.Context, w Worker) error {
	st := &agentState{a: a, w: w, ours: map[string]time.Time{}, late: map[string][]time.Duration{}}
	cmds := relisten.New(a.bc, CommandTopic(a.set.Prefix), a.opts.Clock, a.opts.Interval)
	defer cmds.Close()
	// trouble is what a listener's failure makes Run do: return, when the
	// backend is closed; else say so, and listen again later.
	trouble := func(what string, err error) error {
		if errors.Is(err, broker.ErrClosed) {
			return fmt.Errorf("fleet: %s: %w", what, err)
		}
		if ctx.Err() == nil {
			a.opts.Logger.Warn("fleet: "+what+"; listening again after a backoff", "error", err, "backoff", cmds.Wait())
		}
		return nil
	}
	if err := cmds.Listen(ctx); err != nil {
		if err := trouble("listening for commands", err); err != nil {
			return err
		}
	}
	tick := a.opts.Clock.Ticker(a.opts.Interval)
	defer tick.Stop()
	st.beat(ctx)
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-cmds.Messages():
			if !ok {
				err = trouble("the command listener ended", cmds.Ended())
				break
			}
			st.obey(ctx, m)
		case <-cmds.Retry():
			if lerr := cmds.Listen(ctx); lerr != nil {
				err = trouble("listening for commands", lerr)
			}
		case <-tick.C:
			st.beat(ctx)
		}
		if err != nil {
			return err
		}
	}
}

// agentState is what Run's goroutine owns.
type agentState struct {
	a    *Agent
	w    Worker
	ours map[string]time.Time       // the pauses the fleet asked for, by queue
	late map[string][]time.Duration // lateness seen since the last heartbeat, filled by beat
}

// obey carries out one command, and reports at once.
func (s *agentState) obey(ctx context.Context, body []byte) {
	var c Command
	if err := json.Unmarshal(body, &c); err != nil {
		s.a.opts.Logger.Warn("fleet: a command that does not decode; ignored", "error", err)
		return
	}
	if !slices.Contains(s.a.opts.Queues, c.Queue) {
		return
	}
	var err error
	switch c.Op {
	case OpPause:
		s.ours[c.Queue] = c.Until
		err = s.w.Pause(ctx, c.Queue, c.Until)
	case OpResume:
		delete(s.ours, c.Queue)
		err = s.w.Resume(ctx, c.Queue)
	default:
		err = errors.New("unknown op")
	}
	if err != nil {
		s.a.opts.Logger.Error("fleet: a command failed", "op", c.Op, "queue", c.Queue, "error", err)
	}
	s.beat(ctx)
}

// beat sends the heartbeat.
func (s *agentState) beat(ctx context.Context) {
	s.a.late.take(s.late)
	body, _ := json.Marshal(s.heartbeat()) // plain data
	// Bounded by an interval: while the broker is away, a heartbeat
	// waits for it no longer than the next one would.
	bctx, cancel := s.a.opts.Clock.WithTimeout(ctx, s.a.opts.Interval)
	defer cancel()
	if err := s.a.bc.Broadcast(bctx, HeartbeatTopic(s.a.set.Prefix), body); err != nil && ctx.Err() == nil {
		s.a.opts.Logger.Warn("fleet: sending the heartbeat", "error", err)
	}
}
