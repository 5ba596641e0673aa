package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/console"
)

var set = queuey.QueueSet{Prefix: "app", Queues: []queuey.Queue{{Name: "emails"}, {Name: "api"}}}

// site is a console on a memory backend behind a test server, and a
// browser-like client that keeps its cookies.
type site struct {
	t       *testing.T
	backend *memory.Backend
	clock   *clock.Mock
	srv     *httptest.Server
	client  *http.Client
}

func newSite(t *testing.T, opts *console.Options) *site {
	t.Helper()
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := memory.New(&memory.Options{Clock: mock})
	t.Cleanup(func() { _ = b.Close() })
	if opts == nil {
		opts = &console.Options{}
	}
	opts.Clock = mock
	c, err := console.New(t.Context(), b, set, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", c))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return &site{t: t, backend: b, clock: mock, srv: srv, client: &http.Client{Jar: jar}}
}

// get fetches path under the mount and returns the status and body.
func (s *site) get(path string) (int, string) {
	s.t.Helper()
	resp, err := s.client.Get(s.srv.URL + "/ops" + path)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post submits a form to path; csrf is added from the last page unless
// the form has its own.
func (s *site) post(path string, form url.Values) (int, string) {
	s.t.Helper()
	resp, err := s.client.PostForm(s.srv.URL+"/ops"+path, form)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var tokenRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token is the CSRF token the pages carry: the cookie's.
func (s *site) token() string {
	s.t.Helper()
	_, body := s.get("/")
	u, _ := url.Parse(s.srv.URL + "/ops/")
	for _, c := range s.client.Jar.Cookies(u) {
		if c.Name == "queuey_csrf" {
			if m := tokenRE.FindStringSubmatch(body); m != nil && m[1] != c.Value {
				s.t.Fatalf("the page's token %q is not the cookie's %q", m[1], c.Value)
			}
			return c.Value
		}
	}
	s.t.Fatal("no CSRF cookie")
	return ""
}

// deadLetter puts a dead letter of kind on queue name.
func (s *site) deadLetter(name, kind, reason string, payload string) string {
	s.t.Helper()
	env := broker.NewEnvelope(kind, set.BrokerName(name), json.RawMessage(payload), s.clock.Now())
	msg, err := env.Message()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.backend.DeadLetter(context.Background(), broker.DeadLetter{Message: msg, Reason: reason}); err != nil {
		s.t.Fatal(err)
	}
	return env.JobID
}

func TestOverviewShowsEveryQueueUnderThePrefix(t *testing.T) {
	s := newSite(t, nil)
	s.deadLetter("emails", "send", "fatal error: no", `{}`)
	code, body := s.get("/")
	if code != 200 {
		t.Fatalf("overview: %d", code)
	}
	for _, want := range []string{`data-queue="emails"`, `data-queue="api"`, `href="/ops/dead/emails"`, `/ops/assets/console.css`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
	if !regexp.MustCompile(`data-col="dead"><a[^>]*>1</a>`).MatchString(body) {
		t.Errorf("overview does not count the dead letter:\n%s", body)
	}
}

func TestEveryResponseCarriesTheSecurityHeaders(t *testing.T) {
	s := newSite(t, nil)
	resp, err := s.client.Get(s.srv.URL + "/ops/waits")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
}

func TestAnActionWithoutTheTokenIsRefused(t *testing.T) {
	s := newSite(t, nil)
	id := s.deadLetter("emails", "send", "fatal error: no", `{}`)
	s.token()
	for name, form := range map[string]url.Values{
		"missing": {"ids": {id}, "confirm": {"yes"}},
		"forged":  {"ids": {id}, "confirm": {"yes"}, "csrf": {strings.Repeat("A", 43)}},
	} {
		if code, _ := s.post("/dead/emails/replay", form); code != http.StatusForbidden {
			t.Errorf("%s token: %d, want 403", name, code)
		}
	}
	if n := len(s.backend.DeadLetters(set.BrokerName("emails"))); n != 1 {
		t.Errorf("%d dead letters after refused replays, want 1", n)
	}
}

func TestReplayAsksThenReplays(t *testing.T) {
	s := newSite(t, nil)
	id := s.deadLetter("emails", "send", "fatal error: no", `{}`)
	tok := s.token()
	code, body := s.post("/dead/emails/replay", url.Values{"ids": {id}, "csrf": {tok}})
	if code != 200 || !strings.Contains(body, `id="confirm-count">1<`) {
		t.Fatalf("confirmation: %d\n%s", code, body)
	}
	if n := s.backend.Pending(set.BrokerName("emails")); n != 0 {
		t.Fatalf("replayed before confirmation: %d pending", n)
	}
	code, body = s.post("/dead/emails/replay", url.Values{"ids": {id}, "csrf": {tok}, "confirm": {"yes"}})
	if code != 200 || !strings.Contains(body, "Replayed 1") {
		t.Fatalf("replay: %d\n%s", code, body)
	}
	if n := s.backend.Pending(set.BrokerName("emails")); n != 1 {
		t.Errorf("%d pending after the replay, want 1", n)
	}
}

func TestWireTextIsEscaped(t *testing.T) {
	s := newSite(t, nil)
	id := s.deadLetter("emails", "<script>alert(1)</script>\x1b[31m\u202e", "boom\x1b[2J<b>", `{"x":"<img src=x>"}`)
	_, list := s.get("/dead/emails")
	_, one := s.get("/dead/emails/letter/" + id)
	for name, body := range map[string]string{"list": list, "show": one} {
		for _, bad := range []string{"<script>alert", "\x1b", "\u202e", "<b>", "<img"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s carries %q raw", name, bad)
			}
		}
		if !strings.Contains(body, `\x1b[31m\u202e`) {
			t.Errorf("%s does not show the escapes", name)
		}
	}
}

func TestUnknownQueueIsNotFound(t *testing.T) {
	s := newSite(t, nil)
	if code, _ := s.get("/dead/nope"); code != http.StatusNotFound {
		t.Errorf("dead letters of an unknown queue: %d, want 404", code)
	}
}

func (s *site) brokerName(name string) string { return set.BrokerName(name) }

// A dead letter of a unique job shows its key, and one of a chain's step
// shows where the chain stands, as a replay will take them up again.
func TestADeadLettersKeyAndChainStepShow(t *testing.T) {
	s := newSite(t, nil)
	env := broker.NewEnvelope("send", set.BrokerName("emails"), json.RawMessage(`{}`), s.clock.Now())
	msg, err := env.Message()
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimSuffix(string(msg.Body), "}") + `,"chain":{"id":"c-42","step":2,"steps":3}}`
	msg.Body = []byte(body)
	msg.Headers = map[string]string{"x-queuey-unique-key": "user-7<b>", "x-queuey-unique-window-ms": "60000"}
	if err := s.backend.DeadLetter(context.Background(), broker.DeadLetter{Message: msg, Reason: "fatal error: no"}); err != nil {
		t.Fatal(err)
	}
	_, page := s.get("/dead/emails/letter/" + env.JobID)
	for _, want := range []string{"Uniqueness key", "user-7&lt;b&gt;", "step 2 of 3 of chain c-42"} {
		if !strings.Contains(page, want) {
			t.Errorf("the letter's page lacks %q", want)
		}
	}
}
