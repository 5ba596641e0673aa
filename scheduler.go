package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker"
)

// A schedule's leader is elected through the broker (ARCHITECTURE.md §1,
// "Periodic jobs"): every worker that has the schedule consumes its state
// queue, which has a single active consumer, and the state queue holds one
// message, the last tick fired. The active consumer receives it and keeps
// it unsettled: while it holds it, it leads. It fires each tick (the job
// first, then a new state message), and settles the old state once the new
// one comes back to it. When it stops or dies, the broker gives the state
// back and hands it to the next consumer, which knows from it where the
// old leader stopped.

// schedulerPrefetch lets a leader receive, beside the state it holds, the
// new state it published and the stray first states of workers that
// started together, and keep the latest.
const schedulerPrefetch = 4

// scheduleRetry is how long a leader waits before it publishes a tick or
// a state again after a failed publish.
const scheduleRetry = time.Second

// leadSettle is how long a new leader with ticks to fire at once waits for
// the states the broker hands it after the first: a leader that stopped
// before its new state came back to it leaves both its old state and the
// new one, which come back in that order, and the tick between them must
// not fire again.
const leadSettle = time.Second

// scheduleActor runs one schedule in one worker: a candidate, or the
// leader.
type scheduleActor struct {
	w      *Worker
	s      *schedule
	gauges scheduleGauges
}

// scheduleGauges is what a schedule actor shows of its state outside, for
// Worker.Schedules: written by the actor only, never read back by it.
type scheduleGauges struct {
	leading  atomic.Bool
	lastTick atomic.Int64 // Unix milliseconds of the last tick fired or read; 0: none
	nextTick atomic.Int64 // Unix milliseconds of the tick it waits for while it leads; 0: none
}

// ScheduleStatus is one schedule as this worker sees it (Worker.Schedules).
type ScheduleStatus struct {
	// Name is the schedule's name.
	Name string
	// Leading says this worker leads the schedule: it fires its ticks.
	Leading bool
	// LastTick is the last tick fired as far as this worker knows: the one
	// it fired last, or the one the state it was handed records. Zero
	// when it knows of none.
	LastTick time.Time
	// NextTick is the tick the leader waits for; zero when not leading.
	NextTick time.Time
}

// Schedules reports each schedule added to the worker (AddSchedule), in
// the order added: whether this worker leads it, and its ticks as far as
// it knows. It is safe to call at any time.
func (w *Worker) Schedules() []ScheduleStatus {
	out := make([]ScheduleStatus, 0, len(w.schedules))
	for _, a := range w.schedules {
		st := ScheduleStatus{Name: a.s.Name, Leading: a.gauges.leading.Load()}
		if ms := a.gauges.lastTick.Load(); ms != 0 {
			st.LastTick = time.UnixMilli(ms).UTC()
		}
		if ms := a.gauges.nextTick.Load(); ms != 0 && st.Leading {
			st.NextTick = time.UnixMilli(ms).UTC()
		}
		out = append(out, st)
	}
	return out
}

// scheduleBackoff is the first wait before a schedule that could not run
// (its state queue refused, its consumer lost) runs again; it doubles up
// to scheduleBackoffMax, and starts again from here after a run that
// lasted that long.
const (
	scheduleBackoff    = time.Second
	scheduleBackoffMax = time.Minute
)

// Run runs the schedule until ctx ends. A schedule is an optional part of
// its worker (ARCHITECTURE.md, "Supervision"): when it cannot run, that
// is said at ERROR and it is tried again after a backoff of its own, while
// the worker's queues run on. Only a closed backend ends it with an error.
func (a *scheduleActor) Run(ctx context.Context) error {
	wait := scheduleBackoff
	for {
		started := a.w.clock.Now()
		err := a.lead(ctx)
		if err == nil || ctx.Err() != nil || errors.Is(err, broker.ErrClosed) {
			return err
		}
		if a.w.clock.Since(started) >= scheduleBackoffMax {
			wait = scheduleBackoff
		}
		a.w.log.Error("schedule cannot run; trying again", "schedule", a.s.Name, "error", err, "retry_in", wait)
		if !sleepOn(ctx, a.w.clock, wait) {
			return nil
		}
		wait = min(2*wait, scheduleBackoffMax)
	}
}

// sleepOn waits d on c; false if ctx ended first.
func sleepOn(ctx context.Context, c clock.Clock, d time.Duration) bool {
	t := c.Timer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// lead declares the state queue and the job's queue (a worker need not
// consume it, and publishes to it as a producer would), gives the state
// queue a first state if it has none, and runs the schedule until ctx
// ends: a worker that stops gives the lead (and the state it holds) back
// to the broker.
func (a *scheduleActor) lead(ctx context.Context) error {
	if err := a.declare(ctx); err != nil {
		return err
	}
	if err := a.seed(ctx); err != nil {
		return err
	}
	c, err := a.w.backend.Consume(ctx, a.s.state, schedulerPrefetch)
	if err != nil {
		return fmt.Errorf("schedule %q: consume its state queue: %w", a.s.Name, err)
	}
	l := &scheduleLoop{a: a, log: a.w.log.With("schedule", a.s.Name)}
	defer a.gauges.leading.Store(false)
	defer l.stopTimer()
	defer c.Cancel()
	return l.run(ctx, c)
}

// declare declares the schedule's state queue and its job's queue. The
// state queue is of its job's queue's type: on a cluster, a quorum one
// outlives the node it was declared on.
func (a *scheduleActor) declare(ctx context.Context) error {
	spec := broker.QueueSpec{Name: a.s.state, Durable: true, Plain: true, SingleActiveConsumer: true, Type: a.s.q.qtype}
	if err := a.w.backend.Declare(ctx, spec, a.s.q.spec()); err != nil {
		return fmt.Errorf("schedule %q: declare its state queue and its job's queue: %w", a.s.Name, err)
	}
	return nil
}

// seed publishes a first state (nothing fired yet) when the state queue
// has none ready: none was ever published, or a leader holds it, and then
// the leader drops this one.
func (a *scheduleActor) seed(ctx context.Context) error {
	n, err := a.w.backend.Depth(ctx, a.s.state)
	if err != nil || n > 0 {
		return err
	}
	if err := a.w.backend.Publish(ctx, a.s.stateMessage(time.Time{})); err != nil {
		return fmt.Errorf("schedule %q: publish its first state: %w", a.s.Name, err)
	}
	return nil
}

// scheduleLoop is a schedule actor's state, owned by its goroutine.
type scheduleLoop struct {
	a        *scheduleActor
	log      *slog.Logger
	held     broker.Delivery // the state it leads with; nil while a candidate
	heldTick time.Time       // the tick held says
	last     time.Time       // the last tick fired (or recorded) as far as it knows
	from     time.Time       // when it took the lead: ticks come after it when none fired before
	pending  []time.Time     // ticks due and not yet published
	recorded bool            // the state after last is published
	settling bool            // a new leader waiting leadSettle before it fires
	failing  bool            // the last publish failed: what is pending is held back
	timer    *clock.Timer
	timerC   <-chan time.Time
}

// run reacts to state deliveries and to its timer until ctx ends.
func (l *scheduleLoop) run(ctx context.Context, c broker.Consumer) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-c.Deliveries():
			if !ok {
				return fmt.Errorf("schedule %q: its state queue's consumer ended: %w", l.a.s.Name, orCancelled(c.Err()))
			}
			if err := l.take(ctx, d); err != nil {
				return err
			}
		case <-l.timerC:
			l.timerC, l.settling = nil, false
			l.due(ctx)
		}
	}
}

// orCancelled is err, or a plain word for a consumer that ended without one.
func orCancelled(err error) error {
	if err == nil {
		return errors.New("cancelled")
	}
	return err
}

// take keeps the latest of the states it is given and settles the others.
// The first one makes it the leader: it fires what the policy says of the
// ticks missed since (after leadSettle, for the states that follow the
// first), then waits for the next. A message that is not the schedule's
// state is dropped; if it was all a candidate had, a first state takes its
// place (should that publish fail, the error ends the run, and the
// restarted schedule actor publishes one).
func (l *scheduleLoop) take(ctx context.Context, d broker.Delivery) error {
	st, err := l.stateOf(d.Message())
	if err != nil {
		l.log.Error("a schedule's state queue held a message that is not its state; dropping it", "error", err)
		_ = d.Ack(ctx)
		if l.held == nil {
			return l.a.seed(ctx)
		}
		return nil
	}
	tick, first := l.trusted(st.last()), l.held == nil
	if !first {
		if tick.Before(l.heldTick) {
			_ = d.Ack(ctx)
			return nil
		}
		_ = l.held.Ack(ctx)
	} else {
		l.from, l.recorded = l.a.w.clock.Now(), true
		l.log.Info("leading the schedule", "last_tick", tick)
		if tick.IsZero() {
			// Never fired: the start of the first lead is recorded as if
			// it were a tick, so that a failover before the first tick
			// does not lose it.
			l.last, l.recorded = l.from.Truncate(time.Millisecond), false
		}
	}
	l.held, l.heldTick = d, tick
	l.a.gauges.leading.Store(true)
	if tick.After(l.last) {
		l.last, l.recorded = tick, true
		l.a.gauges.lastTick.Store(tick.UnixMilli())
		l.pending = l.a.s.dueTicks(tick, l.a.w.clock.Now())
		if n := len(l.pending); n > 0 {
			// The policy's name as text: a JSON handler would write the
			// number.
			l.log.Warn("firing ticks missed while no worker led the schedule", "ticks", n, "policy", l.a.s.Missed.String())
		}
	}
	if first && len(l.pending) > 0 {
		l.settling = true
		l.arm(leadSettle)
	}
	if !l.settling {
		l.due(ctx)
	}
	return nil
}

// scheduleSkew is how far in the future, by this worker's clock, a
// recorded tick may be and still be taken as it is. A tick further ahead
// was recorded by a leader whose clock ran ahead (ARCHITECTURE.md,
// "Periodic jobs"): trusted, it would keep this leader silent until its
// own clock caught up.
const scheduleSkew = 5 * time.Second

// trusted is the recorded tick as this leader takes it: as it is, or,
// when it is more than scheduleSkew ahead of this worker's clock, now
// (said at WARN): the ticks up to now were fired, early, by the leader
// that recorded it; those after now fire when this clock says they are
// due.
func (l *scheduleLoop) trusted(tick time.Time) time.Time {
	now := l.a.w.clock.Now().Truncate(time.Millisecond)
	if !tick.After(now.Add(scheduleSkew)) {
		return tick
	}
	l.log.Warn("the schedule's recorded tick is in the future by this worker's clock: the leader that recorded it had a clock ahead; "+
		"firing by this worker's clock from now (ticks it fired early may fire again when due, with the same job id)",
		"recorded_tick", tick, "now", now, "ahead", tick.Sub(now), "tolerance", scheduleSkew)
	return now
}

// stateOf reads m as the schedule's state.
func (l *scheduleLoop) stateOf(m broker.Message) (scheduleState, error) {
	var st scheduleState
	if err := json.Unmarshal(m.Body, &st); err != nil {
		return st, err
	}
	if st.Schedule != l.a.s.Name {
		return st, fmt.Errorf("a state of schedule %q", st.Schedule)
	}
	return st, nil
}

// due publishes what is due (a state not yet recorded included), then
// sets the timer for what comes next.
func (l *scheduleLoop) due(ctx context.Context) {
	for l.held != nil {
		now := l.a.w.clock.Now()
		if len(l.pending) == 0 && l.recorded {
			next := l.a.s.table.next(l.after())
			if next.IsZero() {
				l.log.Error("the schedule has no tick to come")
				return
			}
			if next.After(now) {
				l.a.gauges.nextTick.Store(next.UnixMilli())
				l.arm(next.Sub(now))
				return
			}
			l.pending = []time.Time{next}
		}
		if l.failing {
			l.heldBack(now)
		}
		err := l.publishDue(ctx)
		if l.failing = err != nil; l.failing {
			l.log.Warn("a schedule's publish failed; trying again", "error", err, "in", scheduleRetry)
			l.declareIfGone(ctx, err)
			l.arm(scheduleRetry)
			return
		}
	}
}

// heldBack applies the schedule's missed-tick policy to ticks whose
// publish keeps failing once newer ones have fallen due behind them:
// they are missed ticks, as those of a failover are. FireLatest fires the
// latest due tick alone, FireAll every one (the last MaxCatchUp),
// SkipMissed none: its next tick to come fires.
func (l *scheduleLoop) heldBack(now time.Time) {
	if len(l.pending) == 0 {
		return
	}
	lastHeld := l.pending[len(l.pending)-1]
	if l.a.s.table.next(lastHeld).After(now) {
		return // nothing fell due behind them
	}
	held := len(l.pending)
	switch l.a.s.Missed {
	case FireLatest:
		l.pending = l.a.s.dueTicks(lastHeld, now)
	case FireAll:
		l.pending = append(l.pending, l.a.s.dueTicks(lastHeld, now)...)
		l.pending = l.pending[max(0, len(l.pending)-MaxCatchUp):]
	case SkipMissed:
		l.pending, l.from = nil, now
	}
	l.log.Warn("firing ticks held back by failed publishes", "held", held, "ticks", len(l.pending), "policy", l.a.s.Missed.String())
}

// declareIfGone declares the schedule's queues again when a publish
// failed because one is gone (deleted behind the worker's back), as a
// queue actor does its queue: a worker that only leads schedules consumes
// none of them, so nothing else would.
func (l *scheduleLoop) declareIfGone(ctx context.Context, err error) {
	if !errors.Is(err, broker.ErrUnroutable) && !errors.Is(err, broker.ErrNoQueue) {
		return
	}
	l.log.Warn("a queue of the schedule is gone; declaring it again", "queue", l.a.s.q.broker, "state_queue", l.a.s.state)
	if err := l.a.declare(ctx); err != nil {
		l.log.Warn("could not declare the schedule's queues again", "error", err)
	}
}

// after is the time the next tick follows: the last tick fired, or the
// time this worker took the lead if that is later (what fell between was
// missed, and take has dealt with it by the schedule's policy).
func (l *scheduleLoop) after() time.Time {
	if l.from.After(l.last) {
		return l.from
	}
	return l.last
}

// publishDue enqueues the pending ticks in order, each followed by the
// state that records it.
func (l *scheduleLoop) publishDue(ctx context.Context) error {
	for len(l.pending) > 0 {
		tick := l.pending[0]
		if err := l.enqueue(ctx, tick); err != nil {
			return err
		}
		l.pending = l.pending[1:]
		l.last, l.recorded = tick, false
		l.a.gauges.lastTick.Store(tick.UnixMilli())
		if err := l.record(ctx); err != nil {
			return err
		}
	}
	if !l.recorded {
		return l.record(ctx)
	}
	return nil
}

// enqueue publishes tick's job, as Producer.Enqueue would.
func (l *scheduleLoop) enqueue(ctx context.Context, tick time.Time) error {
	msg, err := l.a.s.tickEnvelope(tick).Message()
	if err != nil {
		return err
	}
	done := l.a.w.hookCalls.publish(ctx, &msg, publishIntent{op: OpSchedule})
	err = l.a.w.backend.Publish(ctx, msg)
	done(err)
	if err != nil {
		return fmt.Errorf("enqueue the tick of %s: %w", tick.Format(time.RFC3339), err)
	}
	l.log.Debug("schedule fired", "tick", tick, "job_id", msg.ID, "kind", msg.Type)
	return nil
}

// record publishes the state after l.last; the old state is settled when
// this one comes back (take).
func (l *scheduleLoop) record(ctx context.Context) error {
	if err := l.a.w.backend.Publish(ctx, l.a.s.stateMessage(l.last)); err != nil {
		return fmt.Errorf("record the tick of %s: %w", l.last.Format(time.RFC3339), err)
	}
	l.recorded = true
	return nil
}

// arm sets the timer to fire after d.
func (l *scheduleLoop) arm(d time.Duration) {
	l.stopTimer()
	l.timer = l.a.w.clock.Timer(d)
	l.timerC = l.timer.C
}

func (l *scheduleLoop) stopTimer() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer, l.timerC = nil, nil
	}
}
