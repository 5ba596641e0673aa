package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Attempt is one job a producer tried to enqueue. Seq identifies it: a
// job whose Enqueue failed has no id, and may run all the same.
type Attempt struct {
	ID  string
	Seq int
	// Confirmed: Enqueue (or EnqueueAfter) returned nil.
	Confirmed bool
	// Err is Enqueue's error when it failed.
	Err string
	// NotBefore is the earliest the job may start (zero: no bound).
	NotBefore time.Time
	// Delayed: the job was held (EnqueueAfter), so its lateness counts.
	Delayed bool
	// ExpectDead: the job is meant to end in the dead letters (a poison
	// job), and counts as ok once it is there.
	ExpectDead bool
}

// Window is a span of time in which a fault was being injected: a run that
// was in flight in it (widened by Input.Slack) may run again.
type Window struct {
	Name     string
	From, To time.Time
}

// Input is what a run is scored on.
type Input struct {
	Attempts []Attempt
	Records  []Record
	Faults   []Window
	// Dead holds the job ids found in the dead-letter queue, with reasons.
	Dead map[string]string
	// Slack widens every fault window on both sides: an ack sent just
	// before a fault may not have reached the broker. Default 500 ms.
	Slack time.Duration
	// Backoff is the retry backoff (a second attempt may not start earlier
	// than this after the first one failed). Default RetryBackoff.
	Backoff time.Duration
}

// Score is the figures of one fault run. The pass rule is
// lost = unexplained duplicates = early = leaks = unexpected = 0, plus
// whatever the test itself checked (Failures).
type Score struct {
	Fault          string
	Attempted      int
	Confirmed      int
	OK             int
	Lost           int
	Recovered      int // Enqueue failed, the job ran anyway
	Unexpected     int // ran, but nobody enqueued it
	DupExplained   int
	DupUnexplained int
	Early          int
	Leaks          int
	Runs           int
	// PerFault counts the explained duplicates by the fault window that
	// explains them, in window order.
	PerFault []int
	// MaxLateness is the latest start after NotBefore of a first run.
	MaxLateness time.Duration
	// Failures are the test's own failed checks, and Examples a few ids
	// behind the figures, for a person to look at.
	Failures []string
	Examples []string
	// Figures are extra measurements, "name=value".
	Figures []string
}

// Pass applies the pass rule.
func (s *Score) Pass() bool {
	return s.Lost == 0 && s.DupUnexplained == 0 && s.Early == 0 && s.Leaks == 0 && s.Unexpected == 0 && len(s.Failures) == 0
}

// Line is the one-line summary, in the suite's fixed format.
func (s *Score) Line() string {
	return fmt.Sprintf("fault=%s attempted=%d confirmed=%d ok=%d lost=%d dup_explained=%d dup_unexplained=%d early=%d leaks=%d pass=%t",
		s.Fault, s.Attempted, s.Confirmed, s.OK, s.Lost, s.DupExplained, s.DupUnexplained, s.Early, s.Leaks, s.Pass())
}

// FigureLine is the extra figures of the run, on a line of their own.
func (s *Score) FigureLine() string {
	f := append([]string{fmt.Sprintf("runs=%d", s.Runs), fmt.Sprintf("recovered=%d", s.Recovered), fmt.Sprintf("unexpected=%d", s.Unexpected)}, s.Figures...)
	if len(s.PerFault) > 0 {
		parts := make([]string, len(s.PerFault))
		for i, n := range s.PerFault {
			parts[i] = fmt.Sprint(n)
		}
		f = append(f, "dup_per_fault="+strings.Join(parts, ","))
	}
	if s.MaxLateness > 0 {
		f = append(f, fmt.Sprintf("max_lateness=%.2fs", s.MaxLateness.Seconds()))
	}
	return "figures " + s.Fault + ": " + strings.Join(f, " ")
}

// Figure adds a measurement.
func (s *Score) Figure(name string, value any) {
	if d, ok := value.(time.Duration); ok {
		value = fmt.Sprintf("%.2fs", d.Seconds())
	}
	s.Figures = append(s.Figures, fmt.Sprintf("%s=%v", name, value))
}

// Fail records a failed check of the test's own.
func (s *Score) Fail(format string, args ...any) {
	s.Failures = append(s.Failures, fmt.Sprintf(format, args...))
}

// run is one handler run, from its start record to when it was settled.
type run struct {
	seq     int
	id      string
	attempt int
	pid     int
	start   time.Time
	done    time.Time // zero: the handler never returned (its process died)
	doneErr string
	settled time.Time // zero: never settled
	result  string
}

// end is the last moment the run could still have been unacknowledged.
func (r run) end() time.Time {
	if !r.settled.IsZero() {
		return r.settled // acked, or given back (then a fault was under way)
	}
	return time.Unix(0, math.MaxInt64) // the process died holding it
}

// Compute scores a run.
func Compute(fault string, in Input) *Score {
	if in.Slack == 0 {
		in.Slack = 500 * time.Millisecond
	}
	if in.Backoff == 0 {
		in.Backoff = RetryBackoff
	}
	s := &Score{Fault: fault, PerFault: make([]int, len(in.Faults))}
	attempts := map[int]Attempt{}
	for _, a := range in.Attempts {
		attempts[a.Seq] = a
		s.Attempted++
		if a.Confirmed {
			s.Confirmed++
		}
	}
	runs := pairRuns(in.Records)
	s.Runs = len(runs)

	ok := map[int]bool{}
	failedDone := map[int]map[int]time.Time{} // seq → attempt → earliest failed return
	byKey := map[string][]run{}               // seq/attempt → runs in start order
	unexpected := map[string]bool{}
	for _, r := range runs {
		if _, known := attempts[r.seq]; !known {
			if !unexpected[r.id] {
				unexpected[r.id] = true
				s.Unexpected++
				s.example(fmt.Sprintf("unexpected:%d/%s", r.seq, r.id))
			}
			continue
		}
		if !r.done.IsZero() && r.doneErr == "" {
			ok[r.seq] = true
		}
		if !r.done.IsZero() && r.doneErr != "" {
			m := failedDone[r.seq]
			if m == nil {
				m = map[int]time.Time{}
				failedDone[r.seq] = m
			}
			if t, seen := m[r.attempt]; !seen || r.done.Before(t) {
				m[r.attempt] = r.done
			}
		}
		k := fmt.Sprintf("%06d/%d", r.seq, r.attempt)
		byKey[k] = append(byKey[k], r)
	}
	for _, a := range in.Attempts {
		if a.ExpectDead && a.ID != "" && in.Dead[a.ID] != "" {
			ok[a.Seq] = true
		}
	}

	for _, a := range in.Attempts {
		switch {
		case ok[a.Seq]:
			s.OK++
			if !a.Confirmed {
				s.Recovered++
			}
		case a.Confirmed:
			s.Lost++
			s.example(fmt.Sprintf("lost:%d/%s", a.Seq, a.ID))
		}
	}

	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)           // by seq, then attempt: a job's attempts in order
	inherited := map[int][]int{} // seq → windows that explained the extra failed runs of the attempt before
	for _, k := range keys {
		rs := byKey[k]
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		// Each failed run of attempt n-1 published its own retry, so when
		// a fault made attempt n-1 run twice, attempt n may run twice as
		// well: those reruns inherit the fault that explained the first.
		carried := inherited[rs[0].seq]
		var failedWindows []int
		if !rs[0].done.IsZero() && rs[0].doneErr != "" {
			failedWindows = append(failedWindows, -1) // the first run's own retry
		}
		for i := 1; i < len(rs); i++ {
			prev := rs[i-1]
			w := in.explain(prev)
			if w < 0 && len(carried) > 0 {
				w, carried = carried[0], carried[1:]
			}
			if w < 0 {
				s.DupUnexplained++
				s.example(fmt.Sprintf("dup:%s(prev %s..%s %s)", k, prev.start.Format("15:04:05.000"), fmtTime(prev.settled), prev.result))
				continue
			}
			s.DupExplained++
			s.PerFault[w]++
			if !rs[i].done.IsZero() && rs[i].doneErr != "" {
				failedWindows = append(failedWindows, w)
			}
		}
		if len(failedWindows) > 1 {
			inherited[rs[0].seq] = failedWindows[1:]
		} else {
			delete(inherited, rs[0].seq)
		}
		// early: the first run of attempt 1 against NotBefore, later
		// attempts against the failure that scheduled them.
		first := rs[0]
		a := attempts[first.seq]
		if first.attempt <= 1 && !a.NotBefore.IsZero() {
			if first.start.Before(a.NotBefore) {
				s.Early++
				s.example(fmt.Sprintf("early:%d by %v", first.seq, a.NotBefore.Sub(first.start)))
			} else if late := first.start.Sub(a.NotBefore); a.Delayed && late > s.MaxLateness {
				s.MaxLateness = late
			}
		}
		if first.attempt > 1 {
			if failed, ok := failedDone[first.seq][first.attempt-1]; ok && first.start.Before(failed.Add(in.Backoff)) {
				s.Early++
				s.example(fmt.Sprintf("early-retry:%d by %v", first.seq, failed.Add(in.Backoff).Sub(first.start)))
			}
		}
	}
	return s
}

// explain returns the index of the first fault window the run r overlaps,
// or -1.
func (in Input) explain(r run) int {
	for i, w := range in.Faults {
		from, to := w.From.Add(-in.Slack), w.To.Add(in.Slack)
		if r.start.Before(to) && r.end().After(from) {
			return i
		}
	}
	return -1
}

func (s *Score) example(e string) {
	if len(s.Examples) < 12 {
		s.Examples = append(s.Examples, e)
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format("15:04:05.000")
}

// pairRuns turns a ledger into runs: a start record, the done record of the
// same process, job and attempt that follows it, and the settled record
// after that.
func pairRuns(records []Record) []run {
	type key struct {
		pid     int
		id      string
		attempt int
	}
	sorted := slices.Clone(records)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].At < sorted[j].At })
	open := map[key][]int{} // runs started and not yet done, oldest first
	waiting := map[key][]int{}
	var runs []run
	for _, rec := range sorted {
		k := key{rec.PID, rec.ID, rec.Attempt}
		switch rec.Ev {
		case EvStart:
			runs = append(runs, run{seq: rec.Seq, id: rec.ID, attempt: rec.Attempt, pid: rec.PID, start: rec.Time()})
			open[k] = append(open[k], len(runs)-1)
		case EvDone:
			if q := open[k]; len(q) > 0 {
				runs[q[0]].done, runs[q[0]].doneErr = rec.Time(), rec.Err
				open[k] = q[1:]
				waiting[k] = append(waiting[k], q[0])
			}
		case EvSettled:
			if !rec.Ran {
				continue // counted and republished, or dead-lettered unrun
			}
			if q := waiting[k]; len(q) > 0 {
				runs[q[0]].settled, runs[q[0]].result = rec.Time(), rec.Result
				waiting[k] = q[1:]
			}
		}
	}
	return runs
}
