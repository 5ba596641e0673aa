package queuey_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey"
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

// What happens to ticks missed while no worker ran is each schedule's
// choice: the latest fires once (the default), all fire, or none.
func TestMissedTicksFollowTheSchedulesPolicy(t *testing.T) {
	for _, tt := range []struct {
		missed queuey.MissedTicks
		want   []time.Time // after the first three ticks
	}{
		{queuey.FireLatest, append(every(clocktest.Epoch.Add(8*time.Hour), time.Hour, 1), every(clocktest.Epoch.Add(9*time.Hour), time.Hour, 2)...)},
		{queuey.FireAll, every(clocktest.Epoch.Add(4*time.Hour), time.Hour, 7)},
		{queuey.SkipMissed, every(clocktest.Epoch.Add(9*time.Hour), time.Hour, 2)},
	} {
		var r ticked
		clocktest.Run(t, app, nil, func(t *testing.T, h *clocktest.Harness) {
			s := hourly
			s.Missed = tt.missed
			must(t, queuey.Handle(h.Worker, r.handler(h.Clock)))
			must(t, h.Worker.AddSchedule(s))
			h.Advance(3*time.Hour + 30*time.Minute) // ticks 1, 2 and 3
			must(t, h.Stop())
			h.Advance(5 * time.Hour) // 08:30: ticks 4 to 8 missed
			later := secondWorkerWith(t, h, &r, s)
			h.Advance(2 * time.Hour) // ticks 9 and 10
			later.stop(t)
		})
		want := append(every(clocktest.Epoch.Add(time.Hour), time.Hour, 3), tt.want...)
		if diff := cmp.Diff(want, r.times()); diff != "" {
			t.Errorf("policy %v: ticks (-want +got):\n%s", tt.missed, diff)
		}
	}
}

// secondWorkerWith starts another worker of app on h's backend and clock,
// with schedule s and r's handler.
func secondWorkerWith(t *testing.T, h *clocktest.Harness, r *ticked, s queuey.Schedule) running {
	t.Helper()
	w, err := queuey.NewWorker(h.Backend, app, &queuey.WorkerConfig{Clock: h.Clock, Concurrency: 1, Logger: slog.New(slog.DiscardHandler)})
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
