package fleet

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/clocktest"
)

// report is the job of the schedule of the heartbeat test.
type report struct{}

func (report) Kind() string        { return "report" }
func (report) Queue() queuey.Queue { return queuey.Queue{Name: "reports"} }

// The heartbeat says which schedules the worker leads, with the last tick
// it fired and the one it waits for, as Worker.Schedules tells them, in
// virtual time.
func TestAHeartbeatSaysWhichSchedulesTheWorkerLeadsAndTheirTicks(t *testing.T) {
	defer goleak.VerifyNone(t)
	set := queuey.QueueSet{Prefix: "hb", Queues: []queuey.Queue{{Name: "reports"}}}
	hourly := queuey.Schedule{Name: "hourly", Job: report{}, Every: time.Hour}
	clocktest.Run(t, set, nil, func(t *testing.T, h *clocktest.Harness) {
		if err := queuey.Handle(h.Worker, func(context.Context, report, queuey.JobContext) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := h.Worker.AddSchedule(hourly); err != nil {
			t.Fatal(err)
		}
		// A schedule the agent was not told of is reported too, without
		// its timetable.
		daily := queuey.Schedule{Name: "daily", Job: report{}, Cron: "0 6 * * *"}
		if err := h.Worker.AddSchedule(daily); err != nil {
			t.Fatal(err)
		}
		agent, err := NewAgent(h.Backend, set, &Options{Clock: h.Clock, Interval: time.Minute, Schedules: []queuey.Schedule{hourly}})
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.Backend.Listen(t.Context(), HeartbeatTopic(set.Prefix))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- agent.Run(ctx, h.Worker) }()
		defer func() { cancel(); <-done }()

		h.Advance(90 * time.Minute) // the 01:00 tick fired; the 01:30 heartbeat is the last
		want := []ScheduleReport{
			{Name: "hourly", Spec: "every 1h0m0s", Location: "UTC", Missed: "FireLatest", Leads: true,
				LastTick: clocktest.Epoch.Add(time.Hour), NextTick: clocktest.Epoch.Add(2 * time.Hour)},
			{Name: "daily", Leads: true, NextTick: clocktest.Epoch.Add(6 * time.Hour)},
		}
		if diff := cmp.Diff(want, lastHeartbeat(t, l.Messages()).Schedules); diff != "" {
			t.Errorf("the heartbeat's schedules (-want +got):\n%s", diff)
		}
	})
}

// lastHeartbeat is the last heartbeat of those heard so far.
func lastHeartbeat(t *testing.T, msgs <-chan []byte) Heartbeat {
	t.Helper()
	var last []byte
	for {
		select {
		case m := <-msgs:
			last = m
			continue
		default:
		}
		break
	}
	var hb Heartbeat
	if err := json.Unmarshal(last, &hb); err != nil {
		t.Fatalf("the last heartbeat %q: %v", last, err)
	}
	return hb
}

// A worker that does not lead a schedule reports it with the timetable's
// next tick, and no last tick of its own when it knows none.
func TestAScheduleTheWorkerDoesNotLeadHasTheTimetablesNextTick(t *testing.T) {
	now := clocktest.Epoch.Add(90 * time.Minute)
	hourly := queuey.Schedule{Name: "hourly", Job: report{}, Every: time.Hour, Missed: queuey.SkipMissed}
	got := scheduleReports([]queuey.Schedule{hourly}, []queuey.ScheduleStatus{{Name: "hourly"}}, now)
	want := []ScheduleReport{{Name: "hourly", Spec: "every 1h0m0s", Location: "UTC", Missed: "SkipMissed", NextTick: clocktest.Epoch.Add(2 * time.Hour)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scheduleReports (-want +got):\n%s", diff)
	}
}
