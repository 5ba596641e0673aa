package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
)

// routes sets up the console's pages and actions.
func (c *Console) routes() {
	m := http.NewServeMux()
	m.Handle("GET /assets/", http.StripPrefix("/assets/", assetServer()))
	m.HandleFunc("GET /{$}", c.serve(ViewOverview, c.overview))
	m.HandleFunc("GET /waits", c.serve(ViewWaits, c.waits))
	m.HandleFunc("GET /dead", c.serve(ViewDeadLetters, c.deadQueues))
	m.HandleFunc("GET /dead/{queue}", c.serve(ViewDeadLetters, c.deadList))
	m.HandleFunc("GET /dead/{queue}/letter/{id}", c.serve(ViewDeadLetter, c.deadShow))
	m.HandleFunc("GET /dead/{queue}/letter/{id}/body", c.serve(ViewDeadLetter, c.deadBody))
	m.HandleFunc("POST /dead/{queue}/replay", c.serve(Replay, c.deadReplay))
	m.HandleFunc("POST /dead/{queue}/delete", c.serve(Delete, c.deadDelete))
	m.HandleFunc("GET /schedules", c.serve(ViewSchedules, c.schedules))
	m.HandleFunc("GET /workers", c.serve(ViewWorkers, c.workers))
	m.HandleFunc("POST /queues/{queue}/pause", c.serve(Pause, c.pause))
	m.HandleFunc("POST /queues/{queue}/resume", c.serve(Resume, c.resume))
	m.HandleFunc("POST /jobs/cancel", c.serve(Cancel, c.cancelJob))
	c.mux = m
}

// csrfCookie holds the token every form sends back (double submit): a
// page of another site can make the browser send the cookie, but cannot
// read it to put it in the form.
const csrfCookie = "queuey_csrf"

// serve wraps a page or action: authorization, read-only mode, the CSRF
// check of actions, and the page's frame.
func (c *Console) serve(a Action, fn func(*request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := &request{c: c, w: w, r: r, action: a, base: basePath(r)}
		if c.opts.Authorize != nil {
			if err := c.opts.Authorize(r, a); err != nil {
				q.fail(http.StatusForbidden, "not allowed: "+err.Error())
				return
			}
		}
		q.csrf = c.csrfToken(w, r, q.base)
		if a.mutates() {
			if c.opts.ReadOnly {
				q.fail(http.StatusForbidden, "the console is read-only: it replays, deletes, pauses and cancels nothing")
				return
			}
			if !sameOrigin(r) || !validToken(r, q.csrf) {
				q.fail(http.StatusForbidden, "refused: the form's CSRF token is missing or does not match; reload the page and try again")
				return
			}
		}
		if err := fn(q); err != nil {
			q.error(err)
		}
	}
}

// csrfToken is the request's CSRF cookie, set first if it has none.
func (c *Console) csrfToken(w http.ResponseWriter, r *http.Request, base string) string {
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) >= 32 {
		return ck.Value
	}
	if r.Method != http.MethodGet {
		return "" // a POST without the cookie gets no new one to match
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	tok := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: base + "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return tok
}

// validToken reports a form that carries the cookie's token.
func validToken(r *http.Request, cookie string) bool {
	form := r.PostFormValue("csrf")
	return cookie != "" && subtle.ConstantTimeCompare([]byte(form), []byte(cookie)) == 1
}

// sameOrigin refuses a request a browser says came from another site.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	return true
}

// basePath is the path the console is mounted under: what a StripPrefix
// in front of it took off the request's path ("" at the root).
func basePath(r *http.Request) string {
	full := r.RequestURI
	if i := strings.IndexByte(full, '?'); i >= 0 {
		full = full[:i]
	}
	if u, err := url.ParseRequestURI(full); err == nil {
		full = u.EscapedPath()
	}
	base := strings.TrimSuffix(full, r.URL.EscapedPath())
	return strings.TrimRight(base, "/")
}
