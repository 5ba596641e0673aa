package broker_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey-go/queuey/broker"
)

// sendEmail is a job payload for the tests.
type sendEmail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// fixedEnvelope is the envelope pinned by testdata/envelope_v1.json.
func fixedEnvelope() broker.Envelope {
	return broker.Envelope{
		JobID:        "0f8fad5b-d9cb-469f-a165-70867728950e",
		JobType:      "send_email",
		Queue:        "myapp.emails",
		Attempt:      2,
		EnqueuedAtMs: 1700000000000,
		Deferrals:    1,
		Priority:     10,
		Payload:      json.RawMessage(`{"to":"ada@example.com","subject":"<hi> & welcome"}`),
	}
}

// readGolden returns a file of testdata verbatim. The golden files are the
// contract with the Rust crate: fix the code, never regenerate them from it.
func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustPayload(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewEnvelopeFillsInTheJobMetadata(t *testing.T) {
	now := time.UnixMilli(1700000000123).Add(456 * time.Microsecond)
	payload := mustPayload(t, sendEmail{To: "ada@example.com", Subject: "hi"})

	e := broker.NewEnvelope("send_email", "myapp.emails", payload, now)

	if !uuidV4.MatchString(e.JobID) {
		t.Errorf("JobID = %q, want a lower-case UUID v4", e.JobID)
	}
	want := broker.Envelope{
		JobID:        e.JobID,
		JobType:      "send_email",
		Queue:        "myapp.emails",
		Attempt:      1,
		EnqueuedAtMs: 1700000000123,
		Deferrals:    0,
		Priority:     0,
		Payload:      payload,
	}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Errorf("NewEnvelope mismatch (-want +got):\n%s", diff)
	}
	if got, want := e.EnqueuedAt(), time.UnixMilli(1700000000123); !got.Equal(want) {
		t.Errorf("EnqueuedAt() = %v, want %v", got, want)
	}
}

func TestNewEnvelopeBeforeTheEpochClampsToZero(t *testing.T) {
	e := broker.NewEnvelope("t", "q", json.RawMessage(`{}`), time.Unix(-5, 0))
	if e.EnqueuedAtMs != 0 {
		t.Errorf("EnqueuedAtMs = %d, want 0", e.EnqueuedAtMs)
	}
}

func TestDistinctEnvelopesGetDistinctIDs(t *testing.T) {
	const n = 10000
	seen := make(map[string]bool, n)
	for range n {
		id := broker.NewJobID()
		if !uuidV4.MatchString(id) {
			t.Fatalf("NewJobID() = %q, want a lower-case UUID v4", id)
		}
		if seen[id] {
			t.Fatalf("NewJobID() returned %q twice", id)
		}
		seen[id] = true
	}
	a := broker.NewEnvelope("t", "q", json.RawMessage(`{}`), time.Now())
	b := broker.NewEnvelope("t", "q", json.RawMessage(`{}`), time.Now())
	if a.JobID == b.JobID {
		t.Errorf("two envelopes share job id %q", a.JobID)
	}
}

func TestEncodeMatchesTheGoldenBytes(t *testing.T) {
	tests := []struct {
		name   string
		env    func() broker.Envelope
		golden string
	}{
		{
			name:   "without correlation id",
			env:    fixedEnvelope,
			golden: "envelope_v1.json",
		},
		{
			name: "with correlation id",
			env: func() broker.Envelope {
				e := fixedEnvelope()
				e.CorrelationID = "req-7f3a"
				return e
			},
			golden: "envelope_v1_correlation.json",
		},
		{
			name: "payload whitespace is compacted",
			env: func() broker.Envelope {
				e := fixedEnvelope()
				e.Payload = json.RawMessage("{ \"to\" : \"ada@example.com\",\n  \"subject\": \"<hi> & welcome\" }")
				return e
			},
			golden: "envelope_v1.json",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.env().Encode()
			if err != nil {
				t.Fatalf("Encode() error = %v", err)
			}
			if want := readGolden(t, tt.golden); !bytes.Equal(got, want) {
				t.Errorf("Encode() =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestDecodeGoldenBodies(t *testing.T) {
	withCorrelation := fixedEnvelope()
	withCorrelation.CorrelationID = "req-7f3a"
	tests := []struct {
		name   string
		golden string
		want   broker.Envelope
	}{
		{
			name:   "current body",
			golden: "envelope_v1.json",
			want:   fixedEnvelope(),
		},
		{
			name:   "body with a correlation id",
			golden: "envelope_v1_correlation.json",
			want:   withCorrelation,
		},
		{
			// Written by the Rust crate before deferrals and priority
			// existed (and before correlation ids).
			name:   "old rust body without deferrals or priority",
			golden: "envelope_rust_v0_1.json",
			want: broker.Envelope{
				JobID:        "6ba7b810-9dad-41d1-80b4-00c04fd430c8",
				JobType:      "send_email",
				Queue:        "myapp.emails",
				Attempt:      1,
				EnqueuedAtMs: 1690000000123,
				Payload:      json.RawMessage(`{"subject":"hi","to":"ada@example.com"}`),
			},
		},
		{
			name:   "newer body with unknown fields and an upper-case id",
			golden: "envelope_future_fields.json",
			want: broker.Envelope{
				JobID:         "6BA7B810-9DAD-41D1-80B4-00C04FD430C8",
				JobType:       "resize_image",
				Queue:         "media",
				Attempt:       3,
				EnqueuedAtMs:  1690000000123,
				Deferrals:     4,
				Priority:      5,
				Payload:       json.RawMessage(`[1,2,3]`),
				CorrelationID: "trace-1",
				Unknown:       json.RawMessage(`{"tenant":"acme","retry_override":{"max_attempts":9}}`),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := broker.DecodeEnvelope(readGolden(t, tt.golden))
			if err != nil {
				t.Fatalf("DecodeEnvelope() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("DecodeEnvelope() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOldRustBodyReencodesWithTheNewFields(t *testing.T) {
	e, err := broker.DecodeEnvelope(readGolden(t, "envelope_rust_v0_1.json"))
	if err != nil {
		t.Fatalf("DecodeEnvelope() error = %v", err)
	}
	got, err := e.Encode()
	if err != nil {
		t.Fatalf("Encode() error = %v", err)
	}
	want := `{"job_id":"6ba7b810-9dad-41d1-80b4-00c04fd430c8","job_type":"send_email","queue":"myapp.emails","attempt":1,"enqueued_at_ms":1690000000123,"deferrals":0,"priority":0,"payload":{"subject":"hi","to":"ada@example.com"}}`
	if string(got) != want {
		t.Errorf("Encode() =\n%s\nwant\n%s", got, want)
	}
}

func TestAnUnsetCorrelationIDStaysOutOfTheJSON(t *testing.T) {
	body, err := broker.NewEnvelope("t", "q", json.RawMessage(`{}`), time.Now()).Encode()
	if err != nil {
		t.Fatalf("Encode() error = %v", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	if v, ok := fields["correlation_id"]; ok {
		t.Errorf("body has correlation_id %s, want the field left out:\n%s", v, body)
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		env  broker.Envelope
	}{
		{name: "new envelope", env: broker.NewEnvelope("send_email", "myapp.emails", json.RawMessage(`{"to":"ada@example.com"}`), time.Now())},
		{name: "retried and deferred", env: fixedEnvelope().Deferred(10).NextAttempt().Deferred(3)},
		{name: "with correlation id", env: func() broker.Envelope {
			e := fixedEnvelope()
			e.CorrelationID = "req-7f3a"
			return e
		}()},
		{name: "null payload", env: func() broker.Envelope {
			e := fixedEnvelope()
			e.Payload = json.RawMessage(`null`)
			return e
		}()},
		{name: "html and unicode in strings", env: func() broker.Envelope {
			e := fixedEnvelope()
			e.JobType = "<ünïcode & co>"
			e.Payload = json.RawMessage(`"\u2028 <b>"`)
			return e
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := tt.env.Encode()
			if err != nil {
				t.Fatalf("Encode() error = %v", err)
			}
			got, err := broker.DecodeEnvelope(body)
			if err != nil {
				t.Fatalf("DecodeEnvelope(%s) error = %v", body, err)
			}
			if diff := cmp.Diff(tt.env, got, equateJSON); diff != "" {
				t.Errorf("round trip mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// equateJSON compares payloads as JSON values: Encode compacts them.
var equateJSON = cmp.Comparer(func(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
})

func TestDecodeAfterRoundTripStillReturnsTheOriginalJob(t *testing.T) {
	job := sendEmail{To: "ada@example.com", Subject: "hi"}
	e := broker.NewEnvelope("send_email", "myapp.emails", mustPayload(t, job), time.Now())
	body, err := e.NextAttempt().Deferred(10).Encode()
	if err != nil {
		t.Fatalf("Encode() error = %v", err)
	}
	decoded, err := broker.DecodeEnvelope(body)
	if err != nil {
		t.Fatalf("DecodeEnvelope() error = %v", err)
	}
	var got sendEmail
	if err := json.Unmarshal(decoded.Payload, &got); err != nil {
		t.Fatalf("payload does not decode: %v", err)
	}
	if diff := cmp.Diff(job, got); diff != "" {
		t.Errorf("payload mismatch (-want +got):\n%s", diff)
	}
}

func TestDecodeEnvelopeDoesNotAliasTheBody(t *testing.T) {
	body := readGolden(t, "envelope_v1.json")
	e, err := broker.DecodeEnvelope(body)
	if err != nil {
		t.Fatalf("DecodeEnvelope() error = %v", err)
	}
	for i := range body {
		body[i] = 'x'
	}
	if diff := cmp.Diff(fixedEnvelope(), e); diff != "" {
		t.Errorf("envelope changed with its body (-want +got):\n%s", diff)
	}
}

func TestDecodeEnvelopeRejectsGarbage(t *testing.T) {
	valid := func(edit func(map[string]any)) string {
		m := map[string]any{
			"job_id":         "0f8fad5b-d9cb-469f-a165-70867728950e",
			"job_type":       "send_email",
			"queue":          "myapp.emails",
			"attempt":        1,
			"enqueued_at_ms": 1700000000000,
			"payload":        map[string]any{},
		}
		edit(m)
		b, err := json.Marshal(m)
		if err != nil {
			panic(err)
		}
		return string(b)
	}
	tests := []struct {
		name      string
		body      string
		wantField string
	}{
		{name: "empty body", body: ""},
		{name: "not json", body: "hello"},
		{name: "truncated json", body: `{"job_id":`},
		{name: "json null", body: "null"},
		{name: "json array", body: `[1,2]`},
		{name: "json string", body: `"job"`},
		{name: "trailing garbage", body: readGoldenString("envelope_v1.json") + "x"},
		{name: "only a bad job id", body: `{"job_id":"nope"}`, wantField: "job_type"},
		{name: "job id nope", body: valid(func(m map[string]any) { m["job_id"] = "nope" }), wantField: "job_id"},
		{name: "job id without hyphens", body: valid(func(m map[string]any) { m["job_id"] = "0f8fad5bd9cb469fa16570867728950e" }), wantField: "job_id"},
		{name: "job id with a non hex digit", body: valid(func(m map[string]any) { m["job_id"] = "0f8fad5b-d9cb-469f-a165-70867728950g" }), wantField: "job_id"},
		{name: "job id with a hyphen out of place", body: valid(func(m map[string]any) { m["job_id"] = "0f8fad5bd-9cb-469f-a165-70867728950e" }), wantField: "job_id"},
		{name: "job id with a digit for a hyphen", body: valid(func(m map[string]any) { m["job_id"] = "0f8fad5b0d9cb-469f-a165-70867728950e" }), wantField: "job_id"},
		{name: "job id a number", body: valid(func(m map[string]any) { m["job_id"] = 7 }), wantField: "job_id"},
		{name: "job id missing", body: valid(func(m map[string]any) { delete(m, "job_id") }), wantField: "job_id"},
		{name: "job type empty", body: valid(func(m map[string]any) { m["job_type"] = "" }), wantField: "job_type"},
		{name: "job type missing", body: valid(func(m map[string]any) { delete(m, "job_type") }), wantField: "job_type"},
		{name: "queue empty", body: valid(func(m map[string]any) { m["queue"] = "" }), wantField: "queue"},
		{name: "queue missing", body: valid(func(m map[string]any) { delete(m, "queue") }), wantField: "queue"},
		{name: "attempt zero", body: valid(func(m map[string]any) { m["attempt"] = 0 }), wantField: "attempt"},
		{name: "attempt missing", body: valid(func(m map[string]any) { delete(m, "attempt") }), wantField: "attempt"},
		{name: "attempt negative", body: valid(func(m map[string]any) { m["attempt"] = -1 }), wantField: "attempt"},
		{name: "attempt fractional", body: valid(func(m map[string]any) { m["attempt"] = 1.5 }), wantField: "attempt"},
		{name: "attempt over uint32", body: valid(func(m map[string]any) { m["attempt"] = 1 << 32 }), wantField: "attempt"},
		{name: "attempt a string", body: valid(func(m map[string]any) { m["attempt"] = "1" }), wantField: "attempt"},
		{name: "enqueued at missing", body: valid(func(m map[string]any) { delete(m, "enqueued_at_ms") }), wantField: "enqueued_at_ms"},
		{name: "priority over uint8", body: valid(func(m map[string]any) { m["priority"] = 256 }), wantField: "priority"},
		{name: "deferrals negative", body: valid(func(m map[string]any) { m["deferrals"] = -1 }), wantField: "deferrals"},
		{name: "payload missing", body: valid(func(m map[string]any) { delete(m, "payload") }), wantField: "payload"},
		{name: "correlation id a number", body: valid(func(m map[string]any) { m["correlation_id"] = 7 }), wantField: "correlation_id"},
		{name: "field names in the wrong case", body: strings.Replace(readGoldenString("envelope_v1.json"), `"job_id"`, `"JOB_ID"`, 1), wantField: "job_id"},
		// What serde refuses, so that a Go and a Rust worker never read one
		// body as two jobs.
		{name: "a field's upper-case twin", body: valid(func(m map[string]any) { m["JOB_TYPE"] = "evil" }), wantField: "JOB_TYPE"},
		{name: "a field's capitalised twin", body: valid(func(m map[string]any) { m["Attempt"] = 7 }), wantField: "Attempt"},
		{name: "a field given twice", body: strings.Replace(readGoldenString("envelope_v1.json"), `"job_type":"send_email"`, `"job_type":"send_email","job_type":"evil"`, 1), wantField: "job_type"},
		{name: "a name given twice in the payload", body: valid(func(m map[string]any) { m["payload"] = json.RawMessage(`{"to":"a","to":"b"}`) }), wantField: "payload"},
		{name: "job type of invalid UTF-8", body: strings.Replace(readGoldenString("envelope_v1.json"), `send_email`, "send\xffemail", 1), wantField: "job_type"},
		// Values that cannot travel in an AMQP short string.
		{name: "job type over 255 bytes", body: valid(func(m map[string]any) { m["job_type"] = strings.Repeat("k", 256) }), wantField: "job_type"},
		{name: "queue over 255 bytes", body: valid(func(m map[string]any) { m["queue"] = strings.Repeat("q", 300) }), wantField: "queue"},
		{name: "correlation id over 255 bytes", body: valid(func(m map[string]any) { m["correlation_id"] = strings.Repeat("c", 300) }), wantField: "correlation_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := broker.DecodeEnvelope([]byte(tt.body))
			if err == nil {
				t.Fatalf("DecodeEnvelope(%s) = %+v, want an error", tt.body, got)
			}
			if !errors.Is(err, broker.ErrMalformed) {
				t.Errorf("DecodeEnvelope(%s) error = %v, want one matching ErrMalformed", tt.body, err)
			}
			var merr *broker.MalformedError
			if !errors.As(err, &merr) {
				t.Fatalf("DecodeEnvelope(%s) error = %T, want *broker.MalformedError", tt.body, err)
			}
			if merr.Field != tt.wantField {
				t.Errorf("MalformedError.Field = %q, want %q (error: %v)", merr.Field, tt.wantField, err)
			}
			if tt.wantField != "" && !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("error %q does not name the field %q", err, tt.wantField)
			}
			// The text is for operators: no Go types, and Detail is Error
			// without its prefix.
			if strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "struct") {
				t.Errorf("error %q speaks of Go types", err)
			}
			if want := "broker: malformed envelope: " + merr.Detail(); err.Error() != want {
				t.Errorf("Error() = %q, want %q", err, want)
			}
		})
	}
}

// Members of the body the envelope does not know (another producer's
// tenant_id, a newer version's field) come back unchanged in every body the
// job's later lives are published with.
func TestUnknownMembersSurviveRetriesAndDeferrals(t *testing.T) {
	body := strings.Replace(readGoldenString("envelope_v1.json"), `"payload"`, `"tenant_id":"t-42","trace":{"a":[1,2]},"payload"`, 1)
	e, err := broker.DecodeEnvelope([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	for name, next := range map[string]broker.Envelope{"as it was": e, "retry": e.NextAttempt(), "deferral": e.Deferred(10)} {
		enc, err := next.Encode()
		if err != nil {
			t.Fatalf("%s: Encode() error = %v", name, err)
		}
		if !bytes.Contains(enc, []byte(`"tenant_id":"t-42","trace":{"a":[1,2]}}`)) {
			t.Errorf("%s: Encode() = %s, want the unknown members at its end", name, enc)
		}
		again, err := broker.DecodeEnvelope(enc)
		if err != nil || string(again.Unknown) != `{"tenant_id":"t-42","trace":{"a":[1,2]}}` {
			t.Errorf("%s: decoded again: Unknown = %s, %v", name, again.Unknown, err)
		}
	}
}

func TestEncodeRefusesUnknownMembersThatAreFields(t *testing.T) {
	for _, unknown := range []string{`{"job_type":"x"}`, `{"Job_Type":"x"}`, `[1]`, `{"a":1,"a":2}`} {
		e := fixedEnvelope()
		e.Unknown = json.RawMessage(unknown)
		if b, err := e.Encode(); err == nil {
			t.Errorf("Encode() with Unknown %s = %s, want an error", unknown, b)
		}
	}
}

func readGoldenString(name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestDecodeEnvelopeAcceptsOptionalFieldsAsNull(t *testing.T) {
	body := `{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"deferrals":null,"priority":null,"payload":null,"correlation_id":null}`
	got, err := broker.DecodeEnvelope([]byte(body))
	if err != nil {
		t.Fatalf("DecodeEnvelope() error = %v", err)
	}
	want := broker.Envelope{
		JobID:   "0f8fad5b-d9cb-469f-a165-70867728950e",
		JobType: "t",
		Queue:   "q",
		Attempt: 1,
		Payload: json.RawMessage(`null`),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeEnvelope() mismatch (-want +got):\n%s", diff)
	}
}

func TestNextAttemptIncrementsAndPreservesIdentity(t *testing.T) {
	orig := fixedEnvelope()
	orig.CorrelationID = "req-7f3a"
	before := orig

	got := orig.NextAttempt()

	want := orig
	want.Attempt = 3
	want.Priority = 0
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NextAttempt() mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, orig); diff != "" {
		t.Errorf("NextAttempt() changed the original (-before +after):\n%s", diff)
	}
}

func TestNextAttemptKeepsTheDeferralCountButDropsThePriority(t *testing.T) {
	e := broker.NewEnvelope("t", "q", json.RawMessage(`{}`), time.Now()).Deferred(10).Deferred(10)

	got := e.NextAttempt()

	if got.Deferrals != 2 {
		t.Errorf("Deferrals = %d, want 2", got.Deferrals)
	}
	if got.Priority != 0 {
		t.Errorf("Priority = %d, want 0", got.Priority)
	}
	if got.Attempt != 2 {
		t.Errorf("Attempt = %d, want 2", got.Attempt)
	}
}

func TestDeferredIncrementsDeferralsAndSetsThePriority(t *testing.T) {
	orig := fixedEnvelope()

	got := orig.Deferred(7)

	want := orig
	want.Deferrals = 2
	want.Priority = 7
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Deferred(7) mismatch (-want +got):\n%s", diff)
	}
	if orig.Deferrals != 1 || orig.Priority != 10 {
		t.Errorf("Deferred(7) changed the original: deferrals %d priority %d, want 1 and 10", orig.Deferrals, orig.Priority)
	}
}

func TestDeferralsAccumulateAndAZeroPriorityQueueStaysAtZero(t *testing.T) {
	e := broker.NewEnvelope("t", "q", json.RawMessage(`{}`), time.Now())
	for want := uint32(1); want <= 5; want++ {
		e = e.Deferred(0) // a queue with max priority 0 defers at priority 0
		if e.Deferrals != want || e.Priority != 0 || e.Attempt != 1 {
			t.Fatalf("after %d deferrals: deferrals %d priority %d attempt %d, want %d, 0 and 1",
				want, e.Deferrals, e.Priority, e.Attempt, want)
		}
	}
}

func TestCountersSaturateInsteadOfWrapping(t *testing.T) {
	e := fixedEnvelope()
	e.Attempt = 1<<32 - 1
	e.Deferrals = 1<<32 - 1
	if got := e.NextAttempt().Attempt; got != 1<<32-1 {
		t.Errorf("NextAttempt().Attempt = %d, want %d", got, uint32(1<<32-1))
	}
	if got := e.Deferred(1).Deferrals; got != 1<<32-1 {
		t.Errorf("Deferred(1).Deferrals = %d, want %d", got, uint32(1<<32-1))
	}
}

func TestACorrelationIDSurvivesRetriesAndDeferrals(t *testing.T) {
	e := broker.NewEnvelope("t", "q", json.RawMessage(`{}`), time.Now())
	e.CorrelationID = "req-7f3a"
	e = e.NextAttempt().Deferred(10).NextAttempt()
	body, err := e.Encode()
	if err != nil {
		t.Fatalf("Encode() error = %v", err)
	}
	got, err := broker.DecodeEnvelope(body)
	if err != nil {
		t.Fatalf("DecodeEnvelope() error = %v", err)
	}
	if got.CorrelationID != "req-7f3a" {
		t.Errorf("CorrelationID = %q, want %q", got.CorrelationID, "req-7f3a")
	}
}

func TestEnvelopeMessageMirrorsTheEnvelope(t *testing.T) {
	e := fixedEnvelope()

	got, err := e.Message()
	if err != nil {
		t.Fatalf("Message() error = %v", err)
	}

	want := broker.Message{
		Queue:     "myapp.emails",
		ID:        "0f8fad5b-d9cb-469f-a165-70867728950e",
		Type:      "send_email",
		Priority:  10,
		Attempt:   2,
		Deferrals: 1,
		Body:      readGolden(t, "envelope_v1.json"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Message() mismatch (-want +got):\n%s", diff)
	}
}

func TestEncodeRefusesAnInvalidPayload(t *testing.T) {
	e := fixedEnvelope()
	e.Payload = json.RawMessage(`{"to":`)
	if body, err := e.Encode(); err == nil {
		t.Errorf("Encode() = %s, want an error", body)
	}
	if msg, err := e.Message(); err == nil {
		t.Errorf("Message() = %+v, want an error", msg)
	}
}

func TestEnqueuedAt(t *testing.T) {
	tests := []struct {
		name string
		ms   uint64
		want time.Time
	}{
		{name: "epoch", ms: 0, want: time.Unix(0, 0)},
		{name: "millisecond precision", ms: 1700000000123, want: time.UnixMilli(1700000000123)},
		{name: "beyond int64 clamps", ms: 1<<64 - 1, want: time.UnixMilli(1<<63 - 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := broker.Envelope{EnqueuedAtMs: tt.ms}
			if got := e.EnqueuedAt(); !got.Equal(tt.want) {
				t.Errorf("EnqueuedAt() = %v, want %v", got, tt.want)
			}
		})
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	for _, name := range []string{"envelope_v1.json", "envelope_v1_correlation.json", "envelope_rust_v0_1.json", "envelope_future_fields.json"} {
		f.Add([]byte(readGoldenString(name)))
	}
	for _, s := range []string{"", "null", "{}", `{"job_id":"nope"}`, "[]", `{"payload":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := broker.DecodeEnvelope(body)
		if err != nil {
			if !errors.Is(err, broker.ErrMalformed) {
				t.Fatalf("DecodeEnvelope() error = %v, want one matching ErrMalformed", err)
			}
			return
		}
		enc, err := e.Encode()
		if err != nil {
			t.Fatalf("Encode() of a decoded envelope: %v", err)
		}
		again, err := broker.DecodeEnvelope(enc)
		if err != nil {
			t.Fatalf("DecodeEnvelope(Encode()) error = %v\nbody: %q", err, enc)
		}
		if diff := cmp.Diff(e, again, equateJSON); diff != "" {
			t.Fatalf("round trip mismatch (-first +second):\n%s", diff)
		}
		enc2, err := again.Encode()
		if err != nil {
			t.Fatalf("second Encode(): %v", err)
		}
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("Encode is not stable:\n%q\n%q", enc, enc2)
		}
	})
}

// DecodeMessage of a message as Envelope.Message makes it allocates
// nothing: the worker decodes every delivery so.
func TestDecodeMessageOfAPublishAllocatesNothing(t *testing.T) {
	e := broker.NewEnvelope("send_email", "myapp.emails", json.RawMessage(`{"to":"ada@example.com"}`), time.UnixMilli(1700000000000))
	e.CorrelationID = "req-1"
	msg, err := e.Message()
	if err != nil {
		t.Fatal(err)
	}
	var got broker.Envelope
	if n := testing.AllocsPerRun(100, func() { got, err = broker.DecodeMessage(msg) }); n != 0 && !raceEnabled {
		t.Errorf("DecodeMessage allocates %v times per call, want 0", n)
	}
	if err != nil || !reflect.DeepEqual(got, e) {
		t.Errorf("DecodeMessage = %+v, %v; want %+v", got, err, e)
	}
	// A body changed after encoding is decoded as it is, not as published.
	msg.Body = bytes.Replace(msg.Body, []byte(`"send_email"`), []byte(`"send_sms"`), 1)
	if got, err = broker.DecodeMessage(msg); err != nil || got.JobType != "send_sms" {
		t.Errorf("DecodeMessage of a changed body = %+v, %v; want job_type send_sms", got, err)
	}
	msg.Body[0] = '['
	if _, err = broker.DecodeMessage(msg); !errors.Is(err, broker.ErrMalformed) {
		t.Errorf("DecodeMessage of a body made malformed in place = %v, want ErrMalformed", err)
	}
}
