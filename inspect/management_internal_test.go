package inspect

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fakeManagement serves /api/queues/{vhost} as RabbitMQ's management API
// does for a paged, filtered query, over queues.
func fakeManagement(t *testing.T, queues []string) (*httptest.Server, *[]string) {
	t.Helper()
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RawQuery)
		if u, p, _ := r.BasicAuth(); u != "guest" || p != "secret" {
			http.Error(w, "401", http.StatusUnauthorized)
			return
		}
		q := r.URL.Query()
		match := func(string) bool { return true }
		if f := q.Get("name"); f != "" {
			if q.Get("use_regex") != "true" {
				t.Errorf("a name filter without use_regex: %q", f)
			}
			re := regexp.MustCompile(f)
			match = re.MatchString
		}
		var hits []map[string]any
		for _, n := range queues {
			if match(n) {
				hits = append(hits, map[string]any{"name": n, "type": "classic", "messages_ready": len(n), "messages_unacknowledged": 1, "consumers": 2})
			}
		}
		page, _ := strconv.Atoi(q.Get("page"))
		size, _ := strconv.Atoi(q.Get("page_size"))
		if page < 1 || size < 1 || size > 500 {
			http.Error(w, "bad page", http.StatusBadRequest)
			return
		}
		from, to := min((page-1)*size, len(hits)), min(page*size, len(hits))
		_ = json.NewEncoder(w).Encode(map[string]any{"items": hits[from:to], "page": page, "page_size": size,
			"page_count": (len(hits) + size - 1) / size, "filtered_count": len(hits)})
	}))
	t.Cleanup(srv.Close)
	return srv, &asked
}

// The management API is asked for the set's queues alone (theirs, their
// hold queues, the delay levels), a page of 500 at a time, whatever else
// the virtual host holds.
func TestManagementAsksForTheSetsQueuesAPageAtATime(t *testing.T) {
	var all []string
	for i := range 3000 {
		all = append(all, fmt.Sprintf("other.q%d", i)) // another program's
	}
	var names []string
	for i := range 200 {
		b := fmt.Sprintf("app.q%d", i)
		names = append(names, b, b+".dead", b+".suspects")
		all = append(all, b, b+".dead", b+".deferred.30000")
	}
	all = append(all, "queuey.wait.00", "queuey.wait.orphans", "app.q1x", "xapp.q1")
	srv, asked := fakeManagement(t, all)
	m := &Management{URL: srv.URL, User: "guest", Password: "secret"}
	snap, err := m.Inspect(t.Context(), names)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3*200 + 2; len(snap.Queues) != want {
		t.Errorf("%d queues seen, want %d (the set's, their holds, the levels)", len(snap.Queues), want)
	}
	for _, n := range []string{"app.q7", "app.q7.dead", "app.q7.deferred.30000", "queuey.wait.orphans"} {
		if f, ok := snap.Queues[n]; !ok || f.Ready != len(n) || f.Unacked != 1 || f.Consumers != 2 {
			t.Errorf("%s: %+v, %t", n, f, ok)
		}
	}
	for _, n := range []string{"other.q1", "app.q1x", "xapp.q1"} {
		if _, ok := snap.Queues[n]; ok {
			t.Errorf("%s, not of the set, was listed", n)
		}
	}
	if snap.Requests != 2 || len(*asked) != 2 {
		t.Errorf("%d requests (%d made), want 2 pages of 500", snap.Requests, len(*asked))
	}
	for _, q := range *asked {
		if strings.Contains(q, "secret") {
			t.Errorf("a request carries the password in its query: %s", q)
		}
	}
}

// A set too large for a filter of its names one by one is filtered by
// their common prefix.
func TestManagementFiltersALargeSetByItsPrefix(t *testing.T) {
	var names, all []string
	for i := range 5000 {
		b := fmt.Sprintf("big.queue-%d", i)
		names = append(names, b, b+".dead")
		all = append(all, b)
	}
	all = append(all, "other.x", "bigger.y")
	srv, asked := fakeManagement(t, all)
	snap, err := (&Management{URL: srv.URL, User: "guest", Password: "secret"}).Inspect(t.Context(), names)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Queues) != 5000 || snap.Requests != 10 {
		t.Errorf("%d queues in %d requests, want 5000 in 10", len(snap.Queues), snap.Requests)
	}
	if len((*asked)[0]) > 2*maxFilterBytes {
		t.Errorf("the query is %d bytes long", len((*asked)[0]))
	}
	if f := nameFilter([]string{"a", "b"}); !regexp.MustCompile(f).MatchString("a.deferred.1000") || regexp.MustCompile(f).MatchString("ab") {
		t.Errorf("filter %q", f)
	}
}
