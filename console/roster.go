package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/fleet"
	"github.com/queuey-go/queuey/internal/relisten"
)

// fleetView is what the console has heard of the fleet.
type fleetView struct {
	// Listening says that Run listens to heartbeats.
	Listening bool
	Workers   []workerView
	Queues    map[string]queueFleet // by Queue.Name
	Schedules []scheduleView
	// Why says why the console does not listen, when it does not.
	Why string
	// Interval is how often workers send heartbeats: the longest
	// interval of those heard, else fleet.DefaultInterval.
	Interval time.Duration
	// DropAfter is how long a worker that stopped sending heartbeats
	// stays on the page.
	DropAfter time.Duration
}

// workerView is one live worker.
type workerView struct {
	ID, Host, Version string
	PID               int
	Started, LastSeen time.Time
	Queues, Leads     []string
	Concurrency       int
	InFlight          int
	Paused            []queuePause
}

// queuePause is a queue a worker has paused.
type queuePause struct {
	Queue string
	Until time.Time
}

// scheduleView is one schedule, as its workers tell it.
type scheduleView struct {
	Name, Spec, Location, Missed string
	LastTick, NextTick           time.Time
	Leader                       string
}

// pauseView is one worker's pause of a queue.
type pauseView struct {
	Worker string
	Until  time.Time
	By     string
}

// queueFleet is what the workers say of one queue.
type queueFleet struct {
	Paused   []pauseView
	Rates    []float64 // jobs/s, oldest first
	Reported bool
	P50, P99 time.Duration
	// Done counts the deliveries the workers heard settled since each
	// started.
	Done uint64
}

// roster keeps what the heartbeats tell. Its state is its run
// goroutine's; pages ask for a view of it by message.
type roster struct {
	backend broker.Backend
	log     *slog.Logger
	set     queuey.QueueSet
	clock   clock.Clock
	asks    chan chan fleetView
	started chan struct{} // closed when run listens
	done    chan struct{} // closed when run returns
}

func newRoster(b broker.Backend, set queuey.QueueSet, c clock.Clock, log *slog.Logger) *roster {
	return &roster{backend: b, log: log, set: set, clock: c, asks: make(chan chan fleetView), started: make(chan struct{}), done: make(chan struct{})}
}

// rateSamples is how many throughput samples a queue's chart shows.
const rateSamples = 60

// heard is one worker as last heard, with the samples of its counts.
type heard struct {
	hb       fleet.Heartbeat
	lastSeen time.Time
}

// rosterState is what run's goroutine owns.
type rosterState struct {
	workers map[string]*heard
	rates   map[string][]float64 // jobs/s by queue, one per sample
	last    map[string]uint64    // the fleet's done count by queue at the last sample
	lastAt  time.Time
	deaf    string // why the console does not hear the workers now, or ""
}

// run listens to the heartbeats until ctx ends. A listener that ends
// (its connection was lost) or cannot start is started again after a
// backoff (1 s, doubling up to 30 s); what was heard stays meanwhile,
// and the pages say that the console does not hear the workers.
func (r *roster) run(ctx context.Context) error {
	defer close(r.done)
	bc, ok := r.backend.(broker.Broadcaster)
	if !ok {
		<-ctx.Done()
		return nil
	}
	hbs := relisten.New(bc, fleet.HeartbeatTopic(r.set.Prefix), r.clock, fleet.DefaultInterval)
	defer hbs.Close()
	st := &rosterState{workers: map[string]*heard{}, rates: map[string][]float64{}, last: map[string]uint64{}}
	// trouble is what a listener's failure makes run do: return, when the
	// backend is closed; else say so, and listen again later.
	trouble := func(what string, err error) error {
		if errors.Is(err, broker.ErrClosed) {
			return fmt.Errorf("console: %s: %w", what, err)
		}
		if ctx.Err() == nil {
			st.deaf = fmt.Sprintf("%s (%v); listening again in %v.", what, err, hbs.Wait())
			r.log.Warn("console: "+what+"; listening again after a backoff", "error", err, "backoff", hbs.Wait())
		}
		return nil
	}
	if err := hbs.Listen(ctx); err != nil {
		if err := trouble("listening to heartbeats", err); err != nil {
			return err
		}
	}
	close(r.started)
	tick := r.clock.Ticker(fleet.DefaultInterval)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-hbs.Messages():
			if !ok {
				err = trouble("the heartbeat listener ended", hbs.Ended())
				break
			}
			st.hear(m, r.clock.Now())
		case <-hbs.Retry():
			if lerr := hbs.Listen(ctx); lerr != nil {
				err = trouble("listening to heartbeats", lerr)
			} else {
				st.deaf = ""
			}
		case <-tick.C:
			st.sample(r.clock.Now())
		case reply := <-r.asks:
			reply <- st.view(r.clock.Now())
		}
		if err != nil {
			return err
		}
	}
}

// view asks run for the fleet as heard now.
func (r *roster) view(ctx context.Context) fleetView {
	not := fleetView{Why: "the console's Run is not running, or the backend cannot broadcast.", Interval: fleet.DefaultInterval, DropAfter: fleet.DropAfter * fleet.DefaultInterval}
	select {
	case <-r.started:
	default:
		return not
	}
	reply := make(chan fleetView, 1)
	select {
	case r.asks <- reply:
		return <-reply
	case <-r.done:
	case <-ctx.Done():
	}
	return not
}

// hear records a heartbeat.
func (st *rosterState) hear(body []byte, now time.Time) {
	var hb fleet.Heartbeat
	if json.Unmarshal(body, &hb) != nil || hb.ID == "" {
		return
	}
	st.workers[hb.ID] = &heard{hb: hb, lastSeen: now}
}

// live drops the workers not heard for DropAfter intervals.
func (st *rosterState) live(now time.Time) {
	for id, w := range st.workers {
		if now.Sub(w.lastSeen) > fleet.DropAfter*max(w.hb.Interval(), time.Second) {
			delete(st.workers, id)
		}
	}
}

// sample adds a throughput sample per queue: the growth of the fleet's
// done counts since the last one.
func (st *rosterState) sample(now time.Time) {
	st.live(now)
	totals := map[string]uint64{}
	for _, w := range st.workers {
		for _, q := range w.hb.Queues {
			totals[q.Name] += q.Done
		}
	}
	secs := now.Sub(st.lastAt).Seconds()
	for q, n := range totals {
		if prev, ok := st.last[q]; ok && secs > 0 && n >= prev {
			st.rates[q] = append(st.rates[q], float64(n-prev)/secs)
			if len(st.rates[q]) > rateSamples {
				st.rates[q] = st.rates[q][1:]
			}
		}
	}
	st.last, st.lastAt = totals, now
}

// view is the fleet as heard at now.
func (st *rosterState) view(now time.Time) fleetView {
	st.live(now)
	v := fleetView{Listening: st.deaf == "", Why: st.deaf, Queues: map[string]queueFleet{}, Interval: fleet.DefaultInterval, DropAfter: fleet.DropAfter * fleet.DefaultInterval}
	scheds := map[string]*scheduleView{}
	for _, w := range st.workers {
		v.Workers = append(v.Workers, workerOf(w))
		for _, q := range w.hb.Queues {
			qf := v.Queues[q.Name]
			if !q.PausedUntil.IsZero() && q.PausedUntil.After(now) {
				qf.Paused = append(qf.Paused, pauseView{Worker: w.hb.Host, Until: q.PausedUntil, By: q.PausedBy})
			}
			if q.Late {
				qf.Reported = true
				qf.P50, qf.P99 = max(qf.P50, time.Duration(q.P50Ms)*time.Millisecond), max(qf.P99, time.Duration(q.P99Ms)*time.Millisecond)
			}
			qf.Rates, qf.Done = st.rates[q.Name], qf.Done+q.Done
			v.Queues[q.Name] = qf
		}
		for _, s := range w.hb.Schedules {
			addSchedule(scheds, s, w.hb.Host)
		}
	}
	sort.Slice(v.Workers, func(i, j int) bool { return v.Workers[i].ID < v.Workers[j].ID })
	if len(st.workers) > 0 {
		// The longest interval of the workers heard: the page states
		// their drop-off time so.
		v.Interval = 0
		for _, w := range st.workers {
			v.Interval = max(v.Interval, w.hb.Interval(), time.Second)
		}
		v.DropAfter = fleet.DropAfter * v.Interval
	}
	for _, s := range scheds {
		v.Schedules = append(v.Schedules, *s)
	}
	sort.Slice(v.Schedules, func(i, j int) bool { return v.Schedules[i].Name < v.Schedules[j].Name })
	return v
}

func workerOf(w *heard) workerView {
	wv := workerView{ID: w.hb.ID, Host: w.hb.Host, PID: w.hb.PID, Version: w.hb.Version, Started: w.hb.Started, LastSeen: w.lastSeen, Concurrency: w.hb.Concurrency}
	for _, q := range w.hb.Queues {
		wv.Queues = append(wv.Queues, q.Name)
		wv.InFlight += q.InFlight
		if !q.PausedUntil.IsZero() {
			wv.Paused = append(wv.Paused, queuePause{Queue: q.Name, Until: q.PausedUntil})
		}
	}
	for _, s := range w.hb.Schedules {
		if s.Leads {
			wv.Leads = append(wv.Leads, s.Name)
		}
	}
	return wv
}

func addSchedule(into map[string]*scheduleView, s fleet.ScheduleReport, host string) {
	sv, ok := into[s.Name]
	if !ok {
		sv = &scheduleView{Name: s.Name, Spec: s.Spec, Location: s.Location, Missed: s.Missed, NextTick: s.NextTick}
		into[s.Name] = sv
	}
	if s.Leads { // the leader's ticks win over a candidate's timetable
		sv.Leader, sv.LastTick = host, s.LastTick
		if !s.NextTick.IsZero() {
			sv.NextTick = s.NextTick
		}
	}
}

// command is a fleet command.
type command = fleet.Command

const (
	opPause  = fleet.OpPause
	opResume = fleet.OpResume
)

// command broadcasts c to the workers, and returns how many live ones
// consume its queue.
func (r *roster) command(ctx context.Context, c command) (int, error) {
	bc, ok := r.backend.(broker.Broadcaster)
	if !ok {
		return 0, fmt.Errorf("the %s backend cannot broadcast to the workers", r.backend.Name())
	}
	body, _ := json.Marshal(c)
	if err := bc.Broadcast(ctx, fleet.CommandTopic(r.set.Prefix), body); err != nil {
		return 0, err
	}
	n := 0
	for _, w := range r.view(ctx).Workers {
		if slices.Contains(w.Queues, c.Queue) {
			n++
		}
	}
	return n, nil
}
