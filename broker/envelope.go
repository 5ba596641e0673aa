package broker

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrMalformed: a message body is not a valid envelope. Decode errors are
// *MalformedError values, which match it with errors.Is.
var ErrMalformed = errors.New("broker: malformed envelope")

// Envelope is the JSON body of every message, the wire format shared with
// the Rust queuey crate. Fields are encoded in declaration order; new fields
// may only be added, and must decode as their zero value when missing, so
// older and newer processes keep reading each other's messages.
type Envelope struct {
	// JobID identifies the job, a UUID v4 string. It is made at the first
	// enqueue and kept across retries and deferrals.
	JobID string `json:"job_id"`
	// JobType is the job kind, the name handlers are registered under.
	JobType string `json:"job_type"`
	// Queue is the work queue's broker name, never a hold or dead queue.
	Queue string `json:"queue"`
	// Attempt counts deliveries that may run the handler, from 1.
	Attempt uint32 `json:"attempt"`
	// EnqueuedAtMs is the unix time in milliseconds of the first enqueue;
	// retries and deferrals keep it.
	EnqueuedAtMs uint64 `json:"enqueued_at_ms"`
	// Deferrals counts handler deferrals; it carries across retries. Bodies
	// written without it decode as 0.
	Deferrals uint32 `json:"deferrals"`
	// Priority is the priority the message is published with. Bodies
	// written without it decode as 0.
	Priority uint8 `json:"priority"`
	// Payload is the job's JSON. Copies of an envelope share these bytes;
	// treat them as read-only.
	Payload json.RawMessage `json:"payload"`
	// CorrelationID optionally ties the job to a request or trace; it is
	// left out of the JSON when empty.
	CorrelationID string `json:"correlation_id,omitempty"`
}

// MalformedError says which field made DecodeEnvelope refuse a body. It
// matches ErrMalformed with errors.Is and unwraps to the JSON error, if any.
type MalformedError struct {
	// Field is the JSON field at fault; empty when the body as a whole is
	// not a JSON object.
	Field string
	// Reason says what is wrong with the field (or the body).
	Reason string
	// Err is the underlying JSON error, or nil.
	Err error
}

// Error reads "broker: malformed envelope: " and Detail.
func (e *MalformedError) Error() string { return "broker: malformed envelope: " + e.Detail() }

// Detail reads "<field> <reason>[: <json syntax error>]": what is wrong, without
// saying that the envelope is (a dead letter's reason says that first).
func (e *MalformedError) Detail() string {
	msg := ""
	if e.Field != "" {
		msg += e.Field + " "
	}
	msg += e.Reason
	// A type error's text names Go types; Reason says it in JSON's terms.
	if _, typed := errors.AsType[*json.UnmarshalTypeError](e.Err); e.Err != nil && !typed {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports target == ErrMalformed.
func (e *MalformedError) Is(target error) bool { return target == ErrMalformed }

// Unwrap returns the underlying JSON error, or nil.
func (e *MalformedError) Unwrap() error { return e.Err }

// NewJobID returns a random UUID v4 in its canonical lower-case form,
// 8-4-4-4-12 hex digits.
func NewJobID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])  // crypto/rand.Read never fails; it crashes the program instead
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}

// NewEnvelope starts a job's first attempt: a fresh job id, attempt 1, no
// deferrals, priority 0, enqueued now (clamped to the epoch for earlier
// times). A nil payload is encoded as JSON null.
func NewEnvelope(jobType, queue string, payload json.RawMessage, now time.Time) Envelope {
	return Envelope{
		JobID:        NewJobID(),
		JobType:      jobType,
		Queue:        queue,
		Attempt:      1,
		EnqueuedAtMs: uint64(max(now.UnixMilli(), 0)),
		Payload:      payload,
	}
}

// NextAttempt is the envelope a retry publishes: attempt + 1 and priority 0
// (a deferral's top priority lasts one round); the deferral count and
// everything else are kept. e itself is unchanged.
func (e Envelope) NextAttempt() Envelope {
	if e.Attempt < math.MaxUint32 {
		e.Attempt++
	}
	e.Priority = 0
	return e
}

// Deferred is the envelope a deferral publishes: deferrals + 1 and the given
// priority; the attempt and everything else are kept, since a deferral costs
// no attempt. e itself is unchanged.
func (e Envelope) Deferred(priority uint8) Envelope {
	if e.Deferrals < math.MaxUint32 {
		e.Deferrals++
	}
	e.Priority = priority
	return e
}

// EnqueuedAt is the time of the first enqueue, to the millisecond.
func (e Envelope) EnqueuedAt() time.Time {
	return time.UnixMilli(int64(min(e.EnqueuedAtMs, math.MaxInt64)))
}

// Encode returns the JSON body: fields in declaration order, no HTML
// escaping and no trailing newline, as serde_json writes it. The payload is
// compacted. Encode does not validate the envelope; it fails only when the
// payload is not valid JSON.
func (e Envelope) Encode() ([]byte, error) {
	if b, ok := e.appendFast(make([]byte, 0, e.encodedSizeHint())); ok {
		return b, nil
	}
	return e.encodeReference()
}

// encodeReference is Encode through encoding/json: the definition of the
// output, and the fallback of the fast path (which the fuzz tests hold to
// the same bytes and errors).
func (e Envelope) encodeReference() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, fmt.Errorf("broker: encode envelope of job %q: %w", e.JobID, err)
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil // Encoder.Encode ends with a newline
}

// Message encodes the envelope into a publish whose properties mirror it:
// queue, message id, type, priority, attempt and deferrals. Headers are nil.
func (e Envelope) Message() (Message, error) {
	body, err := e.Encode()
	if err != nil {
		return Message{}, err
	}
	return Message{
		Queue:         e.Queue,
		ID:            e.JobID,
		Type:          e.JobType,
		Priority:      e.Priority,
		Attempt:       e.Attempt,
		Deferrals:     e.Deferrals,
		CorrelationID: e.CorrelationID,
		Body:          body,
	}, nil
}

// DecodeEnvelope parses a message body. It refuses, with a *MalformedError
// wrapping ErrMalformed that names the field, a body that is not a JSON
// object, a job_id that is not a UUID (8-4-4-4-12 hex digits, any case and
// version), a missing or empty job_type or queue, a missing enqueued_at_ms,
// an attempt that is missing or 0, a missing payload, and any field of the
// wrong JSON type. Missing deferrals and priority decode as 0, as bodies
// written before those fields existed lack them. Field names match exactly,
// as in serde, and unknown fields are ignored so newer writers stay
// readable. The payload is copied out of body, verbatim.
func DecodeEnvelope(body []byte) (Envelope, error) {
	if e, ok := decodeEnvelopeFast(body); ok {
		return e, nil
	}
	return decodeEnvelopeReference(body)
}

// DecodeMessage is DecodeEnvelope(msg.Body), with the same result and the
// same errors, except that the envelope shares memory with msg: its
// payload is a slice of msg.Body (not a copy), and its string fields are
// msg's properties (ID, Type, Queue, CorrelationID) when the body spells
// them the same, as a body published by Envelope.Message does. Decoding a
// delivery so allocates nothing. Treat the payload as read-only; it
// changes if msg.Body does.
func DecodeMessage(msg Message) (Envelope, error) {
	if e, ok := decodeEnvelopeFastSharing(msg.Body, &msg); ok {
		return e, nil
	}
	return decodeEnvelopeReference(msg.Body)
}

// decodeEnvelopeReference is DecodeEnvelope through encoding/json: the
// definition of the result and of every error, and the fallback of the fast
// path (which the fuzz tests hold to the same results).
func decodeEnvelopeReference(body []byte) (Envelope, error) {
	// One pass of encoding/json into pointers (so absence shows), then a
	// check that each field found was spelled exactly: encoding/json
	// matches names without regard to case, serde does not. A map of raw
	// fields decoded field by field cost twice as much.
	var w struct {
		JobID         *string         `json:"job_id"`
		JobType       *string         `json:"job_type"`
		Queue         *string         `json:"queue"`
		Attempt       *uint32         `json:"attempt"`
		EnqueuedAtMs  *uint64         `json:"enqueued_at_ms"`
		Deferrals     *uint32         `json:"deferrals"`
		Priority      *uint8          `json:"priority"`
		Payload       json.RawMessage `json:"payload"`
		CorrelationID *string         `json:"correlation_id"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			name := typeErr.Field
			return Envelope{}, &MalformedError{Field: name, Reason: "is not a " + fieldKinds[name] + ": it is a JSON " + typeErr.Value, Err: err}
		}
		if typeErr != nil {
			return Envelope{}, &MalformedError{Reason: "body is not a JSON object: it is a JSON " + typeErr.Value, Err: err}
		}
		return Envelope{}, &MalformedError{Reason: "body is not a JSON object", Err: err}
	}
	if bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		return Envelope{}, &MalformedError{Reason: "body is not a JSON object: it is null"}
	}
	present := func(name string, found bool) bool {
		return found && bytes.Contains(body, []byte(`"`+name+`"`))
	}
	for _, f := range []struct {
		name  string
		found bool
	}{
		{"job_id", w.JobID != nil},
		{"job_type", w.JobType != nil},
		{"queue", w.Queue != nil},
		{"attempt", w.Attempt != nil},
		{"enqueued_at_ms", w.EnqueuedAtMs != nil},
		{"payload", w.Payload != nil},
	} {
		if !present(f.name, f.found) {
			return Envelope{}, &MalformedError{Field: f.name, Reason: "is missing"}
		}
	}
	e := Envelope{
		JobID: *w.JobID, JobType: *w.JobType, Queue: *w.Queue, Attempt: *w.Attempt,
		EnqueuedAtMs: *w.EnqueuedAtMs, Payload: w.Payload,
	}
	if present("deferrals", w.Deferrals != nil) {
		e.Deferrals = *w.Deferrals
	}
	if present("priority", w.Priority != nil) {
		e.Priority = *w.Priority
	}
	if present("correlation_id", w.CorrelationID != nil) {
		e.CorrelationID = *w.CorrelationID
	}
	switch {
	case !isUUID(e.JobID):
		return Envelope{}, &MalformedError{Field: "job_id", Reason: fmt.Sprintf("%q is not a UUID", e.JobID)}
	case e.JobType == "":
		return Envelope{}, &MalformedError{Field: "job_type", Reason: "is empty"}
	case e.Queue == "":
		return Envelope{}, &MalformedError{Field: "queue", Reason: "is empty"}
	case e.Attempt == 0:
		return Envelope{}, &MalformedError{Field: "attempt", Reason: "is 0; attempts count from 1"}
	}
	return e, nil
}

// fieldKinds names the JSON type each field must have, for errors.
var fieldKinds = map[string]string{
	"job_id": "string", "job_type": "string", "queue": "string", "attempt": "uint32",
	"enqueued_at_ms": "uint64", "deferrals": "uint32", "priority": "uint8",
	"payload": "JSON value", "correlation_id": "string",
}

// isUUID reports whether s is a UUID in the hyphenated 8-4-4-4-12 form, the
// form the Rust crate writes. Version and variant are not checked.
func isUUID(s string) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	// One table lookup per hex digit: this runs twice for every job, at
	// its encode and at its decode.
	var bad byte
	for _, i := range uuidDigits {
		bad |= notHex[s[i]]
	}
	return bad == 0
}

// uuidDigits are the positions of a hyphenated UUID's hex digits.
var uuidDigits = func() (at [32]uint8) {
	n := 0
	for i := range 36 {
		if i != 8 && i != 13 && i != 18 && i != 23 {
			at[n] = uint8(i)
			n++
		}
	}
	return at
}()

// notHex is 0 for the hex digits of either case, 1 for every other byte.
var notHex = func() (t [256]byte) {
	for c := range t {
		t[c] = 1
	}
	for _, c := range "0123456789abcdefABCDEF" {
		t[c] = 0
	}
	return t
}()
