package queuey

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// A cron time that a daylight-saving change repeats fires once, in zones
// that set their clocks back by an hour or by half of one, north and
// south; one that it skips does not fire.
func TestScheduleCronTicksAcrossTheClocksGoingBack(t *testing.T) {
	for _, c := range []struct {
		zone, spec string
		from       time.Time // UTC, the day before
		want       int       // ticks in 3 days
	}{
		{"Europe/Amsterdam", "30 2 * * *", time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC), 3},
		{"America/Sao_Paulo", "30 23 * * *", time.Date(2018, 2, 16, 12, 0, 0, 0, time.UTC), 3},
		{"Australia/Lord_Howe", "45 1 * * *", time.Date(2026, 4, 4, 0, 0, 0, 0, time.UTC), 3},
		{"Europe/Amsterdam", "30 2 * * *", time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC), 2},
		// 72 real hours of three ticks, but the one at from: a schedule of
		// every hour fires through the repeated hour, as cron does.
		{"Europe/Amsterdam", "*/20 * * * *", time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC), 72*3 - 1},
	} {
		loc, err := time.LoadLocation(c.zone)
		if err != nil {
			t.Skip("no time zone database:", err)
		}
		s, err := cron.ParseStandard(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		table, seen, n := cronTable{s: s, loc: loc, everyHour: everyHour(s)}, map[string]bool{}, 0
		for tick := table.next(c.from); tick.Before(c.from.Add(72 * time.Hour)); tick = table.next(tick) {
			wall := tick.In(loc).Format(time.DateTime)
			if seen[wall] && !table.everyHour {
				t.Errorf("%s %q: %s fired twice", c.zone, c.spec, wall)
			}
			seen[wall] = true
			n++
		}
		if n != c.want {
			t.Errorf("%s %q: %d ticks in 3 days from %v, want %d", c.zone, c.spec, n, c.from, c.want)
		}
	}
}
