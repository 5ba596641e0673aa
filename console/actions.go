package console

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/queuey-go/queuey"
)

// selection is what a replay or a delete acts on: the dead letters ticked
// (IDs), or every one the filter matches (Matching).
type selection struct {
	IDs      []string
	Matching bool
	Filter   filter
}

// selectionOf reads a replay's or a delete's form.
func selectionOf(q *request) (selection, error) {
	s := selection{Filter: filterOf(q.r.PostForm), Matching: q.r.PostFormValue("scope") == "matching"}
	for _, id := range q.r.PostForm["ids"] {
		if id = strings.TrimSpace(id); id != "" {
			s.IDs = append(s.IDs, id)
		}
	}
	if !s.Matching && len(s.IDs) == 0 {
		return s, fmt.Errorf("%w: tick the dead letters to act on, or choose all that match the filter", errBadInput)
	}
	return s, nil
}

// pick is the selection as a dead-letter tool's select func.
func (s selection) pick() func(queuey.DeadLetter) bool {
	if s.Matching {
		return s.Filter.match
	}
	return queuey.ByID(s.IDs...)
}

// confirmData is the page that asks before a replay or a delete.
type confirmData struct {
	Queue, Verb, Action string
	Count               int
	Selection           selection
	After               string
	Fields              [][2]string // the form's fields, sent again with confirm=yes
	Back                string
}

// confirm asks before verb acts on what s selects, unless the form says
// it was asked.
func (c *Console) confirm(q *request, verb, action string, s selection) (bool, error) {
	if q.r.PostFormValue("confirm") == "yes" {
		return true, nil
	}
	name := q.r.PathValue("queue")
	all, err := c.dead.List(q.r.Context(), name)
	if err != nil {
		return false, err
	}
	d := confirmData{Queue: name, Verb: verb, Action: action, Selection: s, After: q.r.PostFormValue("after"),
		Back: q.base + "/dead/" + url.PathEscape(name) + "?" + s.Filter.query().Encode()}
	for _, l := range all {
		if !l.Malformed || verb == "delete" {
			if s.pick()(l) {
				d.Count++
			}
		}
	}
	for k, vs := range q.r.PostForm {
		if k != "csrf" && k != "confirm" {
			for _, v := range vs {
				d.Fields = append(d.Fields, [2]string{k, v})
			}
		}
	}
	return false, q.render(200, "confirm", "Confirm "+verb, d)
}

func (c *Console) deadReplay(q *request) error {
	s, err := selectionOf(q)
	if err != nil {
		return err
	}
	var after time.Duration
	if a := strings.TrimSpace(q.r.PostFormValue("after")); a != "" {
		if after, err = time.ParseDuration(a); err != nil || after < 0 {
			return fmt.Errorf("%w: replay after %q: give a duration such as 30s or 5m", errBadInput, a)
		}
	}
	if ok, err := c.confirm(q, "replay", "replay", s); !ok || err != nil {
		return err
	}
	name := q.r.PathValue("queue")
	n, err := c.dead.Replay(q.r.Context(), name, queuey.ReplayOptions{Select: s.pick(), After: after})
	if err != nil {
		return fmt.Errorf("replayed %d, then: %w", n, err)
	}
	text := fmt.Sprintf("Replayed %d dead letters of %s.", n, name)
	if after > 0 {
		text = fmt.Sprintf("Replayed %d dead letters of %s; they run in %v.", n, name, after)
	}
	return q.render(200, "message", "Replayed", message{Heading: "Replayed", Text: text, Back: q.base + "/dead/" + url.PathEscape(name)})
}

func (c *Console) deadDelete(q *request) error {
	s, err := selectionOf(q)
	if err != nil {
		return err
	}
	if ok, err := c.confirm(q, "delete", "delete", s); !ok || err != nil {
		return err
	}
	name := q.r.PathValue("queue")
	n, err := c.dead.Delete(q.r.Context(), name, s.pick())
	if err != nil {
		return fmt.Errorf("deleted %d, then: %w", n, err)
	}
	return q.render(200, "message", "Deleted", message{Heading: "Deleted", Text: fmt.Sprintf("Deleted %d dead letters of %s.", n, name), Back: q.base + "/dead/" + url.PathEscape(name)})
}
