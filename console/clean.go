package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"clean":     clean,
	"cleanText": cleanText,
	"count":     count,
	"dur":       showDuration,
	"ago":       ago,
	"stamp":     stamp,
	"pauseArgs": func(v view, queue string) any {
		return struct{ Base, CSRF, Queue string }{v.Base, v.CSRF, queue}
	},
}

// clean is s from the wire made safe to show on one line: every control
// character (C0, DEL, C1), line and paragraph separator, bidirectional
// override and invalid byte is written as a visible escape (\x1b,
// \u202e), so that a job type or a reason can neither break a line nor
// reorder the text around it. html/template then escapes it for HTML.
func clean(s string) string { return escape(s, false) }

// cleanText is clean keeping newlines and tabs: for payloads and bodies,
// shown in a block.
func cleanText(s string) string { return escape(s, true) }

func escape(s string, keepLines bool) string {
	if isPlain(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x80 && (r < 0x20 || r == 0x7f):
			fmt.Fprintf(&b, `\x%02x`, r)
		case hidden(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		case r == '\\':
			b.WriteString(`\\`)
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}

// isPlain reports a string with nothing to escape.
func isPlain(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\\' || r == utf8.RuneError || (r >= 0x80 && hidden(r)) {
			return false
		}
	}
	return true
}

// hidden reports a character that changes how text around it shows
// without showing itself: C1 controls, separators, bidi and format marks.
func hidden(r rune) bool {
	return (r >= 0x80 && r <= 0x9f) || r == 0x2028 || r == 0x2029 || unicode.Is(unicode.Cf, r)
}

// showDuration is d, rounded for reading.
func showDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// ago is how long before now t was, or a dash for the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	if t.After(now) {
		return "in " + showDuration(t.Sub(now))
	}
	return showDuration(now.Sub(t)) + " ago"
}

// stamp is t in UTC to the second, or a dash for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
