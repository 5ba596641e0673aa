package console_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/queuey-go/queuey/console"
)

func TestTenThousandDeadLettersShowAPageOfThem(t *testing.T) {
	s := newSite(t, nil)
	for range 10_000 {
		s.deadLetter("emails", "send", "fatal error: no", `{}`)
	}
	code, body := s.get("/dead/emails")
	if code != 200 {
		t.Fatalf("list: %d", code)
	}
	if n := strings.Count(body, `<tr data-id=`); n != 100 {
		t.Errorf("%d rows on the first page, want 100", n)
	}
	if !strings.Contains(body, "page 1 of 100") || !strings.Contains(body, ">10000</span> of 10000") {
		t.Error("the page does not say how many there are")
	}
}

func TestAFilterThatMatchesNothingSaysSo(t *testing.T) {
	s := newSite(t, nil)
	s.deadLetter("emails", "send", "fatal error: no", `{}`)
	_, body := s.get("/dead/emails?kind=nothing&cause=poison")
	if !strings.Contains(body, "No dead letter matches") || strings.Contains(body, "<tr data-id=") {
		t.Errorf("a filter matching nothing:\n%s", body)
	}
}

func TestATenMegabytePayloadShowsItsStart(t *testing.T) {
	s := newSite(t, nil)
	id := s.deadLetter("emails", "send", "fatal error: no", `{"blob":"`+strings.Repeat("x", 10<<20)+`"}`)
	code, body := s.get("/dead/emails/letter/" + id)
	if code != 200 || !strings.Contains(body, "more bytes are not shown") || len(body) > 1<<20 {
		t.Errorf("show: %d, %d bytes", code, len(body))
	}
}

func TestReadOnlyRefusesActions(t *testing.T) {
	s := newSite(t, &console.Options{ReadOnly: true})
	id := s.deadLetter("emails", "send", "fatal error: no", `{}`)
	_, page := s.get("/dead/emails")
	if strings.Contains(page, "Replay…") {
		t.Error("a read-only console offers to replay")
	}
	tok := s.token()
	if code, _ := s.post("/dead/emails/replay", url.Values{"ids": {id}, "csrf": {tok}, "confirm": {"yes"}}); code != http.StatusForbidden {
		t.Errorf("replay on a read-only console: %d, want 403", code)
	}
}

func TestAuthorizeIsAskedForEveryPage(t *testing.T) {
	s := newSite(t, &console.Options{Authorize: func(r *http.Request, a console.Action) error {
		if a == console.ViewDeadLetter {
			return errors.New("payloads are for admins")
		}
		return nil
	}})
	id := s.deadLetter("emails", "send", "fatal error: no", `{}`)
	if code, _ := s.get("/dead/emails"); code != 200 {
		t.Errorf("list: %d", code)
	}
	if code, body := s.get("/dead/emails/letter/" + id); code != http.StatusForbidden || !strings.Contains(body, "payloads are for admins") {
		t.Errorf("show refused: %d", code)
	}
}

func TestDeleteAllThatMatchKeepsTheOthers(t *testing.T) {
	s := newSite(t, nil)
	s.deadLetter("emails", "a", "fatal error: no", `{}`)
	s.deadLetter("emails", "b", "fatal error: no", `{}`)
	s.deadLetter("emails", "a", "fatal error: no", `{}`)
	tok := s.token()
	code, body := s.post("/dead/emails/delete", url.Values{"scope": {"matching"}, "kind": {"a"}, "csrf": {tok}})
	if code != 200 || !strings.Contains(body, `id="confirm-count">2<`) {
		t.Fatalf("confirmation: %d\n%s", code, body)
	}
	if code, _ := s.post("/dead/emails/delete", url.Values{"scope": {"matching"}, "kind": {"a"}, "csrf": {tok}, "confirm": {"yes"}}); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	left := s.backend.DeadLetters(s.brokerName("emails"))
	if len(left) != 1 || left[0].Type != "b" {
		t.Errorf("left %v, want the one of kind b", left)
	}
}

func TestPauseOfAnUnknownQueueIsNotFound(t *testing.T) {
	s := newSite(t, nil)
	tok := s.token()
	if code, _ := s.post("/queues/nope/pause", url.Values{"for": {"5m"}, "csrf": {tok}}); code != http.StatusNotFound {
		t.Errorf("pause of an unknown queue: %d, want 404", code)
	}
	if code, _ := s.post("/queues/emails/pause", url.Values{"for": {"soon"}, "csrf": {tok}}); code != http.StatusBadRequest {
		t.Errorf("pause for a bad duration: %d, want 400", code)
	}
}
