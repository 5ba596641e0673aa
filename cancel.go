package queuey

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/queuey-go/queuey/broker"
)

// ErrJobCancelled is the cause (context.Cause) of a running job's ctx when
// its job is cancelled (Producer.Cancel): the handler decides what to do.
// If it then returns an error, any error, the job ends as Cancelled; if it
// returns nil, it succeeded.
var ErrJobCancelled = errors.New("queuey: the job was cancelled")

// ErrCancelUnconfirmed: Producer.Cancel recorded the cancellation, but
// not every worker that follows the ledger said it had applied it before
// the call's ctx ended. Those that did will not run the job; the others
// apply it as they read the ledger. It is a *CancelError.
var ErrCancelUnconfirmed = errors.New("queuey: the cancellation is recorded, but not every worker has confirmed it")

// CancelError says how far a cancellation came when its ctx ended: it is
// recorded in the ledger, and Answered of Workers workers had applied it.
// It matches ErrCancelUnconfirmed and the ctx's error.
type CancelError struct {
	JobID             string
	Answered, Workers int
	Err               error // the ctx's
}

// Error says which job, and how many workers had answered.
func (e *CancelError) Error() string {
	return fmt.Sprintf("queuey: cancellation of job %s is recorded, but %d of %d workers had confirmed it: %v", e.JobID, e.Answered, e.Workers, e.Err)
}

// Is reports target == ErrCancelUnconfirmed.
func (e *CancelError) Is(target error) bool { return target == ErrCancelUnconfirmed }

// Unwrap is the ctx's error.
func (e *CancelError) Unwrap() error { return e.Err }

// MaxJobIDBytes is the longest job id: an AMQP short string.
const MaxJobIDBytes = 255

// cancelRepoll is how often Cancel counts the ledger's followers again
// while it waits for their answers: one that went away (its connection
// lost) no longer counts.
const cancelRepoll = 250 * time.Millisecond

// Cancel cancels the job whose id is jobID (ARCHITECTURE.md §1,
// "Cancellation"): if it has not run yet (it is ready, or waits in a hold
// for a deferral, a retry or an EnqueueAfter), it never runs once Cancel
// has returned nil; it ends as Cancelled when a worker meets it. If it is
// running, its ctx is cancelled with the cause ErrJobCancelled.
//
// Cancel records the cancellation in the broker's ledger, then waits
// until every worker of the queue set that follows the ledger (every
// queuey worker of the set) has applied it. If ctx ends first, it returns
// a *CancelError (ErrCancelUnconfirmed): the cancellation stands, and is
// applied by each worker as it reads the ledger. A job id that is not (or
// no longer) a job's is no error: the ledger keeps the cancellation for
// broker.MaxCancelKeep or until its job arrives. The backend must be a
// broker.CancelLedger and a broker.Broadcaster (both backends of queuey
// are).
func (p *Producer) Cancel(ctx context.Context, jobID string) error {
	return cancelJob(ctx, p.backend, p.set.prefix, p.clock.Now(), jobID)
}

// CancelJob is Producer.Cancel for the queue set whose prefix is prefix,
// without a producer (the command line's), stamped with the real clock.
func CancelJob(ctx context.Context, backend broker.Backend, prefix, jobID string) error {
	if backend == nil {
		return fmt.Errorf("%w: nil backend", ErrInvalidQueue)
	}
	return cancelJob(ctx, backend, prefix, time.Now(), jobID)
}

// cancelJob records the cancellation of jobID at now and waits for the
// answers.
func cancelJob(ctx context.Context, backend broker.Backend, prefix string, now time.Time, jobID string) error {
	if err := CheckJobID(jobID); err != nil {
		return err
	}
	ledger, bc, err := cancelLedger(backend)
	if err != nil {
		return err
	}
	answers, err := bc.Listen(ctx, broker.CancelAnswersTopic(prefix))
	if err != nil {
		return fmt.Errorf("queuey: cancel job %s: listen for the workers' answers: %w", jobID, err)
	}
	defer answers.Close()
	rec := cancelRecord{Op: opCancel, JobID: jobID, At: now.UnixMilli(), Until: now.Add(broker.MaxCancelKeep).UnixMilli(), Ask: nonce()}
	if err := appendRecord(ctx, ledger, prefix, rec); err != nil {
		return fmt.Errorf("queuey: cancel job %s: %w", jobID, err)
	}
	return awaitAnswers(ctx, ledger, prefix, answers, rec)
}

// awaitAnswers waits until as many followers of the ledger as there are
// now have answered rec, counting them again every cancelRepoll.
func awaitAnswers(ctx context.Context, ledger broker.CancelLedger, prefix string, answers broker.Listener, rec cancelRecord) error {
	answered := map[string]bool{}
	repoll := time.NewTicker(cancelRepoll)
	defer repoll.Stop()
	for {
		n, err := ledger.CancelFollowers(ctx, prefix)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("queuey: cancel job %s: count the ledger's followers: %w", rec.JobID, err)
		}
		if err == nil && len(answered) >= n {
			return nil
		}
		select {
		case body, ok := <-answers.Messages():
			if !ok {
				return fmt.Errorf("queuey: cancel job %s: the workers' answers ended: %w", rec.JobID, answers.Err())
			}
			var a cancelAnswer
			if json.Unmarshal(body, &a) == nil && a.Ask == rec.Ask {
				answered[a.Follower] = true
			}
		case <-repoll.C:
		case <-ctx.Done():
			return &CancelError{JobID: rec.JobID, Answered: len(answered), Workers: max(n, len(answered)), Err: ctx.Err()}
		}
	}
}

// cancelLedger is b as the two interfaces a cancellation needs.
func cancelLedger(b broker.Backend) (broker.CancelLedger, broker.Broadcaster, error) {
	ledger, ok := b.(broker.CancelLedger)
	bc, ok2 := b.(broker.Broadcaster)
	if !ok || !ok2 {
		return nil, nil, fmt.Errorf("queuey: backend %s keeps no ledger of cancellations (it is not a broker.CancelLedger and a broker.Broadcaster)", b.Name())
	}
	return ledger, bc, nil
}

// CheckJobID refuses what cannot be a job's id, as Cancel does
// (ErrInvalidJob): empty, over MaxJobIDBytes, not UTF-8, or holding a
// control character.
func CheckJobID(id string) error { return checkText("job id", id, MaxJobIDBytes) }

// checkText refuses a text that cannot travel as an AMQP short string a
// tool shows (a job id, a uniqueness key): empty, over limit bytes, not
// UTF-8, or holding a control character. what names it in the error.
func checkText(what, s string, limit int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalidJob, what)
	case len(s) > limit:
		return fmt.Errorf("%w: %s %.40q... is %d bytes, over the %d-byte limit", ErrInvalidJob, what, s, len(s), limit)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidJob, what, s)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s %q holds the control character %U", ErrInvalidJob, what, s, r)
		}
	}
	return nil
}

// The ledger's records (ARCHITECTURE.md §2, "Cancellation: the ledger").
const (
	opCancel = "cancel" // the job is cancelled, until Until
	opForget = "forget" // the job arrived and ended: its cancellation is no longer needed
	opMark   = "mark"   // a follower's own record, to know it has read all before it
)

// cancelRecord is one record of the ledger, as JSON.
type cancelRecord struct {
	Op    string `json:"op"`
	JobID string `json:"job_id,omitempty"`
	At    int64  `json:"at,omitempty"`    // Unix ms: when it was cancelled
	Until int64  `json:"until,omitempty"` // Unix ms: when the cancellation is forgotten
	Ask   string `json:"ask,omitempty"`   // the Cancel call's, which followers answer
	Mark  string `json:"mark,omitempty"`
}

// cancelAnswer is a follower's answer to a Cancel call: it has applied
// the cancellation.
type cancelAnswer struct {
	Ask      string `json:"ask"`
	Follower string `json:"follower"`
}

// appendRecord appends rec to the ledger of prefix, kept as long as the
// longest a cancellation lasts.
func appendRecord(ctx context.Context, ledger broker.CancelLedger, prefix string, rec cancelRecord) error {
	body, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return ledger.AppendCancel(ctx, prefix, body, broker.MaxCancelKeep)
}

// nonce is 16 random hex digits.
func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
