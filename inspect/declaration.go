package inspect

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
)

// Queue is the queuey.Queue named name (its name within its set) as d
// declares it: its Type, MaxPriority, Transient and MessageTTL. What the
// broker does not hold (Prefetch, Retry, JobTimeout) is left zero. A
// queue queuey cannot have declared so (a stream, an x-max-priority or
// x-message-ttl that is not a number) is an error that says why.
func (d Declaration) Queue(name string) (queuey.Queue, error) {
	q := queuey.Queue{Name: name, Transient: !d.Durable, MaxPriority: queuey.NoPriorities}
	switch d.Type {
	case broker.Classic.String():
		q.Type = queuey.Classic
	case broker.Quorum.String():
		q.Type, q.MaxPriority = queuey.Quorum, 0 // a quorum queue has no x-max-priority: its lane is its top priority
	default:
		return q, fmt.Errorf("queue %q is a %s queue; queuey declares classic and quorum queues only", d.Name, d.Type)
	}
	if v, ok := d.Arguments["x-max-priority"]; ok && q.Type == queuey.Classic {
		n, err := integer(v)
		if err != nil || n < 1 || n > 255 {
			return q, fmt.Errorf("queue %q has x-max-priority %v, which is not a priority of 1..255", d.Name, v)
		}
		q.MaxPriority = int(n)
	}
	if v, ok := d.Arguments["x-message-ttl"]; ok {
		n, err := integer(v)
		if err != nil || n < 1 {
			return q, fmt.Errorf("queue %q has x-message-ttl %v, which is not a positive number of milliseconds", d.Name, v)
		}
		q.MessageTTL = time.Duration(n) * time.Millisecond
	}
	return q, nil
}

// integer is v, a JSON number (Management decodes numbers so), as an
// int64.
func integer(v any) (int64, error) {
	if n, ok := v.(json.Number); ok {
		return n.Int64()
	}
	return 0, fmt.Errorf("not an integer: %v", v)
}
