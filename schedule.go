package queuey

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/queuey-go/queuey/broker"
)

// Schedule enqueues a job on a timetable: at a fixed interval (Every) or
// by a cron expression (Cron, read in Location). Any number of workers may
// add the same schedule (by Name); one of them fires each tick, elected
// through the broker, and another takes over within seconds when it stops
// or dies (ARCHITECTURE.md §1, "Periodic jobs"). Each tick is enqueued
// like Producer.Enqueue, with a job id made from the schedule's name and
// the tick's time, so that a consumer can tell a duplicate: a leader that
// dies between a tick's publish and its record leaves that tick to be
// enqueued again, once more at most, with the same id.
type Schedule struct {
	// Name identifies the schedule across the fleet: letters, digits, '-',
	// '_' and '.', at most 100 bytes.
	Name string
	// Job is what each tick enqueues: its Kind, Queue and JSON, as given.
	Job Job
	// Every fires the schedule at each multiple of Every since the zero
	// time (so at every whole hour for time.Hour, at UTC midnight for 24
	// hours); at least a second, in whole milliseconds (the state a leader
	// hands on keeps its ticks in milliseconds). Exactly one of Every and
	// Cron is set. It never fires on start: a schedule that never fired
	// fires first at the first multiple strictly after a worker took its
	// lead (started at 10:20, an hourly one first fires at 11:00, a daily
	// one at the next UTC midnight; started at 11:00 exactly, an hourly one
	// fires at 12:00). One that fired before goes on from its last tick,
	// which the broker keeps, with what it missed meanwhile as Missed says.
	Every time.Duration
	// Cron fires the schedule by a cron expression of five fields (minute,
	// hour, day of month, month, day of week) or a descriptor (@daily,
	// @hourly, @every is refused: use Every), as github.com/robfig/cron/v3
	// reads them. One that never fires (February 30) is refused.
	Cron string
	// Location is the time zone Cron is read in. Default UTC. Across a
	// daylight-saving change a local time that does not exist is skipped
	// and one that happens twice fires once, except in a schedule that
	// fires every hour ("*/15 * * * *"), which fires through the repeated
	// hour as cron does.
	Location *time.Location
	// Missed says what happens to ticks that fell while no worker led the
	// schedule (none ran, or a failover was under way). Default FireLatest.
	Missed MissedTicks
}

// MissedTicks is a Schedule's policy for ticks that fell while no worker
// led it. Ticks are counted from the last one fired, which the broker
// keeps; a schedule that never fired has missed none.
type MissedTicks int

const (
	// FireLatest fires the latest missed tick, once: a report that was due
	// runs, however many were missed.
	FireLatest MissedTicks = iota
	// FireAll fires every missed tick, oldest first, at most MaxCatchUp of
	// them (the latest ones).
	FireAll
	// SkipMissed fires none; the next tick to come fires.
	SkipMissed
)

// String is the constant's name ("FireLatest", "FireAll", "SkipMissed"),
// or "MissedTicks(n)" for a value that is none of them.
func (m MissedTicks) String() string {
	switch m {
	case FireLatest:
		return "FireLatest"
	case FireAll:
		return "FireAll"
	case SkipMissed:
		return "SkipMissed"
	}
	return "MissedTicks(" + strconv.Itoa(int(m)) + ")"
}

// MaxCatchUp bounds the ticks FireAll fires at once.
const MaxCatchUp = 1000

// ErrInvalidSchedule: a Schedule that cannot be run (its name, timetable,
// job or policy), or one added twice.
var ErrInvalidSchedule = errors.New("queuey: invalid schedule")

// AddSchedule has w run s: w is a candidate to lead it, and fires its
// ticks while it leads. Add the same schedule (the same Name and
// timetable) to as many workers as you like; each tick is enqueued once.
// It fails for an invalid schedule, a name added before, and once the
// worker has started. The job's handler need not be in w.
func (w *Worker) AddSchedule(s Schedule) error {
	rs, err := resolveSchedule(s, w.set)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != workerIdle {
		return fmt.Errorf("%w: add schedule %q before Run", ErrWorkerStarted, s.Name)
	}
	for _, o := range w.schedules {
		if o.s.Name == s.Name {
			return fmt.Errorf("%w: schedule %q was added before", ErrInvalidSchedule, s.Name)
		}
	}
	if err := checkConsumers(w.backend, len(w.queues)+len(w.schedules)+1); err != nil {
		return err
	}
	w.schedules = append(w.schedules, &scheduleActor{w: w, s: rs})
	return nil
}

// schedule is a Schedule checked and resolved for a worker.
type schedule struct {
	Schedule
	table   timetable
	q       *queueConfig
	payload json.RawMessage
	state   string // the broker name of its state queue
}

// timetable gives a schedule's ticks.
type timetable interface {
	// next is the first tick strictly after t.
	next(t time.Time) time.Time
}

// interval ticks at each multiple of every since the zero time.
type interval time.Duration

func (i interval) next(t time.Time) time.Time {
	return t.Truncate(time.Duration(i)).Add(time.Duration(i))
}

// cronTable ticks by a cron schedule read in loc.
type cronTable struct {
	s         cron.Schedule
	loc       *time.Location
	everyHour bool
}

// next skips a local time read a second time, as the clocks go back: it
// fired the first time. A schedule that fires every hour fires through
// the repeated hour too, as cron runs such jobs, rather than leave an
// hour without a tick.
func (c cronTable) next(t time.Time) time.Time {
	n := c.s.Next(t.In(c.loc))
	for !c.everyHour && repeated(n) {
		n = c.s.Next(n)
	}
	return n
}

// everyHour reports a cron schedule whose hour field takes every hour.
func everyHour(s cron.Schedule) bool {
	spec, ok := s.(*cron.SpecSchedule)
	return ok && spec.Hour&(1<<24-1) == 1<<24-1
}

// repeated says whether t's local time was read before, an offset change
// earlier: t falls in the hour (or so) that a daylight-saving change sets
// the clocks back over.
func repeated(t time.Time) bool {
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, offset := t.Zone()
	_, before := start.Add(-time.Nanosecond).Zone()
	return before > offset && t.Before(start.Add(time.Duration(before-offset)*time.Second))
}

// resolveSchedule checks s against set and resolves it.
func resolveSchedule(s Schedule, set *queueSet) (*schedule, error) {
	if err := checkScheduleName(s.Name); err != nil {
		return nil, err
	}
	table, err := s.timetable()
	if err != nil {
		return nil, err
	}
	if s.Missed < FireLatest || s.Missed > SkipMissed {
		return nil, fmt.Errorf("%w: schedule %q: Missed is %d, not one of FireLatest, FireAll, SkipMissed", ErrInvalidSchedule, s.Name, s.Missed)
	}
	if err := checkJob(s.Job); err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %w", ErrInvalidSchedule, s.Name, err)
	}
	q, err := set.forJob(s.Job)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %w", ErrInvalidSchedule, s.Name, err)
	}
	payload, err := json.Marshal(s.Job)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule %q: encode its job: %w", ErrInvalidSchedule, s.Name, err)
	}
	state := broker.QueueName(set.prefix, "schedule."+s.Name)
	if err := broker.ValidateQueueName(state); err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %w", ErrInvalidSchedule, s.Name, err)
	}
	if _, taken := set.byBroker[state]; taken {
		return nil, fmt.Errorf("%w: schedule %q: its state queue %q is a queue of the set", ErrInvalidSchedule, s.Name, state)
	}
	if why := derivedName(state); why != "" {
		return nil, fmt.Errorf("%w: schedule %q: its state queue %q would be %s; choose a name that does not end so", ErrInvalidSchedule, s.Name, state, why)
	}
	return &schedule{Schedule: s, table: table, q: q, payload: payload, state: state}, nil
}

// derivedName says which queue of another queue name would be, were it a
// queue's the library derives names from (a queue "schedule.x" of the
// set's prefix, say, whether this set has one or not): "" when none.
func derivedName(name string) string {
	switch {
	case strings.HasSuffix(name, ".dead"):
		return "the dead-letter queue of " + strings.TrimSuffix(name, ".dead")
	case strings.HasSuffix(name, ".suspects"):
		return "the suspects queue of " + strings.TrimSuffix(name, ".suspects")
	case strings.HasSuffix(name, broker.LaneSuffix):
		return "the lane of quorum queue " + strings.TrimSuffix(name, broker.LaneSuffix)
	}
	if q, _, ok := broker.ParseHoldQueueName(name); ok {
		return "a hold queue of " + q
	}
	return ""
}

// checkScheduleName refuses a name that is empty, too long, or holds
// anything but letters, digits, '-', '_' and '.'.
func checkScheduleName(name string) error {
	ok := name != "" && len(name) <= 100
	for _, c := range name {
		ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.", c))
	}
	if !ok {
		return fmt.Errorf("%w: name %q: 1 to 100 letters, digits, '-', '_' or '.'", ErrInvalidSchedule, name)
	}
	return nil
}

// timetable is s's Every or Cron, whichever is set.
func (s Schedule) timetable() (timetable, error) {
	switch {
	case s.Every != 0 && s.Cron != "":
		return nil, fmt.Errorf("%w: schedule %q: both Every and Cron are set", ErrInvalidSchedule, s.Name)
	case s.Every != 0:
		if s.Every < time.Second || s.Every%time.Millisecond != 0 {
			return nil, fmt.Errorf("%w: schedule %q: Every %v is under a second or not whole milliseconds", ErrInvalidSchedule, s.Name, s.Every)
		}
		return interval(s.Every), nil
	case s.Cron != "":
		if strings.HasPrefix(strings.TrimSpace(s.Cron), "@every") {
			return nil, fmt.Errorf("%w: schedule %q: use Every rather than %q", ErrInvalidSchedule, s.Name, s.Cron)
		}
		c, err := cron.ParseStandard(s.Cron)
		if err != nil {
			return nil, fmt.Errorf("%w: schedule %q: cron %q: %w", ErrInvalidSchedule, s.Name, s.Cron, err)
		}
		if c.Next(time.Now()).IsZero() {
			return nil, fmt.Errorf("%w: schedule %q: cron %q never fires", ErrInvalidSchedule, s.Name, s.Cron)
		}
		loc := s.Location
		if loc == nil {
			loc = time.UTC
		}
		return cronTable{s: c, loc: loc, everyHour: everyHour(c)}, nil
	}
	return nil, fmt.Errorf("%w: schedule %q: neither Every nor Cron is set", ErrInvalidSchedule, s.Name)
}

// tickJobID is the job id of a schedule's tick: a name-based UUID
// (version 5 layout) of the schedule's name and the tick's time, the same
// in every worker, so that a tick enqueued twice has one id.
func tickJobID(name string, tick time.Time) string {
	sum := sha1.Sum([]byte("queuey schedule\x00" + name + "\x00" + tick.UTC().Format(time.RFC3339Nano)))
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	h := hex.EncodeToString(u)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// tickEnvelope is what a tick enqueues.
func (s *schedule) tickEnvelope(tick time.Time) broker.Envelope {
	e := broker.NewEnvelope(s.Job.Kind(), s.q.broker, s.payload, tick)
	e.JobID = tickJobID(s.Name, tick)
	return e
}

// dueTicks are the ticks after last, up to and including now, that the
// policy fires on taking the lead: none when nothing fired before.
func (s *schedule) dueTicks(last, now time.Time) []time.Time {
	if last.IsZero() || s.Missed == SkipMissed {
		return nil
	}
	start := s.table.next(last)
	if every, ok := s.table.(interval); ok {
		// Not a walk through a year of one-second ticks to keep the last
		// MaxCatchUp of them.
		if skip := int64(now.Sub(start)/time.Duration(every)) - MaxCatchUp; skip > 0 {
			start = start.Add(time.Duration(skip) * time.Duration(every))
		}
	}
	var due []time.Time
	for t := start; !t.After(now); t = s.table.next(t) {
		due = append(due, t)
		if len(due) > MaxCatchUp {
			due = due[1:]
		}
	}
	if s.Missed == FireLatest && len(due) > 1 {
		due = due[len(due)-1:]
	}
	return due
}

// scheduleState is the body of the one message a schedule's state queue
// holds: the last tick fired, in Unix milliseconds (0: none yet).
type scheduleState struct {
	Schedule   string `json:"schedule"`
	LastTickMs int64  `json:"last_tick_ms"`
}

// last is the last tick fired, or the zero time.
func (st scheduleState) last() time.Time {
	if st.LastTickMs <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(st.LastTickMs)
}

// stateMessage is the state message of s after tick (zero: none yet).
func (s *schedule) stateMessage(tick time.Time) broker.Message {
	st := scheduleState{Schedule: s.Name}
	if !tick.IsZero() {
		st.LastTickMs = tick.UnixMilli()
	}
	body, _ := json.Marshal(st) // a struct of a string and a number
	return broker.Message{Queue: s.state, ID: "schedule-state", Type: "queuey.schedule", Attempt: 1, Body: body}
}
