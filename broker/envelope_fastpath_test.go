package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// goldenBodies are the files of testdata the Rust crate and Encode agree on.
var goldenBodies = []string{"envelope_v1.json", "envelope_v1_correlation.json", "envelope_rust_v0_1.json", "envelope_future_fields.json"}

func readTestdata(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// fastBodies are unusual bodies the fast path must take, and take right.
var fastBodies = []string{
	// Whitespace everywhere, and a body ending in spaces.
	" \t\r\n{ \"job_id\" : \"0f8fad5b-d9cb-469f-a165-70867728950e\" ,\n\"job_type\":\"t\", \"queue\" :\"q\",\"attempt\": 1 ,\"enqueued_at_ms\":0,\"payload\": { \"a\" : [ 1 , 2 ] } } \n",
	// Simple escapes, and non-ASCII in strings.
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"a\"b\\c\/d\b\f\n\r\t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":{}}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"ünïcode ☃ 😀","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":"\u2028"}`,
	// The largest numbers, and a payload that is a number.
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":4294967295,"enqueued_at_ms":18446744073709551615,"deferrals":4294967295,"priority":255,"payload":-1.5e+3}`,
}

// trickyBodies are edge cases of the fast path: each must decode exactly as
// decodeEnvelopeReference decodes it, whichever path takes it.
var trickyBodies = []string{
	// An unknown member holding all kinds of JSON: the reference keeps it.
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0,"x":[{"y":"\u00e9\"}"},null,true,false,-0.5E-7]}`,
	// Names given twice in the payload, and invalid UTF-8 in it.
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":{"a":1,"a":2}}`,
	"{\"job_id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"job_type\":\"t\",\"queue\":\"q\",\"attempt\":1,\"enqueued_at_ms\":0,\"payload\":\"\xc3\"}",
	"", " ", "null", " null ", "{}", "[]", `"x"`, "{", "}", `{"job_id":`,
	`{"job_id":"nope"}`, `{"payload":null}`,
	// \u escapes, invalid UTF-8 and controls in strings, bad escapes.
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"a\u0041\ud83d\ude00\ud800","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":{}}`,
	"{\"job_id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"job_type\":\"bad\xff\xfeutf8\",\"queue\":\"q\",\"attempt\":1,\"enqueued_at_ms\":0,\"payload\":\"\xff\"}",
	"{\"job_id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"job_type\":\"t\",\"queue\":\"\xed\xa0\x80\",\"attempt\":1,\"enqueued_at_ms\":0,\"payload\":0}",
	"{\"job_id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"job_type\":\"ctl\x01\",\"queue\":\"q\",\"attempt\":1,\"enqueued_at_ms\":0,\"payload\":0}",
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":"a\x"}`,
	`{"job_id":"0f8fad5b\u002dd9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0}`,
	// Escaped, case-folded, Unicode-folded and duplicate keys.
	`{"job\u005fid":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0}`,
	`{"JOB_ID":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0,"x":"job_id"}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0,"Deferrals":3,"deferralſ":4,"enqueued_at_mſ":5}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0,"deferrals":1,"deferrals":2}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0,"payload":[1]}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0,"job_id":null}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0,"ünknown":{"job_id":1}}`,
	// Nulls.
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"deferrals":null,"priority":null,"payload":null,"correlation_id":null}`,
	`{"job_id":null,"job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":null,"enqueued_at_ms":0,"payload":0}`,
	// Numbers.
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1e0,"enqueued_at_ms":0,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1.0,"enqueued_at_ms":0,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":01,"enqueued_at_ms":0,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":-0,"enqueued_at_ms":-0,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":4294967296,"enqueued_at_ms":0,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":18446744073709551616,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"priority":256,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":01}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":1.}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":1e}`,
	// Wrong types, empty strings, bad ids, missing and trailing things.
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":"1","enqueued_at_ms":0,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"","attempt":0,"enqueued_at_ms":0,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950g","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0}x`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0,}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":0}{}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":[1,]}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":{"a":1,}}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":tru}`,
	"\xef\xbb\xbf{\"job_id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\",\"job_type\":\"t\",\"queue\":\"q\",\"attempt\":1,\"enqueued_at_ms\":0,\"payload\":0}",
	// Nesting deeper than the fast path follows, and beyond encoding/json's limit.
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
	`{"job_id":"0f8fad5b-d9cb-469f-a165-70867728950e","job_type":"t","queue":"q","attempt":1,"enqueued_at_ms":0,"payload":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
}

// checkDecodeMatchesReference fails unless DecodeEnvelope, and the fast path
// when it takes body, decode body exactly as decodeEnvelopeReference does.
// It reports whether the fast path took body.
func checkDecodeMatchesReference(t *testing.T, orig []byte) bool {
	t.Helper()
	body := bytes.Clone(orig) // overwritten below; a fuzz input must not be
	want, wantErr := decodeEnvelopeReference(bytes.Clone(body))

	fast, ok := decodeEnvelopeFast(body)
	got, err := DecodeEnvelope(body)
	for i := range body {
		body[i] = 'x' // the results must not alias the body
	}
	if ok {
		if wantErr != nil {
			t.Fatalf("fast path decodes %q, the reference refuses it: %v", orig, wantErr)
		}
		if diff := cmp.Diff(want, fast); diff != "" {
			t.Fatalf("fast path on %q (-reference +fast):\n%s", orig, diff)
		}
	}
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("DecodeEnvelope(%q) error = %v, reference %v", orig, err, wantErr)
	}
	if err != nil {
		var m, wm *MalformedError
		if !errors.As(err, &m) || !errors.As(wantErr, &wm) || m.Field != wm.Field || m.Reason != wm.Reason {
			t.Fatalf("DecodeEnvelope(%q) error = %#v, reference %#v", orig, err, wantErr)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("DecodeEnvelope(%q) (-reference +got):\n%s", orig, diff)
	}
	checkDecodeMessageMatches(t, orig, want, wantErr)
	return ok
}

// checkDecodeMessageMatches fails unless DecodeMessage decodes body as
// DecodeEnvelope does (want, wantErr), whatever the message's properties
// say: as published, none, or others.
func checkDecodeMessageMatches(t *testing.T, orig []byte, want Envelope, wantErr error) {
	t.Helper()
	for _, props := range []Message{
		{ID: want.JobID, Type: want.JobType, Queue: want.Queue, CorrelationID: want.CorrelationID},
		{},
		{ID: want.JobID, Type: want.JobType + "x", Queue: want.Queue, CorrelationID: want.CorrelationID},
		{ID: want.JobID, Type: want.JobType, Queue: want.Queue, CorrelationID: want.CorrelationID + "x"},
		{ID: strings.ToUpper(want.JobID), Type: want.JobType, Queue: want.Queue},
	} {
		props.Body = bytes.Clone(orig)
		got, err := DecodeMessage(props)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("DecodeMessage(%q) error = %v, DecodeEnvelope's %v", orig, err, wantErr)
		}
		if err != nil {
			var m, wm *MalformedError
			if !errors.As(err, &m) || !errors.As(wantErr, &wm) || m.Field != wm.Field || m.Reason != wm.Reason {
				t.Fatalf("DecodeMessage(%q) error = %#v, DecodeEnvelope's %#v", orig, err, wantErr)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("DecodeMessage(%q) with properties %+v (-DecodeEnvelope +got):\n%s", orig, props, diff)
		}
	}
}

// nesting returns the deepest nesting of arrays and objects in valid JSON.
func nesting(b []byte) int {
	depth, deepest, inStr := 0, 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// checkScanMatchesValid fails unless jsonScan accepts exactly what
// json.Valid accepts, but for nesting beyond maxFastDepth.
func checkScanMatchesValid(t *testing.T, b []byte) {
	t.Helper()
	s := jsonScan{b: b}
	end := s.value(s.ws(0), 0)
	got := end >= 0 && s.ws(end) == len(b)
	want := json.Valid(b)
	if got && !want || !got && want && nesting(b) <= maxFastDepth {
		t.Fatalf("jsonScan valid = %v, json.Valid = %v for %q", got, want, b)
	}
}

func TestDecodeEnvelopeFastPathTakesTheCommonBodies(t *testing.T) {
	for _, name := range goldenBodies {
		// A body with members the envelope does not know is the
		// reference's to read: it keeps them in Unknown.
		if !checkDecodeMatchesReference(t, readTestdata(t, name)) && name != "envelope_future_fields.json" {
			t.Errorf("%s: the fast path gives up on it", name)
		}
	}
	for _, body := range fastBodies {
		if !checkDecodeMatchesReference(t, []byte(body)) {
			t.Errorf("the fast path gives up on %q", body)
		}
	}
	for _, body := range trickyBodies {
		checkDecodeMatchesReference(t, []byte(body))
		checkScanMatchesValid(t, []byte(body))
	}
}

func FuzzDecodeEnvelopeFastPathMatchesReference(f *testing.F) {
	for _, name := range goldenBodies {
		f.Add(readTestdata(f, name))
	}
	for _, body := range append(fastBodies, trickyBodies...) {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkScanMatchesValid(t, body)
		checkDecodeMatchesReference(t, body)
	})
}

// checkEncodeMatchesReference fails unless Encode writes exactly what
// encodeReference writes, or fails with the same error.
func checkEncodeMatchesReference(t *testing.T, e Envelope) {
	t.Helper()
	want, wantErr := e.encodeReference()
	got, err := e.Encode()
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("Encode(%+v) error = %v, reference %v", e, err, wantErr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Encode(%+v) =\n%q\nreference\n%q", e, got, want)
	}
	if fast, ok := e.appendFast(nil); ok && (wantErr != nil || !bytes.Equal(fast, want)) {
		t.Fatalf("appendFast(%+v) = %q, reference %q, %v", e, fast, want, wantErr)
	}
}

func TestEncodeMatchesReference(t *testing.T) {
	e := Envelope{
		JobID: "0f8fad5b-d9cb-469f-a165-70867728950e", JobType: "send_email", Queue: "myapp.emails",
		Attempt: 2, EnqueuedAtMs: 1700000000000, Deferrals: 1, Priority: 10,
		Payload: json.RawMessage(`{"to":"ada@example.com","subject":"<hi> & welcome"}`),
	}
	if got, ok := e.appendFast(nil); !ok || !bytes.Equal(got, readTestdata(t, "envelope_v1.json")) {
		t.Errorf("appendFast = %q, %v; want the golden body", got, ok)
	}
	for _, s := range encodeSeedStrings {
		for _, p := range encodeSeedPayloads {
			e := e
			e.JobType, e.CorrelationID, e.Payload = s, s, json.RawMessage(p)
			checkEncodeMatchesReference(t, e)
		}
	}
	e.Payload = nil
	checkEncodeMatchesReference(t, e)
	e.Payload = json.RawMessage{}
	checkEncodeMatchesReference(t, e)
}

var encodeSeedStrings = []string{
	"", "plain", "<html> & 'quotes'", "q\"b\\s/", "\b\f\n\r\t\x00\x01\x1f\x7f",
	"ünïcode ☃ 😀", "\u2028\u2029", "\xff\xfe", "\xed\xa0\x80", "a\xe2\x80", "\xef\xbf\xbd",
}

var encodeSeedPayloads = []string{
	`{}`, `null`, `"x"`, `[1,2,3]`, `{"a":{"b":[true,false,null]}}`, `-1.5e+3`, `0`,
	" { \"a\" : [ 1 ,\n2 ] }\t", `"<\u2028>"`, "\"\u2028 \xff\"", ` 1 `, `01`, `{"to":`, `[1,]`, ``, ` `,
	`"\x"`, `{"a" 1}`, `nul`, `1.`, `-`, `{}{}`, `{} x`, strings.Repeat("[", 600) + strings.Repeat("]", 600),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
}

func FuzzEncodeMatchesReference(f *testing.F) {
	for i, s := range encodeSeedStrings {
		for j, p := range encodeSeedPayloads {
			f.Add("0f8fad5b-d9cb-469f-a165-70867728950e", s, "q", uint32(i), uint64(1700000000000+j), uint32(j), uint8(i*j), []byte(p), false, s)
		}
	}
	f.Add("", "", "", uint32(0), uint64(1<<64-1), uint32(1<<32-1), uint8(255), []byte(nil), true, "")
	for _, name := range goldenBodies {
		e, err := decodeEnvelopeReference(readTestdata(f, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(e.JobID, e.JobType, e.Queue, e.Attempt, e.EnqueuedAtMs, e.Deferrals, e.Priority, []byte(e.Payload), false, e.CorrelationID)
	}
	f.Fuzz(func(t *testing.T, jobID, jobType, queue string, attempt uint32, enq uint64, deferrals uint32, priority uint8, payload []byte, nilPayload bool, corr string) {
		if nilPayload {
			payload = nil
		}
		checkScanMatchesValid(t, payload)
		checkEncodeMatchesReference(t, Envelope{
			JobID: jobID, JobType: jobType, Queue: queue, Attempt: attempt, EnqueuedAtMs: enq,
			Deferrals: deferrals, Priority: priority, Payload: payload, CorrelationID: corr,
		})
	})
}

// FuzzDecodeEnvelopeFieldsMatchReference is FuzzDecodeEnvelopeFastPathMatchesReference
// on bodies of the envelope's shape, assembled from fuzzed raw JSON pieces,
// so the fuzzer spends its time on the fields rather than on the braces.
func FuzzDecodeEnvelopeFieldsMatchReference(f *testing.F) {
	f.Add(`"0f8fad5b-d9cb-469f-a165-70867728950e"`, `"send_email"`, `"myapp.emails"`, `2`, `1700000000000`, `1`, `10`,
		`{"to":"ada@example.com","subject":"<hi> & welcome"}`, `"req-7f3a"`, `"tenant"`, `{"max_attempts":9}`, "", uint16(0))
	f.Add(`"6BA7B810-9DAD-41D1-80B4-00C04FD430C8"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"ünïcode ☃"`, `4294967295`, `18446744073709551615`, `0`, `255`,
		`[1,-2.5e+3,true,false,null,"\u00e9"]`, `null`, `"JOB_ID"`, `"x"`, " \t\n", uint16(0xffff))
	f.Add(`"0f8fad5b-d9cb-469f-a165-70867728950e"`, `"t"`, `"q"`, `1`, `0`, `null`, `1e2`, `null`, `7`, `"deferrals"`, `-0`, "\r", uint16(0x1234))
	f.Fuzz(func(t *testing.T, jobID, jobType, queue, attempt, enq, deferrals, priority, payload, corr, extraKey, extraValue, space string, layout uint16) {
		// layout: bit i leaves field i out, bits 10-13 say where the extra
		// field goes (or none), bit 14 puts space around the punctuation.
		fields := [][2]string{
			{`"job_id"`, jobID}, {`"job_type"`, jobType}, {`"queue"`, queue}, {`"attempt"`, attempt},
			{`"enqueued_at_ms"`, enq}, {`"deferrals"`, deferrals}, {`"priority"`, priority},
			{`"payload"`, payload}, {`"correlation_id"`, corr},
		}
		sp := ""
		if layout&(1<<14) != 0 {
			sp = space
		}
		var b strings.Builder
		b.WriteString(sp + "{")
		n := 0
		add := func(k, v string) {
			if n > 0 {
				b.WriteString(sp + "," + sp)
			}
			b.WriteString(k + sp + ":" + sp + v)
			n++
		}
		extraAt := int(layout>>10) & 0xf
		for i, kv := range fields {
			if i == extraAt {
				add(extraKey, extraValue)
			}
			if layout&(1<<i) == 0 {
				add(kv[0], kv[1])
			}
		}
		b.WriteString(sp + "}" + sp)
		checkDecodeMatchesReference(t, []byte(b.String()))
	})
}

// uuidPattern is isUUID's definition, as a regular expression.
var uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func TestIsUUIDMatchesItsDefinition(t *testing.T) {
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"
	cases := []string{
		id, strings.ToUpper(id), "00000000-0000-0000-0000-000000000000", "ffffffff-FFFF-ffff-FFFF-ffffffffffff",
		"", id[:35], id + "0", "0f8fad5bd9cb-469f-a165-70867728950e-",
		"0f8fad5b-d9cb-469f-a165-7086-7728950e", // a hyphen where a digit goes
		"0f8fad5b-d9cb-469f-a165-70867728950g", "0f8fad5b-d9cb-469f-a165-70867728950\x00",
		"0f8fad5b_d9cb_469f_a165_70867728950e", "{f8fad5b-d9cb-469f-a165-70867728950}",
		"0f8fad5b-d9cb-469f-a165-70867728950é"[:36],
	}
	for i := range 36 { // every position, with each byte that is close to a digit
		for _, c := range []byte{'-', '/', ':', '@', 'G', '`', 'g', 0x80, 0xff} {
			b := []byte(id)
			b[i] = c
			cases = append(cases, string(b))
		}
	}
	for _, s := range cases {
		if got, want := isUUID(s), uuidPattern.MatchString(s); got != want {
			t.Errorf("isUUID(%q) = %v, want %v", s, got, want)
		}
	}
}

func FuzzIsUUIDMatchesItsDefinition(f *testing.F) {
	f.Add("0f8fad5b-d9cb-469f-a165-70867728950e")
	f.Add("0f8fad5b-d9cb-469f-a165-7086-7728950e")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isUUID(s), uuidPattern.MatchString(s); got != want {
			t.Errorf("isUUID(%q) = %v, want %v", s, got, want)
		}
	})
}

// TestEncodedSizeHintIsExact: Encode allocates the body at its size when
// nothing needs escaping and the payload is compact.
func TestEncodedSizeHintIsExact(t *testing.T) {
	for _, e := range []Envelope{
		{JobID: "0f8fad5b-d9cb-469f-a165-70867728950e", JobType: "t", Queue: "q", Attempt: 1, Payload: json.RawMessage(`{}`)},
		{JobID: "0f8fad5b-d9cb-469f-a165-70867728950e", JobType: "send_email", Queue: "myapp.emails", Attempt: 4294967295,
			EnqueuedAtMs: 18446744073709551615, Deferrals: 10, Priority: 255, Payload: json.RawMessage(`[1,"x",null]`), CorrelationID: "req-7"},
		{JobType: "t", Queue: "q", Attempt: 9, EnqueuedAtMs: 9, Deferrals: 99, Priority: 100},
	} {
		b, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != e.encodedSizeHint() || cap(b) != len(b) && cap(b) > e.encodedSizeHint()+16 {
			t.Errorf("%s: %d bytes, hint %d, capacity %d", b, len(b), e.encodedSizeHint(), cap(b))
		}
	}
	for v, want := range map[uint64]int{0: 1, 9: 1, 10: 2, 99: 2, 100: 3, 1<<64 - 1: 20} {
		if got := decimalLen(v); got != want {
			t.Errorf("decimalLen(%d) = %d, want %d", v, got, want)
		}
	}
}
