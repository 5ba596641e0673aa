package chaos_test

import (
	"testing"
	"time"

	"github.com/queuey-go/queuey/chaos"
)

// The scorer on a made-up ledger: no broker needed, so it runs everywhere.
func TestScoreCountsEveryCategory(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) int64 { return t0.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	run := func(pid, seq, attempt, start, done int, err string, settled int) []chaos.Record {
		rs := []chaos.Record{{Ev: chaos.EvStart, ID: "id", Seq: seq, Attempt: attempt, At: at(start), PID: pid}}
		if done >= 0 {
			rs = append(rs, chaos.Record{Ev: chaos.EvDone, ID: "id", Seq: seq, Attempt: attempt, At: at(done), PID: pid, Err: err})
		}
		if settled >= 0 {
			rs = append(rs, chaos.Record{Ev: chaos.EvSettled, ID: "id", Attempt: attempt, At: at(settled), PID: pid, Ran: true, Result: "succeeded"})
		}
		return rs
	}
	var recs []chaos.Record
	add := func(rs []chaos.Record) {
		for i := range rs {
			rs[i].ID = rs[i].ID + string(rune('a'+rs[i].Seq))
		}
		recs = append(recs, rs...)
	}
	add(run(1, 1, 1, 100, 200, "", 201))        // ok
	add(run(1, 2, 1, 900, -1, "", -1))          // killed in the fault window...
	add(run(2, 2, 1, 1500, 1600, "", 1601))     // ...and run again: explained
	add(run(2, 3, 1, 2000, 2100, "", 2101))     // ok...
	add(run(2, 3, 1, 3000, 3100, "", 3101))     // ...and again, far from any fault: unexplained
	add(run(2, 5, 1, 50, 60, "", 61))           // started before its due time: early
	add(run(1, 6, 1, 950, 960, "boom", -1))     // failed, published its retry, killed before the ack
	add(run(2, 6, 1, 1400, 1410, "boom", 1411)) // explained rerun, fails again: a second retry
	add(run(2, 6, 2, 1960, 1970, "", 1971))     // attempt 2...
	add(run(2, 6, 2, 2420, 2430, "", 2431))     // ...twice, inherited from attempt 1's rerun
	add(run(2, 7, 1, 4000, 4010, "", 4011))     // nobody enqueued it
	add(run(2, 8, 1, 4000, 4010, "", 4011))     // Enqueue failed, ran anyway: recovered
	add(run(2, 9, 1, 100, 110, "boom", 111))    // failed...
	add(run(2, 9, 2, 600, 610, "", 611))        // ...and retried before the 1 s backoff: early
	in := chaos.Input{
		Attempts: []chaos.Attempt{
			{Seq: 1, Confirmed: true}, {Seq: 2, Confirmed: true}, {Seq: 3, Confirmed: true},
			{Seq: 4, Confirmed: true}, // never ran: lost
			{Seq: 5, Confirmed: true, NotBefore: t0.Add(100 * time.Millisecond)},
			{Seq: 6, Confirmed: true}, {Seq: 8, Confirmed: false}, {Seq: 9, Confirmed: true},
		},
		Records: recs,
		Faults:  []chaos.Window{{Name: "kill", From: t0.Add(1000 * time.Millisecond), To: t0.Add(1100 * time.Millisecond)}},
	}
	s := chaos.Compute("synthetic", in)
	want := chaos.Score{Attempted: 8, Confirmed: 7, OK: 7, Lost: 1, Recovered: 1, Unexpected: 1, DupExplained: 3, DupUnexplained: 1, Early: 2}
	got := chaos.Score{Attempted: s.Attempted, Confirmed: s.Confirmed, OK: s.OK, Lost: s.Lost, Recovered: s.Recovered,
		Unexpected: s.Unexpected, DupExplained: s.DupExplained, DupUnexplained: s.DupUnexplained, Early: s.Early}
	if got.Line() != want.Line() || s.Pass() {
		t.Errorf("got  %s\nwant %s (examples %v)", got.Line(), want.Line(), s.Examples)
	}
	if len(s.PerFault) != 1 || s.PerFault[0] != 3 {
		t.Errorf("duplicates per fault: %v, want [3]", s.PerFault)
	}
}
