package main

import (
	"fmt"
	"io"
	"strings"
)

// summaryRow is one line of the README's summary: a headline figure.
type summaryRow struct {
	what, link                    string // what it is, and the BENCHMARKS.md section it comes from
	queuey, baseline, ratio, goal string
}

// summaryRows are rep's headline figures: the rows the scenarios mark as
// headlines, queuey against each peer, and the Go benchmarks' goals.
func summaryRows(rep runReport) []summaryRow {
	var out []summaryRow
	for _, r := range rep.rows {
		if !r.headline {
			continue
		}
		out = append(out, summaryRow{
			what: r.scenario + ": " + r.metric, link: anchor(scenarioTitle(r.num)),
			queuey: r.lib, baseline: dash(r.base), ratio: dash(r.ratio), goal: goalCell(r.goal, r.result),
		})
	}
	if rep.peers != nil {
		out = append(out, peerSummaryRows(rep.peers)...)
	}
	if rep.gobench != nil {
		out = append(out, benchSummaryRows(rep.gobench)...)
	}
	return out
}

// goalCell is "≥ 0.95 PASS", or "-" without a goal.
func goalCell(goal, result string) string {
	if goal == "" {
		return "-"
	}
	return strings.TrimSpace(goal + " " + resultCell(result))
}

// peerSummaryRows is queuey against the other systems that ran, in one
// row: queuey's median jobs/s, then each peer's with queuey's ratio to it
// (queuey's median over the peer's), and the goals against the peers that
// have one.
func peerSummaryRows(p *peersReport) []summaryRow {
	q, ok := p.queuey()
	if !ok {
		return nil
	}
	var peers, ratios, goals []string
	for _, s := range p.Systems {
		if s.Name == "queuey" || s.Error != "" || len(s.Rates) == 0 {
			continue
		}
		ratio := q.Rates.median() / s.Rates.median()
		peers = append(peers, fmt.Sprintf("%s %s: %s", s.Name, s.Version, rate(s.Rates.median())))
		ratios = append(ratios, fmt.Sprintf("%s vs %s", ratioStr(ratio), s.Name))
		if g, ok := peerGoals[s.Name]; ok {
			goals = append(goals, fmt.Sprintf("≥ %g vs %s %s", g, s.Name, resultCell(passIf(ratio >= g))))
		}
	}
	if len(peers) == 0 {
		return nil
	}
	return []summaryRow{{
		what: "peers, same load: jobs/s", link: anchor(peersHeading),
		queuey: rate(q.Rates.median()), baseline: strings.Join(peers, "; "),
		ratio: strings.Join(ratios, "; "), goal: dash(strings.Join(goals, "; ")),
	}}
}

// benchSummaryRows are the Go benchmarks' goals whose benchmark ran.
func benchSummaryRows(f *benchFile) []summaryRow {
	var out []summaryRow
	for _, g := range benchGoals {
		v := benchValues(f.results, g.name, g.unit)
		if len(v) == 0 {
			continue
		}
		out = append(out, summaryRow{
			what: g.what, link: anchor(goBenchHeading),
			queuey:   benchSide(benchValues(f.results, g.name, g.libUnit), g.libUnit),
			baseline: benchSide(benchValues(f.results, g.name, g.baseUnit), g.baseUnit),
			ratio:    ratioStr(v.median()), goal: g.goalString() + " " + resultCell(g.result(v.median())),
		})
	}
	return out
}

// benchSide is a side's median in its unit: jobs/s as a rate.
func benchSide(s series, unit string) string {
	if len(s) == 0 {
		return "-"
	}
	if strings.HasSuffix(unit, "jobs/s") {
		return rate(s.median())
	}
	return benchNumber(s.median())
}

// writeSummary is the README's block: the table of summaryRows, each
// linked to its section of the document at docPath (a link from the
// README), and where it comes from.
func writeSummary(w io.Writer, rep runReport, docPath string) {
	fmt.Fprintln(w, "<!-- Written by `go run ./bench -readme`; do not edit by hand. -->")
	fmt.Fprintln(w)
	var cells [][]string
	for _, s := range summaryRows(rep) {
		cells = append(cells, []string{fmt.Sprintf("[%s](%s#%s)", s.what, docPath, s.link), s.queuey, s.baseline, s.ratio, s.goal})
	}
	writeTable(w, []string{"", "queuey", "baseline, same run", "ratio", "goal"}, cells)
	fmt.Fprintln(w)
	writeWrapped(w, fmt.Sprintf("Run of %s on %s (%d cores), medians of %s; every figure and its spread: [%s](%s).",
		rep.date.Format(dateFormat), rep.host.cpu, rep.host.cores, runs(rep.cfg.count), docPath, docPath))
}
