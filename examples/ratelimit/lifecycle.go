package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/queuey-go/queuey/trace"
)

// pickDeferred chooses the job whose lifecycle to show: one that was
// deferred and then went through, with the fewest deferrals (the shortest
// story), the lowest job number among those. ok is false when no job was
// deferred.
func pickDeferred(runs []runRecord) (job int, id string, ok bool) {
	type story struct {
		id         string
		deferrals  int
		succeeded  bool
		wasDelayed bool
	}
	stories := map[int]*story{}
	for _, r := range runs {
		s := stories[r.Job]
		if s == nil {
			s = &story{id: r.ID}
			stories[r.Job] = s
		}
		s.deferrals = max(s.deferrals, r.Deferrals)
		s.wasDelayed = s.wasDelayed || r.Status == 429
		s.succeeded = s.succeeded || r.Status == 200
	}
	best := 0
	for n, s := range stories {
		if !s.wasDelayed || !s.succeeded {
			continue
		}
		if b := stories[best]; best == 0 || s.deferrals < b.deferrals || (s.deferrals == b.deferrals && n < best) {
			best = n
		}
	}
	if best == 0 {
		return 0, "", false
	}
	return best, stories[best].id, true
}

// printLifecycle prints every span of one job (found by its message id, not
// by trace) as a tree per trace: the chain send → process → send → process
// that a deferral makes, with each process span's events.
func printLifecycle(out io.Writer, spans []sdktrace.ReadOnlySpan, job int, jobID string) {
	var mine []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if attr(s, semconv.MessagingMessageIDKey) == jobID {
			mine = append(mine, s)
		}
	}
	slices.SortFunc(mine, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	traces := map[string][]sdktrace.ReadOnlySpan{}
	var order []string
	for _, s := range mine {
		id := s.SpanContext().TraceID().String()
		if _, seen := traces[id]; !seen {
			order = append(order, id)
		}
		traces[id] = append(traces[id], s)
	}
	fmt.Fprintf(out, "lifecycle of job %d (id %s): %d spans in %d trace(s), from the span recorder\n", job, jobID, len(mine), len(order))
	if len(mine) == 0 {
		return
	}
	t0 := mine[0].StartTime()
	for _, id := range order {
		fmt.Fprintf(out, "  trace %s\n", id)
		in := traces[id]
		children := map[oteltrace.SpanID][]sdktrace.ReadOnlySpan{}
		var roots []sdktrace.ReadOnlySpan
		for _, s := range in {
			p := s.Parent().SpanID()
			if s.Parent().IsValid() && slices.ContainsFunc(in, func(o sdktrace.ReadOnlySpan) bool { return o.SpanContext().SpanID() == p }) {
				children[p] = append(children[p], s)
			} else {
				roots = append(roots, s)
			}
		}
		// Each span under its parent, one level deeper, then printed with
		// the names padded to the widest.
		var rows []row
		var walk func(s sdktrace.ReadOnlySpan, depth int)
		walk = func(s sdktrace.ReadOnlySpan, depth int) {
			rows = append(rows, newRow(s, depth))
			for _, c := range children[s.SpanContext().SpanID()] {
				walk(c, depth+1)
			}
		}
		for _, r := range roots {
			walk(r, 0)
		}
		width := 0
		for _, r := range rows {
			width = max(width, utf8.RuneCountInString(r.name))
		}
		for _, r := range rows {
			r.print(out, width, t0)
		}
	}
}

// row is one span of the tree.
type row struct {
	s      sdktrace.ReadOnlySpan
	name   string // indented, with its branch
	indent string // for its events
}

func newRow(s sdktrace.ReadOnlySpan, depth int) row {
	if depth == 0 {
		return row{s: s, name: "    " + s.Name(), indent: "    "}
	}
	indent := "    " + strings.Repeat("   ", depth-1)
	return row{s: s, name: indent + "└─ " + s.Name(), indent: indent + "   "}
}

// print prints the span's line, its name padded to width, then its events.
func (r row) print(out io.Writer, width int, t0 time.Time) {
	s := r.s
	what := attr(s, trace.AttrPublishOp) // send spans
	if what == "" {
		what = attr(s, trace.AttrOutcome) // process spans
	}
	details := fmt.Sprintf("attempt %s, deferrals %s, priority %s",
		attr(s, trace.AttrJobAttempt), attr(s, trace.AttrJobDeferrals), attr(s, trace.AttrJobPriority))
	if d := attr(s, trace.AttrDelayMs); d != "" {
		details += ", delay " + d + " ms"
	}
	pad := strings.Repeat(" ", width-utf8.RuneCountInString(r.name))
	fmt.Fprintf(out, "%s%s  %8s  %-10s %s\n", r.name, pad, fmt.Sprintf("+%.3fs", s.StartTime().Sub(t0).Seconds()), what, details)
	for _, e := range s.Events() {
		var kv []string
		for _, a := range e.Attributes {
			v := a.Value.String()
			if a.Value.Type() == attribute.STRING {
				v = strconv.Quote(v)
			}
			kv = append(kv, strings.TrimPrefix(string(a.Key), "queuey.")+"="+v)
		}
		fmt.Fprintf(out, "%s  event %s: %s\n", r.indent, e.Name, strings.Join(kv, " "))
	}
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}
