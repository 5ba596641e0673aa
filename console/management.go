package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Management reaches RabbitMQ's management HTTP API (the
// rabbitmq_management plugin), which tells what a Backend cannot: every
// queue of the virtual host with its unacked messages, consumers and
// type, so the hold queues and delay levels of the set too, those a
// producer alone declared included.
type Management struct {
	// URL is the API's root, as http://127.0.0.1:15672 (no credentials
	// in it: they go in User and Password).
	URL string
	// User and Password are the API's credentials (basic auth). They
	// appear in no page, log line or error.
	User, Password string
	// VHost is the virtual host of the set's queues. Default "/".
	VHost string
	// Client makes the requests. Default http.DefaultClient.
	Client *http.Client
}

// mgmtQueue is the part of a queue's record the console reads.
type mgmtQueue struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Ready     int    `json:"messages_ready"`
	Unacked   int    `json:"messages_unacknowledged"`
	Consumers int    `json:"consumers"`
}

// maxManagementBytes bounds the answer read from the management API.
const maxManagementBytes = 64 << 20

// managementPage is how many queues one request of the management API
// lists at most (its largest page).
const managementPage = 500

// maxFilterBytes bounds the name filter sent to the management API;
// past it the set's common prefix filters instead.
const maxFilterBytes = 4096

// Inspect asks for the queues of the virtual host that are of the set
// (names, and the queues under them: hold queues, lanes) or the shared
// delay levels, managementPage a request: one request per 500 such
// queues, whatever else the virtual host holds (the broker filters by
// name before it answers).
func (m *Management) Inspect(ctx context.Context, names []string) (Snapshot, error) {
	s := Snapshot{Queues: map[string]Facts{}, Complete: true, Limits: []string{
		"RabbitMQ does not tell when the oldest message of a hold queue is due without taking it off the queue: each is due within its delay from now.",
	}}
	vhost := m.VHost
	if vhost == "" {
		vhost = "/"
	}
	client := m.Client
	if client == nil {
		client = http.DefaultClient
	}
	q := url.Values{"columns": {"name,type,messages_ready,messages_unacknowledged,consumers"}, "page_size": {strconv.Itoa(managementPage)}}
	if f := nameFilter(names); f != "" {
		q.Set("name", f)
		q.Set("use_regex", "true")
	}
	for page := 1; ; page++ {
		q.Set("page", strconv.Itoa(page))
		u := strings.TrimRight(m.URL, "/") + "/api/queues/" + url.PathEscape(vhost) + "?" + q.Encode()
		s.Requests++
		p, err := m.get(ctx, client, u)
		if err != nil {
			return s, err
		}
		for _, q := range p.Items {
			s.Queues[q.Name] = Facts{Ready: q.Ready, Unacked: q.Unacked, Consumers: q.Consumers, Type: q.Type}
		}
		if page >= p.PageCount {
			return s, nil
		}
	}
}

// mgmtPage is one page of the management API's queues.
type mgmtPage struct {
	Items     []mgmtQueue `json:"items"`
	PageCount int         `json:"page_count"`
}

// get reads one page of queues at u.
func (m *Management) get(ctx context.Context, client *http.Client, u string) (mgmtPage, error) {
	var p mgmtPage
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return p, fmt.Errorf("management API: %w", err)
	}
	req.SetBasicAuth(m.User, m.Password)
	resp, err := client.Do(req)
	if err != nil {
		return p, fmt.Errorf("management API at %s: %w", redact(m.URL), unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return p, fmt.Errorf("management API at %s: %s", redact(m.URL), resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxManagementBytes)).Decode(&p); err != nil {
		return p, fmt.Errorf("management API at %s: reading the queues: %w", redact(m.URL), err)
	}
	return p, nil
}

// nameFilter is the regular expression (the broker's, PCRE) of the
// queues names, their derived queues (names followed by a dot: hold
// queues, lanes) and the shared delay levels (queuey.wait.*). A filter
// of the names one by one longer than maxFilterBytes is their common
// prefix up to its last dot instead, and "" (no filter) without one.
func nameFilter(names []string) string {
	if len(names) == 0 {
		return ""
	}
	levels := `^queuey\.wait\.`
	// A name under another (a dead-letter queue under its work queue)
	// matches as a derived queue of it.
	roots := map[string]bool{}
	for _, n := range names {
		roots[n] = true
	}
	var alts []string
	for _, n := range names {
		derived := false
		for i := strings.IndexByte(n, '.'); i > 0 && !derived; i = next(n, i) {
			derived = roots[n[:i]]
		}
		if !derived {
			alts = append(alts, regexp.QuoteMeta(n))
		}
	}
	slices.Sort(alts)
	alts = slices.Compact(alts)
	if f := `^(?:` + strings.Join(alts, "|") + `)(?:$|\.)|` + levels; len(f) <= maxFilterBytes {
		return f
	}
	prefix := names[0]
	for _, n := range names[1:] {
		for !strings.HasPrefix(n, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	if i := strings.LastIndexByte(prefix, '.'); i > 0 {
		return `^` + regexp.QuoteMeta(prefix[:i+1]) + `|` + levels
	}
	return ""
}

// next is the index of the dot after the one at i in n, or -1.
func next(n string, i int) int {
	j := strings.IndexByte(n[i+1:], '.')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// redact is u without any user info it carries.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(an unreadable URL)"
	}
	p.User = nil
	return p.String()
}

// unwrapURLError drops the URL that net/http puts in its errors: the
// console names the API itself, without credentials.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}
