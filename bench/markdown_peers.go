package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// peersHeading is the heading of the peers' section.
const peersHeading = "Peers"

// peerGoals are the goals against a peer: queuey's jobs/s at least this
// many times the peer's.
var peerGoals = map[string]float64{"machinery v2": 1.1}

// writePeers is the peers' section: the command, the load, the versions
// and a row per system.
func writePeers(w io.Writer, p *peersReport) {
	fmt.Fprintf(w, "## %s\n\n", peersHeading)
	writeWrapped(w, fmt.Sprintf("`%s` (bench/peers, a module of its own), %s, %s, GOMAXPROCS %d. "+
		"Every system gets the same load: %d jobs of a ~256-byte payload, enqueued by %d concurrent callers "+
		"(each enqueue returns once the server has the job), while a worker with %d handlers and a trivial "+
		"handler runs them; jobs/s is first enqueue to last handled, the median of %s; \"vs queuey\" is "+
		"the ratio of the medians. river-insertmany is river's bulk insert from one caller, not the others' load.",
		p.Command, p.Date.Format(dateFormat), p.Go, p.GOMAXPROCS, p.N, p.Publishers, p.Concurrency, runs(p.Count)))
	fmt.Fprintln(w)
	if len(p.Servers) > 0 {
		fmt.Fprintf(w, "Servers: %s.\n\n", serverList(p.Servers))
	}
	q, _ := p.queuey()
	header := []string{"system", "built with", "jobs/s", "runs", "spread", "vs queuey", "server CPU µs/job", "Go CPU µs/job", "transport"}
	var cells [][]string
	for _, s := range p.Systems {
		cells = append(cells, peerCells(s, q))
	}
	writeTable(w, header, cells)
	fmt.Fprintln(w)
}

// serverList is "PostgreSQL 15.1, RabbitMQ 3.10.8, Redis 7.0.15".
func serverList(servers map[string]string) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		parts = append(parts, name+" "+servers[name])
	}
	return strings.Join(parts, ", ")
}

// peerCells is a system's row of the peers' table.
func peerCells(s, queuey peerSystem) []string {
	built := "`" + s.Module + "` " + s.Version
	if s.Error != "" || len(s.Rates) == 0 {
		return []string{s.Name, built, "failed: " + s.Error, "-", "-", "-", "-", "-", s.Note}
	}
	vs := "-"
	if len(queuey.Rates) > 0 {
		vs = ratioStr(s.Rates.median() / queuey.Rates.median())
	}
	return []string{s.Name, built, fmt.Sprintf("%.0f", s.Rates.median()), runList(s.Rates, "%.0f"), dash(s.Rates.spread()), vs,
		fmt.Sprintf("%.0f (%s)", s.ServerUs.median(), s.Server), fmt.Sprintf("%.0f", s.SelfUs.median()), s.Note}
}

// runList is every run's figure, in order.
func runList(s series, format string) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(parts, " ")
}
