package broker

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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
	// Unknown holds the members of the body this version does not know (a
	// newer version's field, another producer's "tenant_id"), as one JSON
	// object, or nil. Encode writes them back after the known fields, so
	// they survive retries, deferrals, dead letters and replays unchanged.
	// Their names must differ from every field's, case aside.
	Unknown json.RawMessage `json:"-"`
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
	if _, typed := errors.AsType[*jsonv2.SemanticError](e.Err); e.Err != nil && !typed {
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

// Encode returns the JSON body: fields in declaration order, then the
// unknown members, no HTML escaping and no trailing newline, as serde_json
// writes it. The payload is compacted. Encode does not check the fields'
// values; it fails when a string is not valid UTF-8, when the payload is
// not valid JSON or names a member twice, or when Unknown is not a JSON
// object of names the envelope does not use.
func (e Envelope) Encode() ([]byte, error) {
	if b, ok := e.appendFast(make([]byte, 0, e.encodedSizeHint())); ok {
		return b, nil
	}
	return e.encodeReference()
}

// encodeReference is Encode through the strict JSON codec: the definition
// of the output, and the fallback of the fast path (which the fuzz tests
// hold to the same bytes and errors).
func (e Envelope) encodeReference() ([]byte, error) {
	if err := checkUnknown(jsontext.Value(e.Unknown)); err != nil {
		return nil, fmt.Errorf("broker: encode envelope of job %q: %w", e.JobID, err)
	}
	w := wireOut{
		JobID: e.JobID, JobType: e.JobType, Queue: e.Queue, Attempt: e.Attempt, EnqueuedAtMs: e.EnqueuedAtMs,
		Deferrals: e.Deferrals, Priority: e.Priority, Payload: jsontext.Value(e.Payload), CorrelationID: e.CorrelationID,
		Unknown: jsontext.Value(e.Unknown),
	}
	if e.Payload == nil {
		w.Payload = jsontext.Value("null")
	}
	// Escapes in the payload's strings are kept as written, as a raw value
	// is by serde.
	b, err := jsonv2.Marshal(w, jsontext.PreserveRawStrings(true))
	if err != nil {
		return nil, fmt.Errorf("broker: encode envelope of job %q: %w", e.JobID, err)
	}
	return b, nil
}

// wireOut is the envelope as the reference encoder writes it: fields in
// the wire's order, then the unknown members.
type wireOut struct {
	JobID         string         `json:"job_id"`
	JobType       string         `json:"job_type"`
	Queue         string         `json:"queue"`
	Attempt       uint32         `json:"attempt"`
	EnqueuedAtMs  uint64         `json:"enqueued_at_ms"`
	Deferrals     uint32         `json:"deferrals"`
	Priority      uint8          `json:"priority"`
	Payload       jsontext.Value `json:"payload"`
	CorrelationID string         `json:"correlation_id,omitempty"`
	Unknown       jsontext.Value `json:",embed"`
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
// wrong JSON type, a job_type, queue or correlation_id longer than
// MaxShortString, a name given twice anywhere in the body (the payload
// included), a member whose name differs from a field's only in case, and
// invalid UTF-8. Missing deferrals and priority decode as 0, as bodies
// written before those fields existed lack them. Field names match exactly,
// as in serde; other members are kept in Unknown, so newer writers stay
// readable and their fields survive. The payload is copied out of body,
// verbatim.
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

// decodeEnvelopeReference is DecodeEnvelope through the strict JSON codec
// (github.com/go-json-experiment/json, the basis of encoding/json/v2): the
// definition of the result and of every error, and the fallback of the
// fast path (which the fuzz tests hold to the same results). The codec
// matches names exactly, refuses a name given twice anywhere in the body,
// and refuses invalid UTF-8, as serde does.
func decodeEnvelopeReference(body []byte) (Envelope, error) {
	var w wireIn
	if err := jsonv2.Unmarshal(body, &w); err != nil {
		return Envelope{}, malformedJSON(err)
	}
	if bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		return Envelope{}, &MalformedError{Reason: "body is not a JSON object: it is null"}
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
		if !f.found {
			return Envelope{}, &MalformedError{Field: f.name, Reason: "is missing"}
		}
	}
	if err := checkUnknown(w.Unknown); err != nil {
		return Envelope{}, err
	}
	e := Envelope{
		JobID: *w.JobID, JobType: *w.JobType, Queue: *w.Queue, Attempt: *w.Attempt,
		EnqueuedAtMs: *w.EnqueuedAtMs, Payload: json.RawMessage(w.Payload),
		Deferrals: deref(w.Deferrals), Priority: deref(w.Priority), CorrelationID: deref(w.CorrelationID),
	}
	if len(w.Unknown) > 0 {
		e.Unknown = json.RawMessage(w.Unknown)
	}
	return e, checkFields(e)
}

// wireIn is the envelope as the reference decoder reads it: pointers, so
// that absence (or null) shows, and the members no field names kept in
// Unknown.
type wireIn struct {
	JobID         *string        `json:"job_id"`
	JobType       *string        `json:"job_type"`
	Queue         *string        `json:"queue"`
	Attempt       *uint32        `json:"attempt"`
	EnqueuedAtMs  *uint64        `json:"enqueued_at_ms"`
	Deferrals     *uint32        `json:"deferrals"`
	Priority      *uint8         `json:"priority"`
	Payload       jsontext.Value `json:"payload"`
	CorrelationID *string        `json:"correlation_id"`
	Unknown       jsontext.Value `json:",embed"`
}

// deref is *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// MaxShortString is the longest job type, queue name and correlation id
// an envelope may carry: each also travels in an AMQP short string (the
// message's type, its queue, its correlation id), which holds 255 bytes.
const MaxShortString = 255

// checkFields refuses a decoded envelope whose values are out of range.
func checkFields(e Envelope) error {
	switch {
	case !isUUID(e.JobID):
		return &MalformedError{Field: "job_id", Reason: fmt.Sprintf("%q is not a UUID", truncated(e.JobID))}
	case e.JobType == "":
		return &MalformedError{Field: "job_type", Reason: "is empty"}
	case e.Queue == "":
		return &MalformedError{Field: "queue", Reason: "is empty"}
	case e.Attempt == 0:
		return &MalformedError{Field: "attempt", Reason: "is 0; attempts count from 1"}
	}
	for _, f := range []struct{ name, v string }{{"job_type", e.JobType}, {"queue", e.Queue}, {"correlation_id", e.CorrelationID}} {
		if len(f.v) > MaxShortString {
			return &MalformedError{Field: f.name, Reason: fmt.Sprintf("is %d bytes long; at most %d fit an AMQP short string", len(f.v), MaxShortString)}
		}
	}
	return nil
}

// truncated is s cut to 64 bytes, at a UTF-8 boundary, for an error text.
func truncated(s string) string {
	if len(s) <= 64 {
		return s
	}
	cut := 64
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// checkUnknown refuses members the envelope does not know that differ from
// a field's name only in case ("JOB_TYPE" beside "job_type"): a decoder
// that folds case would read them as that field, so two readers of the
// body could disagree about the job. Unknown is a JSON object or empty;
// the first such member, in the body's order, is named.
func checkUnknown(unknown jsontext.Value) error {
	if len(unknown) == 0 {
		return nil
	}
	dec := jsontext.NewDecoder(bytes.NewReader(unknown))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return &MalformedError{Reason: "holds unknown members that are not a JSON object", Err: err}
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return &MalformedError{Reason: "holds unknown members that are not valid JSON", Err: err}
		}
		name := tok.String()
		for _, field := range envelopeFieldNames {
			if strings.EqualFold(name, field) {
				return &MalformedError{Field: name, Reason: fmt.Sprintf("differs from the field %q only in case", field)}
			}
		}
		if err := dec.SkipValue(); err != nil {
			return &MalformedError{Reason: "holds unknown members that are not valid JSON", Err: err}
		}
	}
	return nil
}

// malformedJSON turns an error of the strict codec into a *MalformedError
// that names the field at fault, in JSON's terms.
func malformedJSON(err error) error {
	if se, ok := errors.AsType[*jsonv2.SemanticError](err); ok {
		field := firstToken(se.JSONPointer)
		if field == "" {
			return &MalformedError{Reason: "body is not a JSON object: it is a JSON " + kindName(se.JSONKind), Err: err}
		}
		if kind, known := fieldKinds[field]; known && se.JSONKind != 0 {
			got := kindName(se.JSONKind)
			if se.JSONValue != nil && se.JSONKind == '0' {
				got += " " + string(se.JSONValue)
			}
			return &MalformedError{Field: field, Reason: "is not a " + kind + ": it is a JSON " + got, Err: err}
		}
		return &MalformedError{Field: field, Reason: "is not valid", Err: err}
	}
	if se, ok := errors.AsType[*jsontext.SyntacticError](err); ok && !errors.Is(err, io.ErrUnexpectedEOF) {
		field := firstToken(se.JSONPointer)
		if errors.Is(err, jsontext.ErrDuplicateName) {
			if se.JSONPointer.Parent() == "" {
				return &MalformedError{Field: field, Reason: "appears twice"}
			}
			return &MalformedError{Field: field, Reason: fmt.Sprintf("holds the name %q twice at %s", se.JSONPointer.LastToken(), se.JSONPointer)}
		}
		if field != "" {
			return &MalformedError{Field: field, Reason: "is not valid JSON", Err: err}
		}
	}
	return &MalformedError{Reason: "body is not a JSON object", Err: err}
}

// firstToken is the first reference token of p: the top-level member an
// error is in, or "" for the body itself.
func firstToken(p jsontext.Pointer) string {
	for tok := range p.Tokens() {
		return tok
	}
	return ""
}

// kindName names a JSON kind as a person would.
func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "boolean"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
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
