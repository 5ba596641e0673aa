package console_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/console"
	"github.com/queuey-go/queuey/fleet"
)

// The Schedules page names the worker that leads each schedule, with the
// last tick and the next that the leader reports (a worker that does not
// lead knows only the timetable's next tick). In a synctest bubble, so
// that the console has heard every heartbeat before the page is asked for.
func TestTheSchedulesPageShowsWhichWorkerLeadsAndItsLastTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		epoch := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
		mock := clock.NewMock()
		mock.Set(epoch)
		b := memory.New(&memory.Options{Clock: mock})
		defer b.Close()
		c, err := console.New(t.Context(), b, set, &console.Options{Clock: mock})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		defer func() { cancel(); <-done }()
		synctest.Wait() // the console listens

		sched := func(leads bool, last, next time.Time) []fleet.ScheduleReport {
			return []fleet.ScheduleReport{{Name: "hourly", Spec: "every 1h0m0s", Location: "UTC", Missed: "FireLatest", Leads: leads, LastTick: last, NextTick: next}}
		}
		for _, hb := range []fleet.Heartbeat{
			{ID: "b", Host: "worker-b", IntervalMs: 5000, Sent: epoch, Schedules: sched(true, epoch.Add(-59*time.Minute), epoch.Add(time.Minute))},
			{ID: "a", Host: "worker-a", IntervalMs: 5000, Sent: epoch, Schedules: sched(false, time.Time{}, epoch.Add(time.Hour))},
		} {
			body, _ := json.Marshal(hb)
			if err := b.Broadcast(ctx, fleet.HeartbeatTopic(set.Prefix), body); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait() // the console heard them

		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, httptest.NewRequest("GET", "/schedules", nil))
		if rec.Code != 200 {
			t.Fatalf("GET /schedules: %d\n%s", rec.Code, rec.Body)
		}
		row := regexp.MustCompile(`(?s)<tr data-schedule="hourly">.*?</tr>`).FindString(rec.Body.String())
		for _, want := range []string{"worker-b", "2026-01-01 11:01:00", "2026-01-01 12:01:00", "every 1h0m0s", "FireLatest"} {
			if !strings.Contains(row, want) {
				t.Errorf("the hourly row %q does not have %q", row, want)
			}
		}
		if strings.Contains(row, "worker-a") || strings.Contains(row, "none heard") {
			t.Errorf("the hourly row %q names another leader than worker-b", row)
		}
	})
}
