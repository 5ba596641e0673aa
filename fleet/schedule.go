package fleet

import (
	"os"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/queuey-go/queuey"
)

func pid() int { return os.Getpid() }

// scheduleReports are what a worker says of its schedules: of each one
// given (Options.Schedules) its timetable, and of each the worker runs
// (statuses, from Worker.Schedules) whether it leads it, its last tick as
// far as it knows and, when it leads, the tick it waits for. A schedule
// the worker does not lead has the timetable's next tick after now.
func scheduleReports(given []queuey.Schedule, statuses []queuey.ScheduleStatus, now time.Time) []ScheduleReport {
	var out []ScheduleReport
	index := map[string]int{}
	for _, s := range given {
		index[s.Name] = len(out)
		out = append(out, timetable(s, now))
	}
	for _, st := range statuses {
		i, ok := index[st.Name]
		if !ok {
			i = len(out)
			out = append(out, ScheduleReport{Name: st.Name})
		}
		r := &out[i]
		r.Leads, r.LastTick = st.Leading, st.LastTick
		if st.Leading && !st.NextTick.IsZero() {
			r.NextTick = st.NextTick
		}
	}
	return out
}

// timetable is what a schedule's definition says: its spec, location,
// missed-tick policy and next tick after now.
func timetable(s queuey.Schedule, now time.Time) ScheduleReport {
	loc := s.Location
	if loc == nil {
		loc = time.UTC
	}
	r := ScheduleReport{Name: s.Name, Location: loc.String(), Missed: s.Missed.String()}
	switch {
	case s.Every > 0:
		r.Spec = "every " + s.Every.String()
		r.NextTick = now.Truncate(s.Every).Add(s.Every)
	default:
		r.Spec = s.Cron
		if c, err := cron.ParseStandard(s.Cron); err == nil {
			r.NextTick = c.Next(now.In(loc))
		}
	}
	return r
}
