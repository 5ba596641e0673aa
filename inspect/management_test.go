package inspect_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/inspect"
)

// fakeAPI answers as RabbitMQ's management API does for the paths given,
// to the credentials ops/s3cret, and counts the requests.
func fakeAPI(t *testing.T, answers map[string]string) (*inspect.Management, *int) {
	t.Helper()
	n := new(int)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*n++
		if u, p, _ := r.BasicAuth(); u != "ops" || p != "s3cret" {
			http.Error(w, "not authorised", http.StatusUnauthorized)
			return
		}
		body, ok := answers[r.URL.EscapedPath()]
		if !ok {
			http.Error(w, `{"error":"Object Not Found"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return &inspect.Management{URL: srv.URL, User: "ops", Password: "s3cret", VHost: "prod/eu"}, n
}

func TestTheManagementAPIShowsTheWholeVirtualHostInOneRequest(t *testing.T) {
	m, n := fakeAPI(t, map[string]string{"/api/queues/prod%2Feu": `{"page_count":1,"items":[
		{"name":"app.emails","type":"classic","messages_ready":3,"messages_unacknowledged":2,"consumers":1},
		{"name":"app.emails.dead","type":"classic","messages_ready":4,"messages_unacknowledged":0,"consumers":0},
		{"name":"app.emails.deferred.30000","type":"classic","messages_ready":5,"messages_unacknowledged":0,"consumers":0},
		{"name":"app.emails.deferred.1000","type":"classic","messages_ready":1,"messages_unacknowledged":0,"consumers":0},
		{"name":"app.api","type":"quorum","messages_ready":7,"messages_unacknowledged":0,"consumers":2}]}`})
	snap, err := m.Inspect(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if *n != 1 || snap.Requests != 1 || !snap.Complete {
		t.Errorf("requests, Requests, Complete = %d, %d, %v; want 1, 1, true", *n, snap.Requests, snap.Complete)
	}
	want := []inspect.Depth{
		{Queue: "emails", BrokerName: "app.emails", Type: "classic", Ready: 3, Unacked: 2, Consumers: 1, Held: 6, Dead: 4},
		{Queue: "api", BrokerName: "app.api", Type: "quorum", Ready: 7, Consumers: 2, Held: inspect.Unknown},
	}
	if diff := cmp.Diff(want, snap.Depths(set)); diff != "" {
		t.Errorf("Depths (-want +got):\n%s", diff)
	}
	if got := snap.Holds("app.emails"); len(got) != 2 || got[0].Name != "app.emails.deferred.1000" || got[1].Count != 5 {
		t.Errorf("Holds = %+v, want the 1 s hold first, then the 30 s one with 5", got)
	}
}

func TestTheManagementAPIsRefusalNamesNoCredential(t *testing.T) {
	m, _ := fakeAPI(t, nil)
	m.Password = "wrong-password"
	_, err := m.Inspect(t.Context(), nil)
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "wrong-password") {
		t.Errorf("Inspect with a wrong password: got %v, want a 401 that does not show the password", err)
	}
}

func TestADeclarationIsReadFromTheManagementAPI(t *testing.T) {
	m, n := fakeAPI(t, map[string]string{
		"/api/queues/prod%2Feu/app.emails": `{"name":"app.emails","type":"classic","durable":false,"arguments":{"x-max-priority":5,"x-message-ttl":60000}}`,
	})
	d, err := m.Declaration(t.Context(), "app.emails")
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.Queue("emails")
	if err != nil {
		t.Fatal(err)
	}
	want := queuey.Queue{Name: "emails", Type: queuey.Classic, MaxPriority: 5, Transient: true, MessageTTL: 60_000_000_000}
	if diff := cmp.Diff(want, q); diff != "" || *n != 1 {
		t.Errorf("Queue after %d requests (-want +got):\n%s", *n, diff)
	}
	if _, err := m.Declaration(t.Context(), "app.nothing"); !errors.Is(err, broker.ErrNoQueue) {
		t.Errorf("Declaration of a missing queue: got %v, want broker.ErrNoQueue", err)
	}
}
