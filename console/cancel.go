package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker"
)

// cancelTimeout bounds how long a cancellation waits for every worker of
// the set to confirm it; past it, the page says how many had.
const cancelTimeout = 30 * time.Second

// canCancel reports whether the console's backend keeps the ledger of
// cancellations a cancellation needs (both of queuey's backends do).
func (c *Console) canCancel() bool {
	_, ledger := c.backend.(broker.CancelLedger)
	_, bc := c.backend.(broker.Broadcaster)
	return ledger && bc
}

// cancelJob cancels the job whose id is the form's field id, in the
// console's queue set, and waits for the workers to confirm it.
func (c *Console) cancelJob(q *request) error {
	id := strings.TrimSpace(q.r.PostFormValue("id"))
	if id == "" {
		return fmt.Errorf("%w: give the id of the job to cancel", errBadInput)
	}
	if !c.canCancel() {
		q.fail(http.StatusNotImplemented, fmt.Sprintf("the console's backend (%s) keeps no ledger of cancellations: it cannot cancel a job", c.backend.Name()))
		return nil
	}
	ctx, cancel := context.WithTimeout(q.r.Context(), cancelTimeout)
	defer cancel()
	err := queuey.CancelJob(ctx, c.backend, c.set.Prefix, id)
	var ce *queuey.CancelError
	switch {
	case errors.As(err, &ce):
		text := err.Error() + ". It stands: each of the others applies it as it reads the ledger."
		return q.render(http.StatusAccepted, "message", "Cancellation recorded", message{Heading: "Cancellation recorded", Text: text, Back: q.base + "/"})
	case err != nil:
		return err // it names the job
	}
	text := fmt.Sprintf("Job %s is cancelled: it will not run. If it is running now, its handler is told to stop.", id)
	return q.render(http.StatusOK, "message", "Cancelled", message{Heading: "Cancelled", Text: text, Back: q.base + "/"})
}
