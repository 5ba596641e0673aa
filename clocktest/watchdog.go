package clocktest

import (
	"bytes"
	"cmp"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultWatchdog is Options.Watchdog's default.
const DefaultWatchdog = 5 * time.Second

// A watchdog ends the test process when the harness waits for idleness
// that cannot come: a goroutine of the bubble blocked where synctest cannot
// see it (a network read, a file, a syscall) is never "durably blocked", so
// synctest.Wait would wait for it until go test's -timeout. It runs outside
// the bubble, on real time, and shares with the harness only atomics: the
// harness's channels belong to the bubble.
type watchdog struct {
	test   string
	limit  time.Duration
	bubble atomic.Int64           // the bubble's id, once known; 0: watch every bubble
	waits  atomic.Uint64          // odd while the harness waits for idleness
	ending atomic.Bool            // the test function and its cleanups are done
	seed   atomic.Pointer[string] // the harness's seed line, for the report
	quit   chan struct{}
	done   chan struct{}
}

// startWatchdog starts a watchdog for the test named test. It must be
// called outside the bubble; a negative limit means none (nil).
func startWatchdog(test string, limit time.Duration) *watchdog {
	if limit < 0 {
		return nil
	}
	w := &watchdog{test: test, limit: cmp.Or(limit, DefaultWatchdog), quit: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// stop ends the watchdog and waits for it.
func (w *watchdog) stop() {
	if w == nil {
		return
	}
	close(w.quit)
	<-w.done
}

// enter tells the watchdog which bubble to watch: the caller's.
func (w *watchdog) enter() {
	if w != nil {
		w.bubble.Store(bubbleID())
	}
}

// waiting runs wait, which waits on the bubble (synctest.Wait, or a move
// of the mock clock), under the watchdog's eye.
func (w *watchdog) waiting(wait func()) {
	if w == nil {
		wait()
		return
	}
	w.waits.Add(1)
	defer w.waits.Add(1)
	wait()
}

// tell has the report end with line: the harness's seed, which the test
// cannot log once the watchdog has ended it.
func (w *watchdog) tell(line string) {
	if w != nil && line != "" {
		w.seed.Store(&line)
	}
}

// end says the test function and its cleanups are done: synctest.Test now
// waits for every goroutine of the bubble to exit.
func (w *watchdog) end() {
	if w != nil {
		w.ending.Store(true)
	}
}

// run checks, a few times per limit, whether the harness has waited
// longer than the limit, and then whether what it waits for is stuck: the
// same goroutines of the bubble found blocked out of its sight at two
// checks in a row, none of it running (a goroutine can pass through such
// a state at work, waiting on the garbage collector, say).
func (w *watchdog) run() {
	defer close(w.done)
	tick := time.NewTicker(min(w.limit/4, 250*time.Millisecond))
	defer tick.Stop()
	seen, since, suspects := ^uint64(0), time.Now(), ""
	for {
		select {
		case <-w.quit:
			return
		case now := <-tick.C:
			state, ending := w.waits.Load(), w.ending.Load()
			if ending {
				state |= 1 << 63
			}
			if state != seen {
				seen, since, suspects = state, now, ""
				continue
			}
			waiting := state%2 == 1 || ending
			if !waiting || now.Sub(since) < w.limit {
				continue
			}
			stuck := w.stuckGoroutines()
			if stuck != "" && headers(stuck) == suspects {
				panic(w.report(ending, stuck))
			}
			suspects = headers(stuck)
		}
	}
}

// headers are the first lines of stacks: which goroutines, and what they
// wait for.
func headers(stacks string) string {
	var hs []string
	for g := range strings.SplitSeq(stacks, "\n\n") {
		h, _, _ := strings.Cut(g, "\n")
		hs = append(hs, h)
	}
	return strings.Join(hs, "\n")
}

// report is the message the watchdog ends the process with.
func (w *watchdog) report(ending bool, stuck string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "clocktest: %s: ", w.test)
	if ending {
		fmt.Fprintf(&b, "the test has returned, but for more than %v of real time goroutines of its synctest bubble have not exited,\n", w.limit)
		b.WriteString("and synctest.Test waits for every one of them.\n")
	} else {
		fmt.Fprintf(&b, "the harness has waited more than %v of real time for the system to go idle, and it will not:\n", w.limit)
		b.WriteString("goroutines of the test's synctest bubble are blocked where the bubble cannot see them, so virtual time stops.\n")
	}
	b.WriteString(`The likely cause: real I/O inside the bubble: a network connection (an httptest.NewServer,
an http.Client keeping a connection alive, a database), a file, a pipe, a real-time syscall.
What to do:
  - serve an HTTP API with h.NewHTTPServer(handler) (or clocktest.NewHTTPServer) instead of
    httptest.NewServer, and call it through its Client(): its connections are in memory,
    inside the bubble, and virtual time passes as usual;
  - or replace the call with a fake, or test that code outside clocktest, in real time;
  - if the goroutines below are doing slow real work that does end, raise Options.Watchdog.
The goroutines blocked outside channel and timer waits:

`)
	b.WriteString(stuck)
	if seed := w.seed.Load(); seed != nil {
		b.WriteString("\n\n" + *seed)
	}
	return b.String()
}

var (
	headerRE = regexp.MustCompile(`^goroutine \d+ \[([^,\]]*)`)
	bubbleRE = regexp.MustCompile(`, synctest bubble (\d+)`)
)

// stuckGoroutines lists the stacks of the goroutines of the watched bubble
// that are blocked, but not durably: on something the bubble cannot see.
// It lists none if one of the bubble's goroutines is running or runnable,
// for then the system is still at work.
func (w *watchdog) stuckGoroutines() string {
	var stuck []string
	for g := range strings.SplitSeq(allStacks(), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		m := bubbleRE.FindStringSubmatch(header)
		if m == nil || w.bubble.Load() != 0 && m[1] != strconv.FormatInt(w.bubble.Load(), 10) {
			continue // not the bubble's
		}
		status := ""
		if s := headerRE.FindStringSubmatch(header); s != nil {
			status = s[1]
		}
		switch {
		case strings.HasSuffix(status, "(durable)"):
		case atWork(status):
			return ""
		default:
			stuck = append(stuck, g)
		}
	}
	return strings.Join(stuck, "\n\n")
}

// atWork reports whether a goroutine in status is running, or is held up
// only by the runtime (the garbage collector, a preemption) on its way.
func atWork(status string) bool {
	switch status {
	case "running", "runnable", "preempted", "GC assist wait", "GC assist marking", "garbage collection", "stopping the world":
		return true
	}
	return false
}

// allStacks is every goroutine's stack, as runtime.Stack gives them.
func allStacks() string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 64<<20 {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// bubbleID is the id of the synctest bubble of the calling goroutine, as
// its stack's header says; 0 outside a bubble.
func bubbleID() int64 {
	buf := make([]byte, 512)
	header, _, _ := bytes.Cut(buf[:runtime.Stack(buf, false)], []byte("\n"))
	m := bubbleRE.FindSubmatch(header)
	if m == nil {
		return 0
	}
	id, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return id
}
