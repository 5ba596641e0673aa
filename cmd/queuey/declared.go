package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
	"github.com/queuey-go/queuey/inspect"
)

// declared is how the commands learn a queue's declaration: from RabbitMQ's
// management API, which tells each queue's type, priorities, TTL and
// durability; and from the flags -type, -max-priority, -transient and
// -message-ttl, which say it where the API cannot be read (AMQP's passive
// declare tells only that a queue exists) and override what it tells.
type declared struct {
	typ         string
	maxPriority int
	transient   bool
	messageTTL  time.Duration
	management  string
	given       map[string]bool // the flags given on the command line
}

func (d *declared) register(fs *flag.FlagSet) {
	fs.StringVar(&d.management, "management", "http://127.0.0.1:15672",
		"RabbitMQ's management API, which tells how each queue was declared (the AMQP URL's credentials are used); \"off\" for none")
	fs.StringVar(&d.typ, "type", "", "override the queue's type: classic or quorum (default: the broker's; without the management API, classic)")
	fs.IntVar(&d.maxPriority, "max-priority", 0,
		"override the queue's max priority: 0 for the library default (10), -1 for none, else 1..255 (default: the broker's x-max-priority; without the management API, 0)")
	fs.BoolVar(&d.transient, "transient", false, "override: the queue is transient, not durable (default: as the broker declared it; without the management API, durable)")
	fs.DurationVar(&d.messageTTL, "message-ttl", 0, "override the queue's message TTL (default: the broker's x-message-ttl; without the management API, none)")
}

// check reports a bad flag, and notes which were given.
func (d *declared) check(fs *flag.FlagSet) error {
	d.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { d.given[f.Name] = true })
	if d.typ != "" && d.typ != broker.Classic.String() && d.typ != broker.Quorum.String() {
		return fmt.Errorf("-type %q is neither classic nor quorum", d.typ)
	}
	if d.maxPriority < queuey.NoPriorities || d.maxPriority > 255 {
		return fmt.Errorf("-max-priority %d is outside -1..255", d.maxPriority)
	}
	if d.messageTTL < 0 {
		return fmt.Errorf("-message-ttl %v is negative", d.messageTTL)
	}
	return nil
}

// managementTimeout bounds a request to the management API.
const managementTimeout = 10 * time.Second

// api is the management API -management names, with the credentials and
// virtual host of amqpURL; nil for "off".
func (d *declared) api(amqpURL string) *inspect.Management {
	if d.management == "off" {
		return nil
	}
	// Without keep-alives, a command leaves no connection (nor its
	// goroutines) behind; the console asks once a refresh at most.
	client := &http.Client{Timeout: managementTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	m := &inspect.Management{URL: d.management, User: "guest", Password: "guest", Client: client}
	if u, err := url.Parse(amqpURL); err == nil {
		if u.User != nil {
			m.User = u.User.Username()
			m.Password, _ = u.User.Password()
		}
		if v := strings.TrimPrefix(u.Path, "/"); v != "" {
			m.VHost, _ = url.PathUnescape(v)
		}
	}
	return m
}

// queue is the queue named (within its set, of prefix) as m says the
// broker declared it, with the flags given over it. When m is nil or
// cannot be read, the flags and the library's defaults say it all, and
// unknown says why the declaration is not known. A declaration queuey
// cannot have made (a stream) is an error.
func (d *declared) queue(ctx context.Context, m *inspect.Management, prefix, name string) (q queuey.Queue, unknown string, err error) {
	q = queuey.Queue{Name: name}
	switch {
	case m == nil:
		unknown = "without the management API (-management off), the command knows only what the flags say"
	default:
		decl, err := m.Declaration(ctx, broker.QueueName(prefix, name))
		if err != nil {
			unknown = fmt.Sprintf("the queue's declaration could not be read (%v), so the command knows only what the flags say", err)
			break
		}
		if q, err = decl.Queue(name); err != nil {
			return q, "", err
		}
	}
	d.override(&q)
	return q, unknown, nil
}

// override puts the flags given into q.
func (d *declared) override(q *queuey.Queue) {
	if d.given["type"] {
		q.Type = queuey.Classic
		if d.typ == broker.Quorum.String() {
			q.Type = queuey.Quorum
		}
	}
	if d.given["max-priority"] {
		q.MaxPriority = d.maxPriority
	}
	if d.given["transient"] {
		q.Transient = d.transient
	}
	if d.given["message-ttl"] {
		q.MessageTTL = d.messageTTL
	}
}

// explain adds to err, a declaration of work (the work queue's broker
// name, declared as q) that the broker refused, what can fix it: the flag
// that says the argument the broker named, or, when that flag was given
// over what the broker tells, leaving it out. unknown is why the
// declaration was not read from the broker ("" when it was).
func (d *declared) explain(err error, work string, q queuey.Queue, unknown string) error {
	var ie *broker.InequivalentError
	if !errors.As(err, &ie) {
		return err
	}
	if ie.Queue != work {
		return fmt.Errorf("%w\nnothing was changed; %s is not declared as queuey declares the queues of %s, and no flag of this command changes that", err, ie.Queue, work)
	}
	flagName, give := argFlag(ie.Arg, q)
	switch {
	case flagName == "":
		return fmt.Errorf("%w\nnothing was changed; %s was declared otherwise than queuey declares a queue, and no flag of this command changes that", err, work)
	case d.given[flagName] && unknown == "":
		return fmt.Errorf("%w\nnothing was changed; leave out -%s: the broker's declaration of the queue says otherwise", err, flagName)
	case unknown != "":
		return fmt.Errorf("%w\nnothing was changed; %s: give %s", err, unknown, give)
	}
	return fmt.Errorf("%w\nnothing was changed; give %s", err, give)
}

// argFlag is the flag that sets the declaration's argument arg, and what
// to give, q being what was declared; "" for an argument no flag sets.
func argFlag(arg string, q queuey.Queue) (flagName, give string) {
	switch arg {
	case "durable":
		if q.Transient {
			return "transient", "-transient=false (the queue is durable)"
		}
		return "transient", "-transient (the queue is not durable)"
	case "x-max-priority":
		return "max-priority", "-max-priority with the queue's x-max-priority, which the broker's answer above names (-1 for a queue without priorities)"
	case "x-message-ttl":
		return "message-ttl", "-message-ttl with the queue's x-message-ttl, which the broker's answer above names in milliseconds (as -message-ttl 60000ms)"
	case "x-queue-type":
		if q.Type == queuey.Quorum {
			return "type", "-type classic"
		}
		return "type", "-type quorum (a queue of another type, a stream, cannot be read)"
	}
	return "", ""
}
