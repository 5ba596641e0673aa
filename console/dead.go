package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/queuey-go/queuey"
)

// pageSize is how many dead letters a page of the list shows.
const pageSize = 100

// filter is what the dead-letter list is narrowed to.
type filter struct {
	Cause, Kind, ID, Correlation string
}

func filterOf(v url.Values) filter {
	return filter{Cause: strings.TrimSpace(v.Get("cause")), Kind: strings.TrimSpace(v.Get("kind")),
		ID: strings.TrimSpace(v.Get("id")), Correlation: strings.TrimSpace(v.Get("correlation"))}
}

// match reports whether d passes f.
func (f filter) match(d queuey.DeadLetter) bool {
	return (f.Cause == "" || string(d.Cause) == f.Cause || (f.Cause == "other" && d.Cause == "")) &&
		(f.Kind == "" || d.Kind == f.Kind) && (f.ID == "" || d.ID == f.ID) &&
		(f.Correlation == "" || d.CorrelationID == f.Correlation)
}

// query is f as URL parameters.
func (f filter) query() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"cause": f.Cause, "kind": f.Kind, "id": f.ID, "correlation": f.Correlation} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// deadQueueRow is one queue on the dead letters' first page.
type deadQueueRow struct {
	Name string
	Dead int
}

func (c *Console) deadQueues(q *request) error {
	snap, err := c.look(q)
	if err != nil {
		return err
	}
	var rows []deadQueueRow
	for _, d := range snap.Depths(c.set) {
		rows = append(rows, deadQueueRow{Name: d.Queue, Dead: d.Dead})
	}
	return q.render(200, "deadqueues", "Dead letters", rows)
}

// deadListData is one page of a queue's dead letters.
type deadListData struct {
	Queue          string
	Filter         filter
	Causes         []string
	Letters        []queuey.DeadLetter
	Total, Matched int
	Page, Pages    int
	Prev, Next     string // links to the pages around, "" at an end
	Truncated      bool   // the queue holds more than one read takes
}

func (c *Console) deadList(q *request) error {
	name := q.r.PathValue("queue")
	all, err := c.dead.List(q.r.Context(), name)
	if err != nil {
		return err
	}
	f := filterOf(q.r.URL.Query())
	d := deadListData{Queue: name, Filter: f, Total: len(all), Truncated: len(all) >= queuey.ListLimit, Causes: causes}
	var matched []queuey.DeadLetter
	for _, l := range all {
		if f.match(l) {
			matched = append(matched, l)
		}
	}
	d.Matched = len(matched)
	d.Pages = max(1, (len(matched)+pageSize-1)/pageSize)
	d.Page, _ = strconv.Atoi(q.r.URL.Query().Get("page"))
	d.Page = min(max(1, d.Page), d.Pages)
	d.Letters = matched[min(len(matched), (d.Page-1)*pageSize):min(len(matched), d.Page*pageSize)]
	link := func(p int) string {
		v := f.query()
		v.Set("page", strconv.Itoa(p))
		return q.base + "/dead/" + url.PathEscape(name) + "?" + v.Encode()
	}
	if d.Page > 1 {
		d.Prev = link(d.Page - 1)
	}
	if d.Page < d.Pages {
		d.Next = link(d.Page + 1)
	}
	return q.render(200, "deadlist", "Dead letters of "+clean(name), d)
}

// causes are the causes the list filters by ("other": none of them).
var causes = []string{
	string(queuey.CauseExhausted), string(queuey.CauseFatal), string(queuey.CauseDecode), string(queuey.CauseMalformed),
	string(queuey.CauseTooLarge), string(queuey.CauseNoHandler), string(queuey.CauseInvalidDeferral),
	string(queuey.CausePoison), string(queuey.CauseHoldRefused), "other",
}

// shownBytes is how much of a payload the page of one dead letter shows;
// the whole body is a download.
const shownBytes = 256 << 10

// deadShowData is one dead letter, whole.
type deadShowData struct {
	Queue   string
	Letter  queuey.DeadLetter
	Payload string
	Cut     int // bytes of the payload not shown
	Headers [][2]string
	BodyURL string
}

func (c *Console) deadShow(q *request) error {
	name, id := q.r.PathValue("queue"), q.r.PathValue("id")
	l, err := c.dead.Show(q.r.Context(), name, id)
	if err != nil {
		return err
	}
	d := deadShowData{Queue: name, Letter: l, BodyURL: q.base + "/dead/" + url.PathEscape(name) + "/letter/" + url.PathEscape(id) + "/body"}
	d.Payload, d.Cut = pretty(l.Payload)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range l.Headers {
			if !yield(k) {
				return
			}
		}
	}) {
		d.Headers = append(d.Headers, [2]string{k, l.Headers[k]})
	}
	return q.render(200, "deadshow", "Dead letter "+clean(id), d)
}

// pretty is a payload indented for reading, its first shownBytes, and
// how many bytes were left out.
func pretty(p json.RawMessage) (string, int) {
	var b bytes.Buffer
	if len(p) > shownBytes || json.Indent(&b, p, "", "  ") != nil {
		b.Reset()
		b.Write(p)
	}
	if b.Len() > shownBytes {
		return string(b.Bytes()[:shownBytes]), b.Len() - shownBytes
	}
	return b.String(), 0
}

// deadBody downloads a dead letter's body as it is stored.
func (c *Console) deadBody(q *request) error {
	name, id := q.r.PathValue("queue"), q.r.PathValue("id")
	l, err := c.dead.Show(q.r.Context(), name, id)
	if err != nil {
		return err
	}
	q.w.Header().Set("Content-Type", "application/octet-stream")
	q.w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", "dead-letter.json"))
	q.w.WriteHeader(http.StatusOK)
	_, err = q.w.Write(l.Body)
	return err
}
