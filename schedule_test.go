package queuey_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
)

// ticked records the runs of scheduled jobs: when each ran, and its job id
// and enqueue time.
type ticked struct {
	mu   sync.Mutex
	runs []queuey.JobContext
	at   []time.Time
}

func (r *ticked) handler(c interface{ Now() time.Time }) queuey.HandlerFunc[alphaJob] {
	return func(ctx context.Context, j alphaJob, jc queuey.JobContext) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.runs = append(r.runs, jc)
		r.at = append(r.at, c.Now())
		return nil
	}
}

// times are the enqueue times (the ticks) of the runs so far.
func (r *ticked) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, jc := range r.runs {
		out = append(out, jc.EnqueuedAt.UTC())
	}
	return out
}

// every lists the ticks of step from first, n of them.
func every(first time.Time, step time.Duration, n int) []time.Time {
	var out []time.Time
	for i := range n {
		out = append(out, first.Add(time.Duration(i)*step).UTC())
	}
	return out
}

var hourly = queuey.Schedule{Name: "hourly", Job: alphaJob{named("tick")}, Every: time.Hour}

// An interval schedule over 30 simulated days fires exactly its 720 ticks,
// each run at its tick, in order.
func TestAnIntervalScheduleFiresEveryTickOfThirtyDays(t *testing.T) {
	var r ticked
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(hourly))
		h.Advance(30 * 24 * time.Hour)
	})
	want := every(clocktest.Epoch.Add(time.Hour), time.Hour, 720)
	if diff := cmp.Diff(want, r.times()); diff != "" {
		t.Fatalf("ticks (-want +got):\n%s", diff)
	}
	for i, at := range r.at {
		if !at.Equal(want[i]) {
			t.Fatalf("tick %d ran at %v, want at its tick %v", i, at, want[i])
		}
	}
}

// An interval schedule that never fired does not fire on start: it fires
// first at the first multiple of Every strictly after its worker took the
// lead, then at every multiple.
func TestAnIntervalScheduleFiresFirstAtTheNextMultipleAfterItsStart(t *testing.T) {
	day := 24 * time.Hour
	for _, tt := range []struct {
		every time.Duration
		start time.Duration // after Epoch, a UTC midnight
		want  []time.Time
	}{
		{time.Hour, 0, every(clocktest.Epoch.Add(time.Hour), time.Hour, 2)},
		{time.Hour, 20 * time.Minute, every(clocktest.Epoch.Add(time.Hour), time.Hour, 2)},
		{day, 10 * time.Hour, every(clocktest.Epoch.Add(day), day, 2)},
	} {
		var r ticked
		clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
			h.Clock.Set(clocktest.Epoch.Add(tt.start)) // before the worker starts
			must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
			must(t, h.Worker.AddSchedule(queuey.Schedule{Name: "every", Job: alphaJob{named("tick")}, Every: tt.every}))
			h.Advance(tt.want[len(tt.want)-1].Sub(clocktest.Epoch.Add(tt.start)))
		})
		if diff := cmp.Diff(tt.want, r.times()); diff != "" {
			t.Errorf("every %v from +%v: ticks (-want +got):\n%s", tt.every, tt.start, diff)
		}
		for i, at := range r.at {
			if !at.Equal(tt.want[i]) {
				t.Errorf("every %v from +%v: tick %d ran at %v, want at its tick %v", tt.every, tt.start, i, at, tt.want[i])
			}
		}
	}
}

// "Every day at 03:00 in Amsterdam" fires at 03:00 local time across the
// change to summer time (2026-03-29): 02:00 UTC before, 01:00 UTC after.
func TestACronScheduleFollowsItsTimeZoneAcrossADaylightSavingChange(t *testing.T) {
	ams, err := time.LoadLocation("Europe/Amsterdam")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	var r ticked
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		h.Clock.Set(time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)) // before the worker starts
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(queuey.Schedule{Name: "nightly", Job: alphaJob{named("report")}, Cron: "0 3 * * *", Location: ams}))
		h.Advance(30 * 24 * time.Hour)
	})
	got := r.times()
	if len(got) != 30 {
		t.Fatalf("%d ticks in 30 days, want 30: %v", len(got), got)
	}
	for i, tick := range got {
		local := tick.In(ams)
		wantUTC := 2
		if local.After(time.Date(2026, 3, 29, 0, 0, 0, 0, ams)) {
			wantUTC = 1
		}
		if local.Hour() != 3 || local.Minute() != 0 || tick.Hour() != wantUTC || local.Day() != time.Date(2026, 3, 16+i, 0, 0, 0, 0, ams).Day() {
			t.Errorf("tick %d at %v (%v UTC), want 03:00 local on the %d day", i, local, tick, i+1)
		}
	}
}

// Two workers with the same schedule fire each tick once; when the leader
// stops half-way, the other takes over with no tick lost or doubled.
func TestTwoWorkersFireEachTickOnceAcrossAFailover(t *testing.T) {
	var r ticked
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(hourly))
		h.Start() // first: it leads
		second := secondWorkerWith(t, h, &r, hourly)
		h.Advance(10 * time.Hour)
		must(t, h.Stop())
		h.Advance(10 * time.Hour)
		second.stop(t)
	})
	want := every(clocktest.Epoch.Add(time.Hour), time.Hour, 20)
	if diff := cmp.Diff(want, r.times()); diff != "" {
		t.Fatalf("ticks (-want +got):\n%s", diff)
	}
}

// running is a worker a test runs beside the harness's.
type running struct {
	stopRun context.CancelFunc
	done    chan error
}

func (r running) stop(t *testing.T) {
	t.Helper()
	r.stopRun()
	must(t, <-r.done)
}

// handOver runs the hourly schedule, with the missed-tick policy missed,
// on the harness's worker until 03:30 (ticks 1, 2 and 3), stops it, lets
// gap pass with no worker, then runs it on a second worker for rest; it
// returns what ran, and the second worker's log (JSON lines).
func handOver(t *testing.T, missed queuey.MissedTicks, gap, rest time.Duration) (*ticked, []byte) {
	t.Helper()
	r, logs := &ticked{}, &bytes.Buffer{}
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		s := hourly
		s.Missed = missed
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(s))
		h.Advance(3*time.Hour + 30*time.Minute)
		must(t, h.Stop())
		h.Advance(gap)
		later := secondWorkerLogging(t, h, r, s, slog.New(slog.NewJSONHandler(logs, nil)))
		h.Advance(rest)
		later.stop(t)
	})
	return r, logs.Bytes()
}

// What happens to ticks missed while no worker ran is each schedule's
// choice: the latest fires once (the default), all fire, or none. The
// leader that fires missed ticks says so, naming the policy.
func TestMissedTicksFollowTheSchedulesPolicy(t *testing.T) {
	const firing = "firing ticks missed while no worker led the schedule"
	for _, tt := range []struct {
		missed     queuey.MissedTicks
		want       []time.Time // after the first three ticks
		wantPolicy string      // what the missed-ticks line says; "": no line
	}{
		{queuey.FireLatest, append(every(clocktest.Epoch.Add(8*time.Hour), time.Hour, 1), every(clocktest.Epoch.Add(9*time.Hour), time.Hour, 2)...), "FireLatest"},
		{queuey.FireAll, every(clocktest.Epoch.Add(4*time.Hour), time.Hour, 7), "FireAll"},
		{queuey.SkipMissed, every(clocktest.Epoch.Add(9*time.Hour), time.Hour, 2), ""},
	} {
		// Back at 08:30: ticks 4 to 8 missed; then ticks 9 and 10.
		r, logs := handOver(t, tt.missed, 5*time.Hour, 2*time.Hour)
		want := append(every(clocktest.Epoch.Add(time.Hour), time.Hour, 3), tt.want...)
		if diff := cmp.Diff(want, r.times()); diff != "" {
			t.Errorf("policy %v: ticks (-want +got):\n%s", tt.missed, diff)
		}
		var policies []any
		for _, l := range jsonLines(t, logs, "msg", firing) {
			policies = append(policies, l["policy"])
		}
		var wantPolicies []any
		if tt.wantPolicy != "" {
			wantPolicies = []any{tt.wantPolicy}
		}
		if !cmp.Equal(policies, wantPolicies) {
			t.Errorf("policy %v: the policies of %q lines: got %v, want %v", tt.missed, firing, policies, wantPolicies)
		}
	}
}

// A MissedTicks prints as the constant the API names it by; a value that
// is none of them, as its number.
func TestMissedTicksString(t *testing.T) {
	for m, want := range map[queuey.MissedTicks]string{
		queuey.FireLatest: "FireLatest",
		queuey.FireAll:    "FireAll",
		queuey.SkipMissed: "SkipMissed",
		-1:                "MissedTicks(-1)",
		7:                 "MissedTicks(7)",
	} {
		if got := m.String(); got != want {
			t.Errorf("MissedTicks(%d).String(): got %q, want %q", int(m), got, want)
		}
	}
}

// secondWorkerWith starts another worker of app on h's backend and clock,
// with schedule s and r's handler.
func secondWorkerWith(t *testing.T, h *clocktest.Harness, r *ticked, s queuey.Schedule) running {
	t.Helper()
	return secondWorkerLogging(t, h, r, s, slog.New(slog.DiscardHandler))
}

// secondWorkerLogging is secondWorkerWith, logging to logger.
func secondWorkerLogging(t *testing.T, h *clocktest.Harness, r *ticked, s queuey.Schedule, logger *slog.Logger) running {
	t.Helper()
	w, err := queuey.NewWorker(h.Backend, app, &queuey.WorkerConfig{Clock: h.Clock, Concurrency: 1, Logger: logger})
	must(t, err)
	must(t, queuey.Handle(w, r.handler(h.Clock)))
	must(t, w.AddSchedule(s))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return running{stopRun: cancel, done: done}
}

// Each tick's job id is made from the schedule and the tick: the same in
// every worker, different from tick to tick.
func TestATicksJobIDIsTheSameInEveryWorker(t *testing.T) {
	var r ticked
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(hourly))
		h.Advance(2 * time.Hour)
	})
	if len(r.runs) != 2 || r.runs[0].JobID == r.runs[1].JobID {
		t.Fatalf("runs: %+v", r.runs)
	}
	var again ticked
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, again.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(hourly))
		h.Advance(time.Hour)
	})
	if again.runs[0].JobID != r.runs[0].JobID {
		t.Errorf("the first tick's id: %s in one run, %s in another", r.runs[0].JobID, again.runs[0].JobID)
	}
}

func TestInvalidSchedulesAreRefused(t *testing.T) {
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		for name, s := range map[string]queuey.Schedule{
			"no name":        {Job: alphaJob{}, Every: time.Hour},
			"a bad name":     {Name: "a b", Job: alphaJob{}, Every: time.Hour},
			"no timetable":   {Name: "x", Job: alphaJob{}},
			"both":           {Name: "x", Job: alphaJob{}, Every: time.Hour, Cron: "@daily"},
			"under a second": {Name: "x", Job: alphaJob{}, Every: time.Millisecond},
			"a bad cron":     {Name: "x", Job: alphaJob{}, Cron: "61 * * * *"},
			"@every":         {Name: "x", Job: alphaJob{}, Cron: "@every 1h"},
			"no job":         {Name: "x", Every: time.Hour},
			"a foreign job":  {Name: "x", Job: elsewhere{}, Every: time.Hour},
			"a bad policy":   {Name: "x", Job: alphaJob{}, Every: time.Hour, Missed: 7},
			"never fires":    {Name: "never", Job: alphaJob{}, Cron: "0 0 30 2 *"},
			"not whole ms":   {Name: "odd", Job: alphaJob{}, Every: time.Second + time.Microsecond},
			// Names whose state queue a derived name of another queue would be.
			"a dead-letter queue's name": {Name: "x.dead", Job: alphaJob{}, Every: time.Hour},
			"a suspects queue's name":    {Name: "x.suspects", Job: alphaJob{}, Every: time.Hour},
			"a lane's name":              {Name: "x.first", Job: alphaJob{}, Every: time.Hour},
			"a hold queue's name":        {Name: "x.deferred.1000", Job: alphaJob{}, Every: time.Hour},
		} {
			if err := h.Worker.AddSchedule(s); !errors.Is(err, queuey.ErrInvalidSchedule) {
				t.Errorf("%s: AddSchedule = %v, want ErrInvalidSchedule", name, err)
			}
		}
		must(t, h.Worker.AddSchedule(hourly))
		if err := h.Worker.AddSchedule(hourly); !errors.Is(err, queuey.ErrInvalidSchedule) {
			t.Errorf("the same name twice: %v, want ErrInvalidSchedule", err)
		}
	})
}

// hourlyState is the broker name of hourly's state queue in app.
const hourlyState = "test.schedule.hourly"

// stateOf reads m as a schedule's state message: its schedule, its last
// tick, and whether it is one.
func stateOf(m broker.Message) (string, time.Time, bool) {
	var st struct {
		Schedule   string `json:"schedule"`
		LastTickMs int64  `json:"last_tick_ms"`
	}
	if !strings.Contains(m.Queue, ".schedule.") || json.Unmarshal(m.Body, &st) != nil {
		return "", time.Time{}, false
	}
	return st.Schedule, time.UnixMilli(st.LastTickMs).UTC(), true
}

// isState says whether m is the state message that records tick.
func isState(m broker.Message, tick time.Time) bool {
	_, last, ok := stateOf(m)
	return ok && last.Equal(tick)
}

// faultyBackend wraps the memory backend for one worker: it refuses the
// publishes refuse picks (refuse is called under mu, with the count of the
// publishes it picked before), and never hands over the deliveries hide
// picks, as if they were still on their way when the worker stopped.
type faultyBackend struct {
	*memory.Backend
	mu      sync.Mutex
	refuse  func(m broker.Message) bool
	hide    func(m broker.Message) bool
	refused int
}

func (b *faultyBackend) wrap(m *memory.Backend) broker.Backend {
	b.Backend = m
	return b
}

func (b *faultyBackend) Publish(ctx context.Context, m broker.Message) error {
	b.mu.Lock()
	no := b.refuse != nil && b.refuse(m)
	if no {
		b.refused++
	}
	b.mu.Unlock()
	if no {
		return errors.New("the broker refused the publish")
	}
	return b.Backend.Publish(ctx, m)
}

func (b *faultyBackend) Consume(ctx context.Context, queue string, prefetch int) (broker.Consumer, error) {
	c, err := b.Backend.Consume(ctx, queue, prefetch)
	if err != nil || b.hide == nil {
		return c, err
	}
	h := &hidingConsumer{Consumer: c, out: make(chan broker.Delivery), done: make(chan struct{})}
	go h.forward(b.hide)
	return h, nil
}

// hidingConsumer hands over its consumer's deliveries but those hide picks.
type hidingConsumer struct {
	broker.Consumer
	out  chan broker.Delivery
	done chan struct{}
	once sync.Once
}

func (h *hidingConsumer) forward(hide func(broker.Message) bool) {
	defer close(h.out)
	for d := range h.Consumer.Deliveries() {
		if hide(d.Message()) {
			continue
		}
		select {
		case h.out <- d:
		case <-h.done:
			return
		}
	}
}

func (h *hidingConsumer) Deliveries() <-chan broker.Delivery { return h.out }

func (h *hidingConsumer) Cancel() {
	h.once.Do(func() { close(h.done) })
	h.Consumer.Cancel()
}

// A leader that stops after it published a tick's new state, but before
// that state came back to it, gives back both its old state and the new
// one: the next leader fires that tick again if it acts on the old state
// before it sees the new one.
func TestScheduleFailoverBeforeTheNewStateCameBackDoublesNoTick(t *testing.T) {
	tick2 := clocktest.Epoch.Add(2 * time.Hour)
	fb := &faultyBackend{hide: func(m broker.Message) bool { return isState(m, tick2) }}
	var r ticked
	clocktest.Run(t, app, &clocktest.Options{WrapBackend: fb.wrap}, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(hourly))
		h.Start() // first: it leads
		second := secondWorkerWith(t, h, &r, hourly)
		h.Advance(2*time.Hour + 30*time.Minute)
		must(t, h.Stop())
		h.Advance(2 * time.Hour)
		second.stop(t)
	})
	if diff := cmp.Diff(every(clocktest.Epoch.Add(time.Hour), time.Hour, 4), r.times()); diff != "" {
		t.Fatalf("ticks (-want +got):\n%s", diff)
	}
}

// A state whose publish failed is published again a second later, not at
// the next tick: a failover meanwhile would fire the tick again.
func TestScheduleAFailedRecordIsRetriedAfterASecond(t *testing.T) {
	tick2 := clocktest.Epoch.Add(2 * time.Hour)
	fb := &faultyBackend{}
	fb.refuse = func(m broker.Message) bool { return isState(m, tick2) && fb.refused == 0 }
	var r ticked
	clocktest.Run(t, app, &clocktest.Options{WrapBackend: fb.wrap}, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(hourly))
		h.Start()
		second := secondWorkerWith(t, h, &r, hourly)
		h.Advance(2*time.Hour + 2*time.Second) // the record, refused at 02:00, is retried at 02:00:01
		must(t, h.Stop())
		h.Advance(2 * time.Hour)
		second.stop(t)
	})
	if fb.refused != 1 {
		t.Errorf("%d publishes refused, want 1", fb.refused)
	}
	if diff := cmp.Diff(every(clocktest.Epoch.Add(time.Hour), time.Hour, 4), r.times()); diff != "" {
		t.Fatalf("ticks (-want +got):\n%s", diff)
	}
}

// declareState declares hourly's state queue as a worker does and puts
// body on it.
func declareState(t *testing.T, h *clocktest.Harness, body string) {
	t.Helper()
	must(t, h.Backend.Declare(t.Context(), broker.QueueSpec{Name: hourlyState, Durable: true, Plain: true, SingleActiveConsumer: true}))
	must(t, h.Backend.Publish(t.Context(), broker.Message{Queue: hourlyState, ID: "junk", Type: "junk", Attempt: 1, Body: []byte(body)}))
}

// A state queue that holds something that is not a state, and no state,
// still gets a leader: the message is dropped and a first state takes its
// place, whether it is not JSON or is JSON of no schedule state.
func TestScheduleAStateQueueWithoutAStateStillGetsALeader(t *testing.T) {
	for _, body := range []string{"not json", `{"job_id":"x"}`, `null`} {
		var r ticked
		clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
			declareState(t, h, body)
			must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
			must(t, h.Worker.AddSchedule(hourly))
			h.Advance(3 * time.Hour)
			declareState(t, h, body) // while it leads: dropped, the lead kept
			h.Advance(2 * time.Hour)
		})
		if diff := cmp.Diff(every(clocktest.Epoch.Add(time.Hour), time.Hour, 5), r.times()); diff != "" {
			t.Errorf("state queue holding %q: ticks (-want +got):\n%s", body, diff)
		}
	}
}

// A state of another schedule on the state queue is not this schedule's:
// the leader drops it and fires on.
func TestScheduleAStateOfAnotherScheduleIsDropped(t *testing.T) {
	var r ticked
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(hourly))
		h.Advance(2 * time.Hour)
		later := clocktest.Epoch.Add(1000 * time.Hour).UnixMilli()
		declareState(t, h, fmt.Sprintf(`{"schedule":"other","last_tick_ms":%d}`, later))
		h.Advance(2 * time.Hour)
	})
	if diff := cmp.Diff(every(clocktest.Epoch.Add(time.Hour), time.Hour, 4), r.times()); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
}

// "Every day at 02:30 in Amsterdam" fires once on the day the clocks go
// back (2026-10-25, 03:00 CEST to 02:00 CET: 02:30 happens twice), both
// while a leader runs and when a FireAll leader catches up across it.
func TestScheduleACronTimeThatHappensTwiceFiresOnce(t *testing.T) {
	ams, err := time.LoadLocation("Europe/Amsterdam")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	nightly := queuey.Schedule{Name: "nightly", Job: alphaJob{named("report")}, Cron: "30 2 * * *", Location: ams, Missed: queuey.FireAll}
	for _, catchUp := range []bool{false, true} {
		var r ticked
		clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
			h.Clock.Set(time.Date(2026, 10, 20, 12, 0, 0, 0, time.UTC))
			must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
			must(t, h.Worker.AddSchedule(nightly))
			h.Advance(4 * 24 * time.Hour) // to the 24th, 12:00 UTC
			if catchUp {
				must(t, h.Stop())
				h.Clock.Add(3 * 24 * time.Hour) // the 27th, 12:00 UTC
				later := secondWorkerWith(t, h, &r, nightly)
				h.Advance(time.Minute)
				later.stop(t)
				return
			}
			h.Advance(3 * 24 * time.Hour)
		})
		days := map[int]int{}
		for _, tick := range r.times() {
			days[tick.In(ams).Day()]++
		}
		if want := map[int]int{21: 1, 22: 1, 23: 1, 24: 1, 25: 1, 26: 1, 27: 1}; !maps.Equal(days, want) {
			t.Errorf("catching up %t: ticks by local day %v, want one a day from the 21st to the 27th: %v", catchUp, days, r.times())
		}
	}
}

// A worker with schedules and no handler (allowed since periodic jobs)
// leads its schedules only: it takes no job off the queues, where it would
// hold each back for want of a handler (a minute late, or dead-lettered
// after UnknownKindWait when it is alone).
func TestScheduleAWorkerWithOnlySchedulesTakesNoJobs(t *testing.T) {
	var r ticked
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, h.Worker.AddSchedule(hourly)) // no handler: it only leads the schedule
		h.Start()
		other := secondWorkerWith(t, h, &r, queuey.Schedule{Name: "unrelated", Job: alphaJob{}, Every: 24 * time.Hour})
		h.Advance(5 * time.Hour)
		other.stop(t)
	})
	want := every(clocktest.Epoch.Add(time.Hour), time.Hour, 5)
	if diff := cmp.Diff(want, r.at); diff != "" {
		t.Errorf("runs at (-want +got):\n%s", diff)
	}
}

// A worker that does not consume the queue of its schedule's job declares
// it, as a producer would: the tick is not refused as unroutable until
// another worker or a producer comes.
func TestScheduleDeclaresItsJobsQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mock := clock.NewMock()
		mock.Set(clocktest.Epoch)
		b := memory.New(&memory.Options{Clock: mock})
		defer b.Close()
		w, err := queuey.NewWorker(b, app, &queuey.WorkerConfig{Clock: mock, Queues: []string{"beta"}, Logger: slog.New(slog.DiscardHandler)})
		must(t, err)
		must(t, w.AddSchedule(hourly)) // its job goes to alpha, which w does not consume
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		synctest.Wait()
		mock.Add(time.Hour + time.Minute)
		synctest.Wait()
		n := b.Pending(qAlpha)
		cancel()
		must(t, <-done)
		if n != 1 {
			t.Errorf("%d jobs on alpha an hour later, want the tick's", n)
		}
	})
}

// A leader whose state queue's consumer is lost (its channel closed) is
// restarted by its worker's supervisor and leads again: no tick lost or
// doubled; with PoisonAfter too, and a standby in another worker.
func TestScheduleALeaderThatLostItsConsumerLeadsAgain(t *testing.T) {
	for _, poison := range []int{0, 1} {
		var r ticked
		opts := &clocktest.Options{Worker: queuey.WorkerConfig{PoisonAfter: poison}}
		clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
			must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
			must(t, h.Worker.AddSchedule(hourly))
			h.Advance(2*time.Hour + 30*time.Minute)
			h.Backend.Disconnect(hourlyState)
			h.Advance(time.Hour)
			second := secondWorkerWith(t, h, &r, hourly)
			h.Advance(time.Hour)
			h.Backend.Disconnect(hourlyState) // both: the first back in line leads
			h.Advance(2 * time.Hour)
			must(t, h.Stop())
			h.Advance(time.Hour)
			second.stop(t)
		})
		if diff := cmp.Diff(every(clocktest.Epoch.Add(time.Hour), time.Hour, 7), r.times()); diff != "" {
			t.Errorf("PoisonAfter %d: ticks (-want +got):\n%s", poison, diff)
		}
	}
}

// A FireAll schedule of a second that no worker ran for a year fires the
// latest MaxCatchUp ticks, oldest first, then each tick as it comes.
func TestScheduleMissedForAYearFiresMaxCatchUp(t *testing.T) {
	s := queuey.Schedule{Name: "second", Job: alphaJob{named("tick")}, Every: time.Second, Missed: queuey.FireAll}
	var r ticked
	var back time.Time
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(s))
		h.Advance(1500 * time.Millisecond) // tick 1
		must(t, h.Stop())
		h.Clock.Add(365 * 24 * time.Hour)
		back = h.Clock.Now()
		later := secondWorkerWith(t, h, &r, s)
		h.Advance(2 * time.Second)
		later.stop(t)
	})
	latest := back.Truncate(time.Second)
	want := append(every(clocktest.Epoch.Add(time.Second), time.Second, 1), every(latest.Add(-(queuey.MaxCatchUp-1)*time.Second), time.Second, queuey.MaxCatchUp+2)...)
	if diff := cmp.Diff(want, r.times()); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
}

// A leader that takes over exactly at a tick fires it, once, whatever the
// policy but SkipMissed, for which it fell before it led; FireLatest with
// exactly one tick missed fires that one.
func TestScheduleATakeoverExactlyAtATick(t *testing.T) {
	for _, tt := range []struct {
		missed queuey.MissedTicks
		at     time.Duration // when the second worker starts, after 03:30
		want   []time.Time   // after the first three ticks
	}{
		{queuey.FireLatest, 30 * time.Minute, every(clocktest.Epoch.Add(4*time.Hour), time.Hour, 3)},
		{queuey.FireAll, 30 * time.Minute, every(clocktest.Epoch.Add(4*time.Hour), time.Hour, 3)},
		{queuey.SkipMissed, 30 * time.Minute, every(clocktest.Epoch.Add(5*time.Hour), time.Hour, 2)},
		{queuey.FireLatest, 40 * time.Minute, every(clocktest.Epoch.Add(4*time.Hour), time.Hour, 3)},
	} {
		r, _ := handOver(t, tt.missed, tt.at, 6*time.Hour-3*time.Hour-30*time.Minute-tt.at)
		want := append(every(clocktest.Epoch.Add(time.Hour), time.Hour, 3), tt.want...)
		if diff := cmp.Diff(want, r.times()); diff != "" {
			t.Errorf("policy %v, back at +%v: ticks (-want +got):\n%s", tt.missed, tt.at, diff)
		}
	}
}

// A worker that stops while a tick's publish is being retried stops
// cleanly, and leaves the state where it was: the next leader fires the
// tick.
func TestScheduleAStopWhileAPublishIsRetried(t *testing.T) {
	tick2 := clocktest.Epoch.Add(2 * time.Hour)
	fb := &faultyBackend{refuse: func(m broker.Message) bool {
		env, err := broker.DecodeEnvelope(m.Body)
		return err == nil && env.EnqueuedAt().Equal(tick2)
	}}
	var r ticked
	clocktest.Run(t, app, &clocktest.Options{WrapBackend: fb.wrap}, func(t *testing.T, h *clocktest.Harness) {
		must(t, h.Worker.AddSchedule(hourly))
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		h.Advance(2*time.Hour + 10*time.Second)
		must(t, h.Stop())
		if n := h.Backend.Pending(hourlyState); n != 1 {
			t.Errorf("%d states on the state queue, want 1", n)
		}
		later := secondWorkerWith(t, h, &r, hourly)
		h.Advance(time.Hour)
		later.stop(t)
	})
	if fb.refused != 11 {
		t.Errorf("%d publishes refused, want 11: at the tick and once a second", fb.refused)
	}
	if diff := cmp.Diff(every(clocktest.Epoch.Add(time.Hour), time.Hour, 3), r.times()); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
}

// Six workers start at once on an empty state queue, each with a first
// state; six more start while the first leads, each with a stale one: the
// leader keeps one state, every tick fires once, and when the leaders stop
// one after the other, the next one takes over each time.
func TestScheduleWorkersStartingTogetherFireEachTickOnce(t *testing.T) {
	var r ticked
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(hourly))
		var workers []running
		for range 5 {
			workers = append(workers, secondWorkerWith(t, h, &r, hourly))
		}
		h.Advance(90 * time.Minute)
		for range 6 {
			workers = append(workers, secondWorkerWith(t, h, &r, hourly))
		}
		h.Advance(time.Hour)
		if n, f := h.Backend.Pending(hourlyState), h.Backend.InFlight(hourlyState); n != 0 || f != 1 {
			t.Errorf("state queue: %d ready, %d held; want 0 and 1", n, f)
		}
		must(t, h.Stop())
		for _, w := range workers {
			h.Advance(time.Hour)
			w.stop(t)
		}
	})
	if diff := cmp.Diff(every(clocktest.Epoch.Add(time.Hour), time.Hour, 13), r.times()); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
}

// A leader whose first tick cannot be published yet, and that stops, does
// not take that tick with it: the start of its lead was recorded, so the
// next leader knows the tick fell due.
func TestScheduleAFailoverBeforeTheFirstTickKeepsIt(t *testing.T) {
	tick1 := clocktest.Epoch.Add(time.Hour)
	fb := &faultyBackend{}
	fb.refuse = func(m broker.Message) bool { return m.Type == "alpha_job" && fb.refused < 3 }
	var r ticked
	clocktest.Run(t, app, &clocktest.Options{WrapBackend: fb.wrap}, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(hourly))
		h.Start()
		h.Advance(time.Hour + 2*time.Second) // the first tick's job refused at 01:00, 01:00:01, 01:00:02
		must(t, h.Stop())
		second := secondWorkerWith(t, h, &r, hourly)
		h.Advance(time.Hour)
		second.stop(t)
	})
	if diff := cmp.Diff([]time.Time{tick1, tick1.Add(time.Hour)}, r.times()); diff != "" {
		t.Fatalf("ticks (-want +got):\n%s", diff)
	}
}

// refusingDeclares wraps the memory backend: it refuses the first n
// declarations that name queue, as a broker refuses a state queue
// declared before with other arguments.
type refusingDeclares struct {
	*memory.Backend
	queue string
	n     atomic.Int32
}

func (b *refusingDeclares) Declare(ctx context.Context, specs ...broker.QueueSpec) error {
	for _, s := range specs {
		if s.Name == b.queue && b.n.Add(-1) >= 0 {
			return fmt.Errorf("%w: declared before without x-single-active-consumer", broker.ErrPreconditionFailed)
		}
	}
	return b.Backend.Declare(ctx, specs...)
}

// A schedule that cannot run (its state queue refused, again and again,
// more often than the supervisor's intensity allows) is said at ERROR and
// tried again with a backoff of its own; the worker's queues run on, and
// the schedule ticks once its queue is fixed.
func TestAScheduleThatCannotRunLeavesTheQueuesRunning(t *testing.T) {
	b := &refusingDeclares{queue: hourlyState}
	b.n.Store(8)
	logs := &logRecorder{}
	var r ticked
	opts := &clocktest.Options{WrapBackend: func(m *memory.Backend) broker.Backend { b.Backend = m; return b }, Logger: slog.New(logs)}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, queuey.Handle(h.Worker, func(ctx context.Context, j betaJob, jc queuey.JobContext) error { return nil }))
		must(t, h.Worker.AddSchedule(hourly))
		h.Advance(time.Minute)
		job := mustID(t)(h.Producer.Enqueue(t.Context(), betaJob{named("runs")}))
		h.Advance(time.Second)
		if n := len(h.Log.Of(job)); n != 1 {
			t.Fatalf("a job of another queue ran %d times while the schedule could not run, want 1", n)
		}
		h.Advance(3 * time.Hour)
		must(t, h.Stop())
	})
	if n := logs.count("schedule cannot run; trying again", slog.LevelError); n != 8 {
		t.Errorf("%d ERROR lines for the schedule, want 8 (one per refusal)", n)
	}
	if got := r.times(); len(got) < 2 {
		t.Errorf("ticks once the state queue was accepted: %v, want the hourly ticks", got)
	}
}

// goneQueue wraps the memory backend: once gone is set, publishes to
// queue are unroutable, as to a deleted queue, until it is declared again.
type goneQueue struct {
	*memory.Backend
	queue      string
	gone       atomic.Bool
	redeclared atomic.Int32
}

func (b *goneQueue) Publish(ctx context.Context, m broker.Message) error {
	if m.Queue == b.queue && b.gone.Load() {
		return fmt.Errorf("%w: no queue %q", broker.ErrUnroutable, m.Queue)
	}
	return b.Backend.Publish(ctx, m)
}

func (b *goneQueue) Declare(ctx context.Context, specs ...broker.QueueSpec) error {
	for _, s := range specs {
		if s.Name == b.queue && b.gone.CompareAndSwap(true, false) {
			b.redeclared.Add(1)
		}
	}
	return b.Backend.Declare(ctx, specs...)
}

// A worker that only leads a schedule consumes no queue, so no queue
// actor declares the job's queue again when it is deleted: the schedule
// does, at its first failed publish, and its ticks go on.
func TestAScheduleOnlyWorkerDeclaresItsJobQueueAgain(t *testing.T) {
	b := &goneQueue{queue: qAlpha}
	minutely := queuey.Schedule{Name: "minutely", Job: alphaJob{named("tick")}, Every: time.Minute}
	opts := &clocktest.Options{WrapBackend: func(m *memory.Backend) broker.Backend { b.Backend = m; return b }}
	clocktest.Run(t, app, opts, func(t *testing.T, h *clocktest.Harness) {
		must(t, h.Worker.AddSchedule(minutely))
		h.Advance(2*time.Minute + time.Second)
		if n := h.Backend.Pending(qAlpha); n != 2 {
			t.Fatalf("ticks enqueued in 2 minutes: %d, want 2", n)
		}
		b.gone.Store(true)
		h.Advance(3 * time.Minute)
		if n := b.redeclared.Load(); n != 1 {
			t.Errorf("the job's queue was declared again %d times, want 1", n)
		}
		if n := h.Backend.Pending(qAlpha); n != 5 {
			t.Errorf("ticks enqueued in 5 minutes: %d, want 5 (the one refused, a second later)", n)
		}
	})
}

// Ticks whose publish keeps failing until newer ones fall due are missed
// ticks: once the broker takes them again, FireLatest fires the latest
// alone and FireAll every one, not a burst of all whatever the policy.
func TestTicksHeldBackByFailedPublishesFollowTheMissedTickPolicy(t *testing.T) {
	for _, c := range []struct {
		missed queuey.MissedTicks
		want   []time.Time
	}{
		{queuey.FireLatest, []time.Time{clocktest.Epoch.Add(time.Hour), clocktest.Epoch.Add(5 * time.Hour), clocktest.Epoch.Add(6 * time.Hour)}},
		{queuey.FireAll, every(clocktest.Epoch.Add(time.Hour), time.Hour, 6)},
		{queuey.SkipMissed, []time.Time{clocktest.Epoch.Add(time.Hour), clocktest.Epoch.Add(6 * time.Hour)}},
	} {
		t.Run(c.missed.String(), func(t *testing.T) {
			fb := &faultyBackend{}
			var r ticked
			clocktest.Run(t, app, &clocktest.Options{WrapBackend: fb.wrap}, func(t *testing.T, h *clocktest.Harness) {
				down := false // the job's queue refuses publishes (02:00 to 05:30)
				fb.refuse = func(m broker.Message) bool { return down && m.Queue == qAlpha }
				must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
				s := hourly
				s.Missed = c.missed
				must(t, h.Worker.AddSchedule(s))
				h.Advance(90 * time.Minute)
				fb.mu.Lock()
				down = true
				fb.mu.Unlock()
				h.Advance(4 * time.Hour)
				fb.mu.Lock()
				down = false
				fb.mu.Unlock()
				h.Advance(time.Hour)
			})
			if diff := cmp.Diff(c.want, r.times()); diff != "" {
				t.Errorf("ticks (-want +got):\n%s", diff)
			}
		})
	}
}

// Worker.Schedules says whether the worker leads each schedule, its last
// tick and, for the leader, the next; after a handover the other worker
// says so.
func TestWorkerSchedulesSaysWhoLeadsAndTheTicks(t *testing.T) {
	var r ticked
	clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
		must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
		must(t, h.Worker.AddSchedule(hourly))
		if got := h.Worker.Schedules(); len(got) != 1 || got[0].Name != "hourly" || got[0].Leading {
			t.Fatalf("Schedules() before Run = %+v, want hourly, not leading", got)
		}
		h.Advance(90 * time.Minute)
		w2, err := queuey.NewWorker(h.Backend, app, &queuey.WorkerConfig{Clock: h.Clock, Concurrency: 1, Logger: slog.New(slog.DiscardHandler)})
		must(t, err)
		must(t, queuey.Handle(w2, r.handler(h.Clock)))
		must(t, w2.AddSchedule(hourly))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w2.Run(ctx) }()
		h.Idle()
		want := queuey.ScheduleStatus{Name: "hourly", Leading: true, LastTick: clocktest.Epoch.Add(time.Hour), NextTick: clocktest.Epoch.Add(2 * time.Hour)}
		if diff := cmp.Diff([]queuey.ScheduleStatus{want}, h.Worker.Schedules()); diff != "" {
			t.Errorf("the leader's Schedules() (-want +got):\n%s", diff)
		}
		if got := w2.Schedules(); len(got) != 1 || got[0].Leading {
			t.Errorf("the candidate's Schedules() = %+v, want not leading", got)
		}
		must(t, h.Stop())
		h.Advance(time.Hour)
		if got := w2.Schedules(); len(got) != 1 || !got[0].Leading || !got[0].LastTick.Equal(clocktest.Epoch.Add(2*time.Hour)) {
			t.Errorf("after the handover, the new leader's Schedules() = %+v, want leading, last tick 02:00", got)
		}
		cancel()
		must(t, <-done)
	})
}

// A leader whose clock ran ahead records ticks in the future. The next
// leader, with a right clock, says so at WARN and fires by its own clock
// from the takeover on, where it would have gone silent until its clock
// caught up with the record (an hour, or 30 s).
func TestANewLeaderDoesNotWaitForATickRecordedByAClockAhead(t *testing.T) {
	for _, c := range []struct {
		ahead, every time.Duration
	}{{time.Hour, time.Minute}, {30 * time.Second, 5 * time.Second}} {
		t.Run(c.ahead.String(), func(t *testing.T) {
			s := queuey.Schedule{Name: "skewed", Job: alphaJob{named("tick")}, Every: c.every}
			var r ticked
			logs := &logRecorder{}
			var takeover time.Time
			clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
				must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
				ahead := scheduleOnly(t, h, s, clocktest.Skewed(h.Clock, c.ahead), slog.New(slog.DiscardHandler))
				h.Advance(10 * c.every)
				ahead.stop(t)
				takeover = h.Clock.Now()
				right := scheduleOnly(t, h, s, h.Clock, slog.New(logs))
				h.Advance(3*c.every + time.Second)
				right.stop(t)
			})
			var after []time.Time // ticks run on time (not early) after the takeover
			r.mu.Lock()
			for i, jc := range r.runs {
				tick := jc.EnqueuedAt.UTC()
				if tick.After(takeover) && !r.at[i].Before(tick) {
					after = append(after, tick)
				}
			}
			r.mu.Unlock()
			if want := every(takeover.Truncate(c.every).Add(c.every), c.every, 3); !cmp.Equal(want, after) {
				t.Errorf("ticks fired after the takeover, at the right time: %v, want %v", after, want)
			}
			if n := logs.count("the schedule's recorded tick is in the future by this worker's clock: the leader that recorded it had a clock ahead; "+
				"firing by this worker's clock from now (ticks it fired early may fire again when due, with the same job id)", slog.LevelWarn); n != 1 {
				t.Errorf("%d WARN lines about the recorded tick, want 1", n)
			}
		})
	}
}

// scheduleOnly runs a worker on h's backend that only leads s, on c.
func scheduleOnly(t *testing.T, h *clocktest.Harness, s queuey.Schedule, c clock.Clock, logger *slog.Logger) running {
	t.Helper()
	w, err := queuey.NewWorker(h.Backend, app, &queuey.WorkerConfig{Clock: c, Logger: logger})
	must(t, err)
	must(t, w.AddSchedule(s))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return running{stopRun: cancel, done: done}
}
