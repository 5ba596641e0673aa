package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// outputs are the documents a run writes beside its stdout table
// (-markdown, -readme) and the results handed in for them (-peers,
// -gobench).
type outputs struct {
	markdown, readme       string // files written
	peersPath, goBenchPath string // files read

	peers   *peersReport
	gobench *benchFile
}

// registerFlags adds the outputs' flags to fs.
func (o *outputs) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.markdown, "markdown", "", "write the whole of BENCHMARKS.md from this run to this file")
	fs.StringVar(&o.readme, "readme", "", "rewrite the summary between the "+summaryBegin+" and "+summaryEnd+" lines of this file (README.md)")
	fs.StringVar(&o.peersPath, "peers", "", "add the peers' results from this file (bench/peers -json FILE)")
	fs.StringVar(&o.goBenchPath, "gobench", "", "add the Go benchmarks' results from this file (go test -bench output; a \"command: ...\" line names the command)")
}

// wanted tells whether any document is to be written.
func (o *outputs) wanted() bool { return o.markdown != "" || o.readme != "" }

// load reads the files handed in and checks the README's markers, before
// anything runs, so that a bad file fails the command at once.
func (o *outputs) load() error {
	if !o.wanted() {
		if o.peersPath != "" || o.goBenchPath != "" {
			return errors.New("-peers and -gobench need -markdown or -readme")
		}
		return nil
	}
	var err error
	if o.peersPath != "" {
		if o.peers, err = readPeers(o.peersPath); err != nil {
			return fmt.Errorf("-peers: %w", err)
		}
	}
	if o.goBenchPath != "" {
		if o.gobench, err = readBenchFile(o.goBenchPath); err != nil {
			return fmt.Errorf("-gobench: %s: %w", o.goBenchPath, err)
		}
	}
	if o.readme != "" {
		if err := checkReadme(o.readme); err != nil {
			return fmt.Errorf("-readme: %w", err)
		}
	}
	return nil
}

// newReport is a report of this run, started at start, with what load
// read; the rows come later.
func (o *outputs) newReport(cfg config, start time.Time) runReport {
	return runReport{
		host:    readHost(cfg.amqpURL),
		command: commandLine(os.Args[1:]),
		date:    start.UTC(),
		cfg:     cfg,
		peers:   o.peers,
		gobench: o.gobench,
	}
}

// write writes the documents from rep.
func (o *outputs) write(rep runReport) error {
	if o.markdown != "" {
		if err := writeMarkdownFile(o.markdown, rep); err != nil {
			return fmt.Errorf("-markdown: %w", err)
		}
	}
	if o.readme != "" {
		doc := "BENCHMARKS.md"
		if o.markdown != "" {
			doc = linkFrom(o.readme, o.markdown)
		}
		if err := writeReadme(o.readme, doc, rep); err != nil {
			return fmt.Errorf("-readme: %w", err)
		}
	}
	return nil
}

// commandLine is this command as typed: go run ./bench and args, each
// quoted for a POSIX shell where it needs to be.
func commandLine(args []string) string {
	parts := []string{"go", "run", "./bench"}
	for _, a := range args {
		parts = append(parts, shellQuote(redactURLs(a)))
	}
	return strings.Join(parts, " ")
}

// redactURLs is a with the password of each URL in it (a comma-separated
// list, as -cluster takes) left out.
func redactURLs(a string) string {
	if !strings.Contains(a, "://") {
		return a
	}
	urls := strings.Split(a, ",")
	for i, u := range urls {
		urls[i] = redactURL(u)
	}
	return strings.Join(urls, ",")
}

// plainWord is an argument a shell takes as it is.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_./=:,+@%-]+$`)

// shellQuote is a in single quotes unless it is a plain word.
func shellQuote(a string) string {
	if plainWord.MatchString(a) {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}
