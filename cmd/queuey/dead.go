package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/rabbitmq"
)

// target is what every dead-letter command is about: a broker and one
// queue of a queue set.
type target struct {
	url    string
	prefix string
	queue  string
	decl   declared
}

func (t *target) register(fs *flag.FlagSet) {
	// -url has no default value: -h would print it, and a URL from the
	// environment may carry a real password.
	fs.StringVar(&t.url, "url", "", "AMQP URL of the broker (default $QUEUEY_AMQP_URL, else the local broker at 127.0.0.1:5672 as guest)")
	fs.StringVar(&t.prefix, "prefix", "", "the queue set's prefix: the queue is <prefix>.<queue>")
	fs.StringVar(&t.queue, "queue", "", "the queue's name within its set (required)")
	t.decl.register(fs)
}

// check reports a usage error, and fills in the URL.
func (t *target) check(fs *flag.FlagSet) error {
	if t.queue == "" {
		return errors.New("-queue is required")
	}
	if err := t.decl.check(fs); err != nil {
		return err
	}
	if err := broker.ValidateQueueName(t.brokerName()); err != nil {
		return fmt.Errorf("-prefix and -queue: %w", err)
	}
	if work, ok := strings.CutSuffix(t.queue, broker.DeadSuffix); ok {
		return fmt.Errorf("-queue %q names a dead-letter queue; name its work queue: -queue %s", t.queue, work)
	}
	if work, _, ok := broker.ParseHoldQueueName(t.queue); ok {
		return fmt.Errorf("-queue %q names a hold queue; name its work queue: -queue %s", t.queue, work)
	}
	t.url = cmp.Or(t.url, os.Getenv("QUEUEY_AMQP_URL"), defaultURL)
	return nil
}

// brokerName is the work queue's name on the broker.
func (t *target) brokerName() string { return broker.QueueName(t.prefix, t.queue) }

// open connects and returns the queue's dead-letter tool and the backend
// to close. A queue that does not exist is an error: an inspection must
// not create queues (a typo in -queue would leave a pair behind).
func (t *target) open(ctx context.Context, stderr io.Writer) (*queuey.DeadLetters, *rabbitmq.Backend, error) {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	backend, err := rabbitmq.Dial(ctx, t.url, &rabbitmq.Options{ConnectionName: "queuey cli", Logger: logger})
	if err != nil {
		return nil, nil, err // says why (refused credentials, no broker) without the password
	}
	if _, err := backend.Depth(ctx, t.brokerName()); err != nil {
		backend.Close()
		if errors.Is(err, broker.ErrNoQueue) {
			return nil, nil, fmt.Errorf("there is no queue %q on %s (check -prefix and -queue); nothing was created",
				t.brokerName(), rabbitmq.Redact(t.url))
		}
		return nil, nil, err
	}
	q, unknown, err := t.decl.queue(ctx, t.decl.api(t.url), t.prefix, t.queue)
	if err != nil {
		backend.Close()
		return nil, nil, err
	}
	set := queuey.QueueSet{Prefix: t.prefix, Queues: []queuey.Queue{q}}
	dl, err := queuey.NewDeadLetters(ctx, backend, set, &queuey.ProducerConfig{Logger: logger})
	if err != nil {
		backend.Close()
		return nil, nil, t.decl.explain(err, t.brokerName(), q, unknown)
	}
	return dl, backend, nil
}

// command is one subcommand's flag set and usage.
type command struct {
	fs       *flag.FlagSet
	synopsis string
	stdout   io.Writer
	stderr   io.Writer
}

// newCommand is the command queuey dead name.
func newCommand(name, synopsis string, stdout, stderr io.Writer) *command {
	return newNamedCommand("queuey dead "+name, synopsis, stdout, stderr)
}

// newNamedCommand is the command whose whole name is name.
func newNamedCommand(name, synopsis string, stdout, stderr io.Writer) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr) // where flag reports a bad flag
	fs.Usage = func() {} // printed by parse, to stdout for -h
	return &command{fs: fs, synopsis: synopsis, stdout: stdout, stderr: stderr}
}

func (c *command) printUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n\nflags:\n", c.synopsis)
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(c.stderr)
}

// parse parses args; when it returns false, the command ends with status.
func (c *command) parse(args []string) (status int, ok bool) {
	err := c.fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.printUsage(c.stdout)
		return exitOK, false
	case err != nil: // flag has said what was wrong
		c.printUsage(c.stderr)
		return exitUsage, false
	case c.fs.NArg() > 0:
		return c.usageError(fmt.Errorf("unexpected argument %q", c.fs.Arg(0))), false
	}
	return exitOK, true
}

func (c *command) usageError(err error) int {
	fmt.Fprintf(c.stderr, "%s: %v\n", c.fs.Name(), err)
	c.printUsage(c.stderr)
	return exitUsage
}

// fail reports a runtime error. Its text may quote the broker or a dead
// letter: it is escaped as wire text is (printableLines).
func (c *command) fail(err error) int {
	fmt.Fprintf(c.stderr, "%s: %s\n", c.fs.Name(), printableLines(err.Error()))
	return exitError
}

func deadList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("list", "queuey dead list -queue NAME [-prefix P] [-url URL] [-management URL|off] [-type T] [-max-priority N] [-transient] [-message-ttl D] [-json]", stdout, stderr)
	var t target
	t.register(c.fs)
	asJSON := c.fs.Bool("json", false, "print one JSON object per dead letter, one a line")
	if status, ok := c.parse(args); !ok {
		return status
	}
	if err := t.check(c.fs); err != nil {
		return c.usageError(err)
	}

	dl, backend, err := t.open(ctx, stderr)
	if err != nil {
		return c.fail(err)
	}
	defer backend.Close()
	list, err := dl.List(ctx, t.queue)
	if err != nil {
		return c.fail(err)
	}
	dead := broker.DeadQueueName(t.brokerName())
	if *asJSON {
		if err := printJSON(stdout, list); err != nil {
			return c.fail(err)
		}
		noteCut(ctx, stderr, backend, dead, len(list))
		return exitOK
	}
	if len(list) == 0 {
		fmt.Fprintf(stdout, "no dead letters in %s\n", dead)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tREASON\tATTEMPTS\tAGE")
	for _, d := range list {
		id, kind, age := printable(d.ID), printable(d.Kind), formatAge(d.Age)
		if d.Malformed {
			id, kind, age = "-", "(malformed)", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", id, kind, truncate(d.Reason, reasonWidth), d.Attempts, age)
	}
	if err := tw.Flush(); err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(stdout, "%s in %s\n", count(len(list)), dead)
	noteCut(ctx, stderr, backend, dead, len(list))
	return exitOK
}

// noteCut tells stderr when a list of n is cut short: when dead holds more
// than the queuey.ListLimit a list reads. A note, not the list: it is
// seen when the list is piped on.
func noteCut(ctx context.Context, stderr io.Writer, backend *rabbitmq.Backend, dead string, n int) {
	if n < queuey.ListLimit {
		return
	}
	if total, err := backend.Depth(ctx, dead); err == nil && total > n {
		fmt.Fprintf(stderr, "(the first %d of %d: a list reads %d at most; replay -all goes past them)\n", n, total, queuey.ListLimit)
	}
}

// jsonDeadLetter is a line of list -json.
type jsonDeadLetter struct {
	ID            string            `json:"id,omitempty"`
	Kind          string            `json:"kind,omitempty"`
	Reason        string            `json:"reason"`
	Attempts      int               `json:"attempts"`
	EnqueuedAt    time.Time         `json:"enqueued_at,omitzero"`
	AgeMs         int64             `json:"age_ms"`
	CorrelationID string            `json:"correlation_id,omitempty"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Malformed     bool              `json:"malformed,omitempty"`
	Body          string            `json:"body,omitempty"` // only for a malformed one
}

// printJSON writes list as list -json does: a JSON object a line, with
// what a terminal would act on escaped (jsonSafe).
func printJSON(w io.Writer, list []queuey.DeadLetter) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, d := range list {
		if err := enc.Encode(jsonOf(d)); err != nil {
			return err
		}
	}
	_, err := w.Write(jsonSafe(buf.Bytes()))
	return err
}

func jsonOf(d queuey.DeadLetter) jsonDeadLetter {
	j := jsonDeadLetter{
		ID: d.ID, Kind: d.Kind, Reason: d.Reason, Attempts: d.Attempts,
		EnqueuedAt: d.EnqueuedAt.UTC(), AgeMs: d.Age.Milliseconds(),
		CorrelationID: d.CorrelationID, Payload: d.Payload, Headers: d.Headers, Malformed: d.Malformed,
	}
	if d.Malformed {
		j.EnqueuedAt, j.Body = time.Time{}, string(d.Body)
	}
	return j
}

func deadShow(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCommand("show", "queuey dead show -queue NAME -id JOBID [-prefix P] [-url URL] [-management URL|off] [-type T] [-max-priority N] [-transient] [-message-ttl D]", stdout, stderr)
	var t target
	t.register(c.fs)
	id := c.fs.String("id", "", "the job id of the dead letter to show (required)")
	if status, ok := c.parse(args); !ok {
		return status
	}
	if err := t.check(c.fs); err != nil {
		return c.usageError(err)
	}
	if *id == "" {
		return c.usageError(errors.New("-id is required"))
	}

	dl, backend, err := t.open(ctx, stderr)
	if err != nil {
		return c.fail(err)
	}
	defer backend.Close()
	d, err := dl.Show(ctx, t.queue, *id)
	if err != nil {
		return c.fail(err)
	}
	printDeadLetter(stdout, d, t.brokerName())
	return exitOK
}

// printDeadLetter writes what show says of d, a dead letter of queue. What
// comes from the wire is escaped (printable), one field a line.
func printDeadLetter(w io.Writer, d queuey.DeadLetter, queue string) {
	fmt.Fprintf(w, "id:          %s\n", printable(d.ID))
	fmt.Fprintf(w, "kind:        %s\n", printable(d.Kind))
	fmt.Fprintf(w, "queue:       %s (dead letters in %s)\n", queue, broker.DeadQueueName(queue))
	fmt.Fprintf(w, "reason:      %s\n", printable(d.Reason))
	fmt.Fprintf(w, "attempts:    %d\n", d.Attempts)
	fmt.Fprintf(w, "enqueued at: %s (%s ago)\n", d.EnqueuedAt.UTC().Format(time.RFC3339Nano), formatAge(d.Age))
	if d.CorrelationID != "" {
		fmt.Fprintf(w, "correlation: %s\n", printable(d.CorrelationID))
	}
	fmt.Fprintln(w, "headers:")
	for _, k := range slices.Sorted(maps.Keys(d.Headers)) {
		fmt.Fprintf(w, "  %s: %s\n", printable(k), printable(d.Headers[k]))
	}
	fmt.Fprintln(w, "payload:")
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, d.Payload, "  ", "  "); err != nil {
		// Not JSON after all: as it is, on one line.
		fmt.Fprintf(w, "  %s\n", printable(string(d.Payload)))
		return
	}
	// Its newlines are json.Indent's, or trailing whitespace: a JSON
	// string holds no raw newline.
	fmt.Fprintf(w, "  %s\n", printableLines(pretty.String()))
}

// deadReplay is queuey dead replay. All it says (the count, the question,
// the progress, what it replayed) goes to stderr, one stream, in order:
// stdout is for the usage asked for with -h, for a replay makes no list to
// pipe on.
func deadReplay(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := newCommand("replay",
		"queuey dead replay -queue NAME (-id ID[,ID...] | -kind KIND | -all) [-after 30s] [-yes] [-prefix P] [-url URL] [-management URL|off] [-type T] [-max-priority N] [-transient] [-message-ttl D]",
		stdout, stderr)
	var t target
	t.register(c.fs)
	ids := c.fs.String("id", "", "replay the dead letters of these job ids, comma-separated")
	kind := c.fs.String("kind", "", "replay the dead letters of this job kind")
	all := c.fs.Bool("all", false, "replay every dead letter that can be (a malformed body cannot)")
	after := c.fs.Duration("after", 0, "hold the replayed jobs this long, then run them ahead of the backlog (default: at once, behind it)")
	yes := c.fs.Bool("yes", false, "replay without asking")
	if status, ok := c.parse(args); !ok {
		return status
	}
	if err := t.check(c.fs); err != nil {
		return c.usageError(err)
	}
	sel, what, wantIDs, err := selection(*ids, *kind, *all)
	if err != nil {
		return c.usageError(err)
	}
	if *after < 0 {
		return c.usageError(fmt.Errorf("-after %v is negative", *after))
	}

	dl, backend, err := t.open(ctx, stderr)
	if err != nil {
		return c.fail(err)
	}
	defer backend.Close()
	dead := broker.DeadQueueName(t.brokerName())

	// Count first, for the question and the progress; the replay then takes
	// only what was counted (and asked about), not what arrived since.
	list, err := dl.List(ctx, t.queue)
	if err != nil {
		return c.fail(err)
	}
	counted := map[string]bool{}
	n, malformed := 0, 0
	for _, d := range list {
		switch {
		case d.Malformed:
			malformed++
		case sel(d):
			counted[d.ID] = true
			n++
		}
	}
	// A list reads queuey.ListLimit at most: -all then takes every dead
	// letter the replay finds, those past the count too.
	pick := func(d queuey.DeadLetter) bool { return counted[d.ID] && sel(d) }
	if *all && len(list) == queuey.ListLimit {
		if total, err := backend.Depth(ctx, dead); err == nil && total > len(list) {
			n += total - len(list)
			pick = sel
		}
	}
	if malformed > 0 {
		fmt.Fprintf(stderr, "malformed dead letters in %s, not envelopes, which no replay takes and which stay there: %d\n", dead, malformed)
	}
	var missing []string
	for _, id := range wantIDs {
		if !counted[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return c.fail(fmt.Errorf("%w: no dead letter with job id %s in %s; nothing was replayed",
			queuey.ErrNotFound, strings.Join(missing, ", "), dead))
	}
	if n == 0 {
		fmt.Fprintf(stderr, "no dead letters in %s match %s: nothing to replay\n", dead, what)
		return exitOK
	}
	if !*yes {
		fmt.Fprintf(stderr, "%s of the %d in %s match %s.\n", count(n), len(list), dead, what)
		answer, err := ask(ctx, stdin, stderr, fmt.Sprintf("replay %s? [y/N] ", count(n)))
		if err != nil {
			return c.fail(fmt.Errorf("no answer (%w); pass -yes to replay without asking. Nothing was replayed", err))
		}
		if a := strings.ToLower(answer); a != "y" && a != "yes" {
			fmt.Fprintln(stderr, "nothing was replayed")
			return exitOK
		}
	}

	report := func(k int) { fmt.Fprintf(stderr, "replayed %d/%d\n", k, max(n, k)) }
	k, err := dl.Replay(ctx, t.queue, queuey.ReplayOptions{
		Select: pick,
		After:  *after,
		// The total Replay passes counts the whole dead-letter queue, not
		// the selection: n is the number that means something here.
		Progress: func(k, _ int) {
			if k%100 == 0 {
				report(k)
			}
		},
	})
	if k == 0 || k%100 != 0 {
		report(k)
	}
	if err != nil {
		return c.fail(fmt.Errorf("%w (replayed %d of %d before it; the others are still in %s)", err, k, n, dead))
	}
	if k < n {
		fmt.Fprintf(stderr, "%d of the %d were no longer in %s (replayed or removed by someone else)\n", n-k, n, dead)
	}
	if *after > 0 {
		fmt.Fprintf(stderr, "replayed %s to %s: they run after %v, ahead of the backlog\n", count(k), t.brokerName(), *after)
	} else {
		fmt.Fprintf(stderr, "replayed %s to %s\n", count(k), t.brokerName())
	}
	return exitOK
}

// selection turns the selector flags, exactly one of which must be set,
// into a selector, its description and the job ids asked for by -id.
func selection(ids, kind string, all bool) (func(queuey.DeadLetter) bool, string, []string, error) {
	set := 0
	for _, on := range []bool{ids != "", kind != "", all} {
		if on {
			set++
		}
	}
	if set != 1 {
		return nil, "", nil, errors.New("give exactly one of -id, -kind and -all")
	}
	switch {
	case ids != "":
		var list []string
		for id := range strings.SplitSeq(ids, ",") {
			if id = strings.TrimSpace(id); id != "" && !slices.Contains(list, id) {
				list = append(list, id)
			}
		}
		if len(list) == 0 {
			return nil, "", nil, fmt.Errorf("-id %q names no job id", ids)
		}
		return queuey.ByID(list...), "job id " + strings.Join(list, ", "), list, nil
	case kind != "":
		return queuey.ByKind(kind), fmt.Sprintf("kind %q", kind), nil, nil
	default:
		return queuey.All(), "-all", nil, nil
	}
}

// ask writes prompt and reads one line from stdin. The read runs on a
// goroutine of its own so that an interrupt (ctx) is not stuck behind it;
// it ends when the read does.
func ask(ctx context.Context, stdin io.Reader, stderr io.Writer, prompt string) (string, error) {
	fmt.Fprint(stderr, prompt)
	type answer struct {
		line string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err == io.EOF && line != "" {
			err = nil // a last line without its newline
		}
		got <- answer{strings.TrimSpace(line), err}
	}()
	select {
	case a := <-got:
		if a.err == io.EOF {
			a.err = errors.New("stdin ended")
		}
		return a.line, a.err
	case <-ctx.Done():
		fmt.Fprintln(stderr)
		return "", ctx.Err()
	}
}

// reasonWidth is where list cuts a reason short.
const reasonWidth = 60

// truncate puts s on one line, escaped (printable), and cuts it to width
// runes, with an ellipsis.
func truncate(s string, width int) string {
	s = printable(strings.Join(strings.Fields(s), " "))
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

// formatAge rounds d to the two largest units that matter: 42s, 5m03s,
// 3h07m, 12d04h.
func formatAge(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		d = d.Round(time.Hour)
		return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
}

// count reads "1 dead letter", "3 dead letters".
func count(n int) string {
	if n == 1 {
		return "1 dead letter"
	}
	return fmt.Sprintf("%d dead letters", n)
}

// printable returns s, which came from the wire, fit to print on one line
// of a terminal: what a terminal would act on is written as a Go-style
// escape. That is the C0 controls (ESC as \x1b, BEL as \a, a newline as
// \n, a tab as \t), DEL (\x7f), the C1 controls U+0080-U+009F (\u009b,
// which some terminals take as ESC [), the bidirectional controls and the
// line and paragraph separators, which would reorder or break a line
// (\u202e), and each byte of invalid UTF-8 (\xff). Printable text, é and
// 日本 as much as a backslash, is kept as it is.
func printable(s string) string {
	if !slices.ContainsFunc([]byte(s), func(c byte) bool { return c < 0x20 || c >= 0x7f }) {
		return s // printable ASCII, the usual case
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 || r == 0x7f:
			b.WriteString(controlEscape(r))
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// printableLines is printable for text of several lines: its newlines are
// kept, everything else is escaped.
func printableLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, "\n")
}

// controlEscape is the Go escape of a C0 control or DEL.
func controlEscape(r rune) string {
	switch r {
	case '\a':
		return `\a`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '\v':
		return `\v`
	}
	return fmt.Sprintf(`\x%02x`, r)
}

// unsafeRune reports a rune past ASCII that printable escapes: a C1
// control, a bidirectional control, a line or paragraph separator.
func unsafeRune(r rune) bool {
	return r >= 0x80 && r <= 0x9f || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r)
}

// jsonSafe escapes, in encoding/json's output, what it leaves raw and a
// terminal would act on: DEL, the C1 controls and the runes unsafeRune
// names become \u escapes, which mean the same in a JSON string; invalid
// UTF-8 becomes \ufffd, as encoding/json writes it in a string. Outside
// its strings, encoding/json writes only ASCII, and no control but the
// newline that ends each value.
func jsonSafe(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...)
		case r < 0x20 && r != '\n' || r == 0x7f || unsafeRune(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}
