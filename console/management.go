package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// Inspect asks for every queue of the virtual host in one request.
func (m *Management) Inspect(ctx context.Context, _ []string) (Snapshot, error) {
	s := Snapshot{Queues: map[string]Facts{}, Complete: true, Requests: 1, Limits: []string{
		"RabbitMQ does not tell when the oldest message of a hold queue is due without taking it off the queue: each is due within its delay from now.",
	}}
	vhost := m.VHost
	if vhost == "" {
		vhost = "/"
	}
	u := strings.TrimRight(m.URL, "/") + "/api/queues/" + url.PathEscape(vhost) +
		"?columns=name,type,messages_ready,messages_unacknowledged,consumers"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return s, fmt.Errorf("management API: %w", err)
	}
	req.SetBasicAuth(m.User, m.Password)
	client := m.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return s, fmt.Errorf("management API at %s: %w", redact(m.URL), unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("management API at %s: %s", redact(m.URL), resp.Status)
	}
	var qs []mgmtQueue
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxManagementBytes)).Decode(&qs); err != nil {
		return s, fmt.Errorf("management API at %s: reading the queues: %w", redact(m.URL), err)
	}
	for _, q := range qs {
		s.Queues[q.Name] = Facts{Ready: q.Ready, Unacked: q.Unacked, Consumers: q.Consumers, Type: q.Type}
	}
	return s, nil
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
