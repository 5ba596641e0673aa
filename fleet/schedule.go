package fleet

import (
	"os"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/queuey-go/queuey"
)

func pid() int { return os.Getpid() }

// scheduleReport is what a worker can say of a schedule it was given:
// its timetable and its next tick after now. Which worker leads it, and
// its last tick, the worker does not tell yet (left empty).
func scheduleReport(s queuey.Schedule, now time.Time) ScheduleReport {
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
