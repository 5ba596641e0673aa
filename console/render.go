package console

import (
	"bytes"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/queuey-go/queuey"
)

//go:embed assets templates
var files embed.FS

// assetServer serves the stylesheet and the script.
func assetServer() http.Handler {
	sub, _ := fs.Sub(files, "assets")
	return http.FileServerFS(sub)
}

// pages are the templates, one set per page, each with the frame.
var pages = func() map[string]*template.Template {
	out := map[string]*template.Template{}
	names := []string{"overview", "waits", "deadqueues", "deadlist", "deadshow", "confirm", "schedules", "workers", "message"}
	for _, n := range names {
		out[n] = template.Must(template.New("frame.html").Funcs(funcs).ParseFS(files, "templates/frame.html", "templates/"+n+".html"))
	}
	return out
}()

// request is one request being served.
type request struct {
	c      *Console
	w      http.ResponseWriter
	r      *http.Request
	action Action
	base   string
	csrf   string
}

// view is what every page's template sees.
type view struct {
	Title    string
	Nav      string
	Base     string
	CSRF     string
	ReadOnly bool
	Refresh  int // ms
	LiveURL  string
	Now      time.Time
	Data     any
}

// render writes page with data; a request for its live part alone
// (?live=1, the script's) gets only that.
func (q *request) render(status int, page, title string, data any) error {
	v := view{Title: title, Nav: page, Base: q.base, CSRF: q.csrf, ReadOnly: q.c.opts.ReadOnly,
		Refresh: int(q.c.opts.Refresh / time.Millisecond), Now: q.c.clock.Now(), Data: data}
	u := *q.r.URL
	qs := u.Query()
	qs.Set("live", "1")
	u.RawQuery = qs.Encode()
	v.LiveURL = q.base + u.RequestURI()
	name := "frame.html"
	if q.r.URL.Query().Get("live") == "1" {
		name = "live"
	}
	var buf bytes.Buffer
	if err := pages[page].ExecuteTemplate(&buf, name, v); err != nil {
		return err
	}
	q.w.Header().Set("Content-Type", "text/html; charset=utf-8")
	q.w.Header().Set("Cache-Control", "no-store")
	q.w.WriteHeader(status)
	_, err := q.w.Write(buf.Bytes())
	return err
}

// message is a page that says one thing (an error, a result).
type message struct {
	Heading, Text string
	Back          string
}

// fail answers with status and a page that says why.
func (q *request) fail(status int, text string) {
	_ = q.render(status, "message", http.StatusText(status), message{Heading: http.StatusText(status), Text: text, Back: q.base + "/"})
}

// error answers a page's error: a client's mistake as such, the rest as
// the console's, logged.
func (q *request) error(err error) {
	switch {
	case errors.Is(err, queuey.ErrUnknownQueue), errors.Is(err, queuey.ErrNotFound):
		q.fail(http.StatusNotFound, err.Error())
	case errors.Is(err, queuey.ErrInUse):
		q.fail(http.StatusConflict, err.Error())
	case errors.Is(err, errBadInput), errors.Is(err, queuey.ErrInvalidDelay), errors.Is(err, queuey.ErrInvalidJob):
		q.fail(http.StatusBadRequest, err.Error())
	default:
		q.c.log.Error("console: serving a page", "path", q.r.URL.Path, "error", err)
		q.fail(http.StatusInternalServerError, err.Error())
	}
}

// errBadInput: a request's parameters make no sense.
var errBadInput = errors.New("bad input")

// count shows a count, or a dash for one the broker cannot tell.
func count(n int) string {
	if n < 0 {
		return "—"
	}
	return strconv.Itoa(n)
}
