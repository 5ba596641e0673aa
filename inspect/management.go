package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/queuey-go/queuey/broker"
)

// Management reaches RabbitMQ's management HTTP API (the
// rabbitmq_management plugin), which tells what a Backend cannot: every
// queue of the virtual host with its unacked messages, consumers and
// type, so the hold queues and delay levels of a set too, those a
// producer alone declared included; and how each queue was declared.
type Management struct {
	// URL is the API's root, as http://127.0.0.1:15672 (no credentials
	// in it: they go in User and Password).
	URL string
	// User and Password are the API's credentials (basic auth). They
	// appear in no error.
	User, Password string
	// VHost is the virtual host of the set's queues. Default "/".
	VHost string
	// Client makes the requests. Default http.DefaultClient.
	Client *http.Client
}

// mgmtQueue is the part of a queue's record Inspect reads.
type mgmtQueue struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Ready     int    `json:"messages_ready"`
	Unacked   int    `json:"messages_unacknowledged"`
	Consumers int    `json:"consumers"`
}

// maxManagementBytes bounds the answer read from the management API.
const maxManagementBytes = 64 << 20

// NoOldestDue is the limit of a look through the management API.
const NoOldestDue = "RabbitMQ does not tell when the oldest message of a hold queue is due without taking it off the queue: each is due within its delay from now."

// managementPage is how many queues one request of the management API
// lists at most (its largest page).
const managementPage = 500

// maxFilterBytes bounds the name filter sent to the management API;
// past it the set's common prefix filters instead.
const maxFilterBytes = 4096

// Inspect asks for the queues of the virtual host that are of names (and
// the queues under them: hold queues, lanes) or the shared delay levels,
// managementPage a request: one request per 500 such queues, whatever
// else the virtual host holds (the broker filters by name before it
// answers). No names: every queue of the virtual host.
func (m *Management) Inspect(ctx context.Context, names []string) (Snapshot, error) {
	s := Snapshot{Queues: map[string]Facts{}, Complete: true, Limits: []string{NoOldestDue}}
	q := url.Values{"columns": {"name,type,messages_ready,messages_unacknowledged,consumers"}, "page_size": {strconv.Itoa(managementPage)}}
	if f := nameFilter(names); f != "" {
		q.Set("name", f)
		q.Set("use_regex", "true")
	}
	for page := 1; ; page++ {
		q.Set("page", strconv.Itoa(page))
		s.Requests++
		var p mgmtPage
		if err := m.get(ctx, "/api/queues/"+url.PathEscape(m.vhost())+"?"+q.Encode(), &p); err != nil {
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

func (m *Management) vhost() string {
	if m.VHost == "" {
		return "/"
	}
	return m.VHost
}

// errNotFound is the API's 404.
var errNotFound = errors.New("404 Not Found")

// get reads the API's answer at path into v.
func (m *Management) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(m.URL, "/")+path, nil)
	if err != nil {
		return fmt.Errorf("management API at %s: %w", Redact(m.URL), unwrapURLError(err))
	}
	req.SetBasicAuth(m.User, m.Password)
	client := m.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("management API at %s: %w", Redact(m.URL), unwrapURLError(err))
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return fmt.Errorf("management API at %s: %w", Redact(m.URL), errNotFound)
	default:
		return fmt.Errorf("management API at %s: %s", Redact(m.URL), resp.Status)
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxManagementBytes))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("management API at %s: reading its answer: %w", Redact(m.URL), err)
	}
	return nil
}

// Declaration is how a queue was declared, as the management API tells.
type Declaration struct {
	// Name is the queue's broker name.
	Name string `json:"name"`
	// Type is "classic", "quorum" or "stream".
	Type string `json:"type"`
	// Durable says the queue survives a broker restart.
	Durable bool `json:"durable"`
	// Arguments are its x-arguments: numbers are json.Number.
	Arguments map[string]any `json:"arguments"`
}

// Declaration asks how the queue named (its broker name) was declared:
// one request. A queue the virtual host lacks is broker.ErrNoQueue.
func (m *Management) Declaration(ctx context.Context, name string) (Declaration, error) {
	var d Declaration
	err := m.get(ctx, "/api/queues/"+url.PathEscape(m.vhost())+"/"+url.PathEscape(name)+"?columns=name,type,durable,arguments", &d)
	if errors.Is(err, errNotFound) {
		return d, fmt.Errorf("%w: %q in virtual host %q", broker.ErrNoQueue, name, m.vhost())
	}
	return d, err
}

// Redact is u without any user info it carries.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(an unreadable URL)"
	}
	p.User = nil
	return p.String()
}

// unwrapURLError drops the URL that net/http puts in its errors: the
// errors name the API themselves, without credentials.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}
