package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/clocktest"
	"github.com/queuey-go/queuey/console"
)

type email struct {
	To string `json:"to"`
}

func (email) Kind() string        { return "send" }
func (email) Queue() queuey.Queue { return set.Queues[0] }

// awaitFirst waits for job id's first outcome and returns all it has had.
func awaitFirst(t *testing.T, seen *clocktest.Outcomes, id string) []queuey.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got, err := seen.Await(ctx, id, 1)
	if err != nil {
		t.Fatalf("job %s had no outcome: %v", id, err)
	}
	return got
}

// worker runs a worker of the site's set, on its clock, whose handler
// succeeds, until the test ends; it has read the ledger of cancellations
// (and follows it) when worker returns.
func (s *site) worker(seen *clocktest.Outcomes) *queuey.Producer {
	s.t.Helper()
	w, err := queuey.NewWorker(s.backend, set, &queuey.WorkerConfig{Clock: s.clock, Hooks: seen.Hooks()})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := queuey.Handle(w, func(context.Context, email, queuey.JobContext) error { return nil }); err != nil {
		s.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	s.t.Cleanup(func() { stop(); <-done })
	p, err := queuey.NewProducer(s.t.Context(), s.backend, set, &queuey.ProducerConfig{Clock: s.clock})
	if err != nil {
		s.t.Fatal(err)
	}
	// A job run: the worker starts nothing before it has read the ledger.
	first, err := p.Enqueue(s.t.Context(), email{To: "first"})
	if err != nil {
		s.t.Fatal(err)
	}
	awaitFirst(s.t, seen, first)
	return p
}

// cancellations are the job ids of the cancellations in the ledger of the
// site's set.
func (s *site) cancellations() []string {
	s.t.Helper()
	l, err := s.backend.FollowCancels(s.t.Context(), set.Prefix)
	if err != nil {
		s.t.Fatal(err)
	}
	defer l.Close()
	var ids []string
	for {
		select {
		case body := <-l.Messages():
			if _, rest, ok := strings.Cut(string(body), `"job_id":"`); ok && strings.Contains(string(body), `"op":"cancel"`) {
				id, _, _ := strings.Cut(rest, `"`)
				ids = append(ids, id)
			}
		default:
			return ids
		}
	}
}

// A job that waits an hour is cancelled through the Overview's form,
// with a worker running: the page says so once the worker has confirmed
// it, and when its hour is up the job ends as Cancelled, unrun.
func TestCancelAJobThroughTheForm(t *testing.T) {
	s := newSite(t, nil)
	var seen clocktest.Outcomes
	p := s.worker(&seen)
	id, err := p.EnqueueAfter(t.Context(), email{To: "later"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, page := s.get("/")
	for _, want := range []string{"Cancel a job by id", `action="/ops/jobs/cancel"`, `name="id"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the Overview lacks %s", want)
		}
	}
	code, body := s.post("/jobs/cancel", url.Values{"id": {" " + id + " "}, "csrf": {s.token()}})
	if want := "Job " + id + " is cancelled: it will not run."; code != 200 || !strings.Contains(body, want) {
		t.Fatalf("cancel: %d, want 200 and %q\n%s", code, want, body)
	}
	s.clock.Add(2 * time.Hour)
	if got := awaitFirst(t, &seen, id); len(got) != 1 || got[0] != queuey.Cancelled {
		t.Errorf("the job's outcomes %v, want [cancelled]", got)
	}
}

// A read-only console offers no cancel form and refuses a cancellation;
// so does one whose Authorize refuses Cancel, with its reason. Nothing is
// recorded.
func TestCancelIsRefusedReadOnlyOrUnauthorized(t *testing.T) {
	for name, opts := range map[string]*console.Options{
		"read-only": {ReadOnly: true},
		"unauthorized": {Authorize: func(_ *http.Request, a console.Action) error {
			if a == console.Cancel {
				return errors.New("cancelling is for admins")
			}
			return nil
		}},
	} {
		t.Run(name, func(t *testing.T) {
			s := newSite(t, opts)
			tok := s.token()
			code, body := s.post("/jobs/cancel", url.Values{"id": {"job-1"}, "csrf": {tok}})
			if code != http.StatusForbidden {
				t.Errorf("cancel: %d, want 403", code)
			}
			if name == "read-only" {
				if _, page := s.get("/"); strings.Contains(page, "Cancel a job") {
					t.Error("a read-only console offers to cancel a job")
				}
				if !strings.Contains(body, "cancels nothing") {
					t.Errorf("the refusal does not say the console is read-only:\n%s", body)
				}
			} else if !strings.Contains(body, "cancelling is for admins") {
				t.Errorf("the refusal does not give Authorize's reason:\n%s", body)
			}
			if ids := s.cancellations(); len(ids) != 0 {
				t.Errorf("cancellations recorded: %v, want none", ids)
			}
		})
	}
}

// A cancellation without the form's CSRF token, or with a forged one, is
// refused, and nothing is recorded.
func TestCancelWithoutTheTokenIsRefused(t *testing.T) {
	s := newSite(t, nil)
	s.token()
	for name, form := range map[string]url.Values{
		"missing": {"id": {"job-1"}},
		"forged":  {"id": {"job-1"}, "csrf": {strings.Repeat("A", 43)}},
	} {
		if code, _ := s.post("/jobs/cancel", form); code != http.StatusForbidden {
			t.Errorf("%s token: %d, want 403", name, code)
		}
	}
	if ids := s.cancellations(); len(ids) != 0 {
		t.Errorf("cancellations recorded: %v, want none", ids)
	}
}

// An id that cannot be a job's is refused with 400 and says why; nothing
// is recorded.
func TestCancelOfABadIDSaysWhy(t *testing.T) {
	s := newSite(t, nil)
	tok := s.token()
	for id, want := range map[string]string{
		"  ":                          "give the id of the job to cancel",
		strings.Repeat("x", 256):      "is 256 bytes, over the 255-byte limit",
		"bad\x1b[2Jid":                `job id &#34;bad\\x1b[2Jid&#34; holds the control character`,
		"bad\xffid":                   "is not valid UTF-8",
		"<script>alert(1)</script>\a": "job id &#34;&lt;script&gt;alert(1)&lt;/script&gt;\\\\a&#34; holds the control character",
	} {
		code, body := s.post("/jobs/cancel", url.Values{"id": {id}, "csrf": {tok}})
		if code != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("cancel %q: %d, want 400 and %q\n%s", id, code, want, body)
		}
		if strings.ContainsAny(body, "\x1b\a") || strings.Contains(body, "\xff") || strings.Contains(body, "<script>") {
			t.Errorf("cancel %q: the page carries the id raw", id)
		}
	}
	if ids := s.cancellations(); len(ids) != 0 {
		t.Errorf("cancellations recorded: %v, want none", ids)
	}
}

// When a worker follows the ledger and does not answer before the
// request ends, the page says the cancellation is recorded and how many
// workers had confirmed it (202 Accepted); it is in the ledger.
func TestACancelNotEveryWorkerConfirmedSaysItIsRecorded(t *testing.T) {
	b := memory.New(nil)
	t.Cleanup(func() { _ = b.Close() })
	c, err := console.New(t.Context(), b, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	silent, err := b.FollowCancels(t.Context(), set.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	tok := strings.Repeat("t", 43)
	req := httptest.NewRequestWithContext(ctx, "POST", "/jobs/cancel", strings.NewReader(url.Values{"id": {"job-1"}, "csrf": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "queuey_csrf", Value: tok})
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if want := "cancellation of job job-1 is recorded, but 0 of 1 workers had confirmed it"; rec.Code != http.StatusAccepted || !strings.Contains(rec.Body.String(), want) {
		t.Errorf("cancel: %d, want 202 and %q\n%s", rec.Code, want, rec.Body)
	}
	select {
	case body := <-silent.Messages():
		if !strings.Contains(string(body), `"job_id":"job-1"`) {
			t.Errorf("the ledger's record %s is not job-1's cancellation", body)
		}
	default:
		t.Error("the ledger has no record of the cancellation")
	}
}

// A backend that keeps no ledger of cancellations (a wrapper hides it):
// the Overview offers no cancel form, and a cancellation is refused with
// 501 and why.
func TestCancelOnABackendWithoutALedgerIsNotOffered(t *testing.T) {
	b := memory.New(nil)
	t.Cleanup(func() { _ = b.Close() })
	c, err := console.New(t.Context(), struct{ broker.Backend }{b}, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 || strings.Contains(rec.Body.String(), "Cancel a job") {
		t.Errorf("overview: %d; want 200 and no cancel form", rec.Code)
	}
	tok := strings.Repeat("t", 43)
	req := httptest.NewRequest("POST", "/jobs/cancel", strings.NewReader(url.Values{"id": {"job-1"}, "csrf": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "queuey_csrf", Value: tok})
	rec = httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotImplemented || !strings.Contains(rec.Body.String(), "keeps no ledger of cancellations") {
		t.Errorf("cancel: %d, want 501 and why\n%s", rec.Code, rec.Body)
	}
}
