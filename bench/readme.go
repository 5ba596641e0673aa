package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The README's summary lives between these two lines; -readme rewrites
// what is between them and nothing else.
const (
	summaryBegin = "<!-- bench:summary:begin -->"
	summaryEnd   = "<!-- bench:summary:end -->"
)

// summaryBounds finds the summary block in text: the offsets just after
// the begin marker's line and at the start of the end marker. Each marker
// must be there exactly once, begin before end.
func summaryBounds(text []byte) (start, end int, err error) {
	for _, m := range []string{summaryBegin, summaryEnd} {
		switch n := bytes.Count(text, []byte(m)); {
		case n == 0:
			return 0, 0, fmt.Errorf("marker %s missing", m)
		case n > 1:
			return 0, 0, fmt.Errorf("marker %s appears %d times", m, n)
		}
	}
	b := bytes.Index(text, []byte(summaryBegin))
	e := bytes.Index(text, []byte(summaryEnd))
	if e < b {
		return 0, 0, fmt.Errorf("marker %s comes before %s", summaryEnd, summaryBegin)
	}
	start = b + len(summaryBegin)
	if nl := bytes.IndexByte(text[start:e], '\n'); nl >= 0 {
		start += nl + 1
	} else {
		return 0, 0, fmt.Errorf("markers %s and %s must be on lines of their own", summaryBegin, summaryEnd)
	}
	return start, e, nil
}

// replaceSummary is text with the block between the markers replaced by
// block (which should end in a newline); every other byte stays.
func replaceSummary(text []byte, block string) ([]byte, error) {
	start, end, err := summaryBounds(text)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(text)+len(block))
	out = append(out, text[:start]...)
	out = append(out, block...)
	return append(out, text[end:]...), nil
}

// checkReadme fails if the file at path cannot hold a summary.
func checkReadme(path string) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if _, _, err := summaryBounds(text); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeReadme rewrites the summary block of the README at path from rep,
// its links pointing at docLink.
func writeReadme(path, docLink string, rep runReport) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var b strings.Builder
	writeSummary(&b, rep, docLink)
	out, err := replaceSummary(text, b.String())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return replaceFile(path, out)
}

// linkFrom is docPath as a link from the file at from: relative to its
// directory, with forward slashes.
func linkFrom(from, docPath string) string {
	absFrom, err1 := filepath.Abs(filepath.Dir(from))
	absDoc, err2 := filepath.Abs(docPath)
	if err1 != nil || err2 != nil {
		return filepath.ToSlash(docPath)
	}
	rel, err := filepath.Rel(absFrom, absDoc)
	if err != nil {
		return filepath.ToSlash(docPath)
	}
	return filepath.ToSlash(rel)
}
