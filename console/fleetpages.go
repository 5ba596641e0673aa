package console

import (
	"fmt"
	"github.com/queuey-go/queuey"
	"net/url"
	"strings"
	"time"
)

func (c *Console) schedules(q *request) error {
	return q.render(200, "schedules", "Schedules", c.roster.view(q.r.Context()))
}

func (c *Console) workers(q *request) error {
	return q.render(200, "workers", "Workers", c.roster.view(q.r.Context()))
}

// knownQueue is the queue a pause or resume names, if it is the set's.
func (c *Console) knownQueue(q *request) (string, error) {
	name := q.r.PathValue("queue")
	for _, qu := range c.set.Queues {
		if qu.Name == name {
			return name, nil
		}
	}
	return "", fmt.Errorf("%w: no queue %q in the set", queuey.ErrUnknownQueue, clean(name))
}

func (c *Console) pause(q *request) error {
	name, err := c.knownQueue(q)
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(strings.TrimSpace(q.r.PostFormValue("for")))
	if err != nil || d <= 0 {
		return fmt.Errorf("%w: pause for %q: give a positive duration such as 5m", errBadInput, q.r.PostFormValue("for"))
	}
	until := c.clock.Now().Add(d)
	n, err := c.roster.command(q.r.Context(), command{Op: opPause, Queue: name, Until: until})
	if err != nil {
		return err
	}
	return q.render(200, "message", "Paused", message{Heading: "Paused",
		Text: fmt.Sprintf("Asked %d workers to pause %s until %s.", n, name, stamp(until)), Back: q.base + "/"})
}

func (c *Console) resume(q *request) error {
	name, err := c.knownQueue(q)
	if err != nil {
		return err
	}
	n, err := c.roster.command(q.r.Context(), command{Op: opResume, Queue: name})
	if err != nil {
		return err
	}
	return q.render(200, "message", "Resumed", message{Heading: "Resumed",
		Text: fmt.Sprintf("Asked %d workers to resume %s.", n, name), Back: q.base + "/" + url.PathEscape("")})
}
