package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// api stands in for a rate-limited HTTP API: it allows rate calls in each
// second (fixed one-second windows counted from its start) and answers the
// rest "429 Too Many Requests" with a Retry-After, in whole seconds as RFC
// 9110 has it, rounded up so that waiting it never lands in the same window.
// It counts what it answered, per window.
type api struct {
	rate  int
	start time.Time
	now   func() time.Time // time.Now; a test's clock in TestTheAPI

	mu        sync.Mutex
	window    int // the window of the last call
	used      int // calls answered 200 in that window
	ok        int
	limited   int
	limitedIn map[int]int // window -> calls answered 429 in it
}

func newAPI(rate int) *api {
	return &api{rate: rate, start: time.Now(), now: time.Now, limitedIn: map[int]int{}}
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	elapsed := a.now().Sub(a.start)
	window := int(elapsed / time.Second)
	if window != a.window {
		a.window, a.used = window, 0
	}
	if a.used < a.rate {
		a.used++
		a.ok++
		a.mu.Unlock()
		fmt.Fprintln(w, "ok")
		return
	}
	a.limited++
	a.limitedIn[window]++
	a.mu.Unlock()
	untilNext := time.Duration(window+1)*time.Second - elapsed
	seconds := (untilNext + time.Second - 1) / time.Second // round up: never early
	w.Header().Set("Retry-After", strconv.Itoa(int(seconds)))
	http.Error(w, "rate limited", http.StatusTooManyRequests)
}

// apiCounts is what the API answered.
type apiCounts struct {
	OK, Limited int
	// LimitedSeconds counts the windows with at least one 429, and
	// MostInASecond is the most 429s answered in one of them.
	LimitedSeconds, MostInASecond int
}

func (a *api) counts() apiCounts {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := apiCounts{OK: a.ok, Limited: a.limited, LimitedSeconds: len(a.limitedIn)}
	for _, n := range a.limitedIn {
		c.MostInASecond = max(c.MostInASecond, n)
	}
	return c
}

// parseRetryAfter reads a Retry-After header: delay-seconds, or an HTTP
// date (RFC 9110, section 10.2.3).
func parseRetryAfter(h string, now time.Time) (time.Duration, error) {
	h = strings.TrimSpace(h)
	if s, err := strconv.Atoi(h); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, nil
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(0, t.Sub(now)), nil
	}
	return 0, fmt.Errorf("unusable Retry-After %q", h)
}
