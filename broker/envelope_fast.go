package broker

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// The fast paths in this file handle the bodies queuey and the Rust crate write
// without reflection: decoding through the strict codec costs about ten times
// as much and allocates, where DecodeMessage of a delivery allocates nothing
// (BenchmarkDecodeMessage; the memory backend's jobs/s on the benchmark table
// pay it on every job). Each either produces exactly what the strict
// reference produces or gives up (ok false), and the caller then runs the
// reference; FuzzDecodeEnvelopeFastPathMatchesReference and
// FuzzEncodeMatchesReference hold them to that. A payload is checked by the
// codec's own validator (jsontext.Value.IsValid), which allocates nothing.

// Indexes of the envelope's fields in decodeEnvelopeFast's bookkeeping.
const (
	fJobID = iota
	fJobType
	fQueue
	fAttempt
	fEnqueuedAtMs
	fDeferrals
	fPriority
	fPayload
	fCorrelationID
	fUnknown  // a member the envelope does not know: kept in Unknown
	fFallback // a name that differs from a field's only in case
)

// envelopeFieldNames are the JSON names, indexed by the constants above.
var envelopeFieldNames = [...]string{
	"job_id", "job_type", "queue", "attempt", "enqueued_at_ms",
	"deferrals", "priority", "payload", "correlation_id",
}

// requiredFields is the set of fields DecodeEnvelope calls missing.
const requiredFields = 1<<fJobID | 1<<fJobType | 1<<fQueue | 1<<fAttempt | 1<<fEnqueuedAtMs | 1<<fPayload

// envelopeField classifies an object key (ASCII, no escapes).
func envelopeField(key []byte) int {
	switch string(key) {
	case "job_id":
		return fJobID
	case "job_type":
		return fJobType
	case "queue":
		return fQueue
	case "attempt":
		return fAttempt
	case "enqueued_at_ms":
		return fEnqueuedAtMs
	case "deferrals":
		return fDeferrals
	case "priority":
		return fPriority
	case "payload":
		return fPayload
	case "correlation_id":
		return fCorrelationID
	}
	for _, name := range envelopeFieldNames {
		if len(key) == len(name) && bytes.EqualFold(key, []byte(name)) {
			return fFallback
		}
	}
	return fUnknown
}

// maxFastDepth is the nesting the fast path follows before it gives up,
// well inside encoding/json's limit of 10000.
const maxFastDepth = 512

// isJSONSpace reports whether c is JSON whitespace.
func isJSONSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// strSpecial marks the bytes a JSON string scan must stop at: controls
// (invalid), the quote, the backslash and, for field strings, non-ASCII.
var strSpecial = func() (t [256]uint8) {
	for c := 0; c < 0x20; c++ {
		t[c] = 1
	}
	t['"'], t['\\'] = 1, 1
	for c := 0x80; c < 0x100; c++ {
		t[c] = 2
	}
	return t
}()

// jsonScan validates JSON exactly as encoding/json's scanner does, within
// maxFastDepth; it also notes whether it skipped whitespace.
type jsonScan struct {
	b     []byte
	space bool
}

// after reads what follows a member or an element ending at i: a comma
// (the next one's start, not end) or closer (the index past it, end), or
// anything else (-1, end).
func (s *jsonScan) after(i int, closer byte) (next int, end bool) {
	if i = s.ws(i); i >= len(s.b) {
		return -1, true
	}
	switch s.b[i] {
	case ',':
		return s.ws(i + 1), false
	case closer:
		return i + 1, true
	}
	return -1, true
}

// ws returns the index of the first non-space byte at or after i.
func (s *jsonScan) ws(i int) int {
	j := i
	for j < len(s.b) && isJSONSpace(s.b[j]) {
		j++
	}
	if j != i {
		s.space = true
	}
	return j
}

// value returns the end of the JSON value starting at b[i] (no leading
// space), or -1 when there is none or the fast path gives up.
func (s *jsonScan) value(i, depth int) int {
	b := s.b
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return s.str(i)
	case c == '{':
		if depth >= maxFastDepth {
			return -1
		}
		i = s.ws(i + 1)
		if i < len(b) && b[i] == '}' {
			return i + 1
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			if i = s.str(i); i < 0 {
				return -1
			}
			if i = s.ws(i); i >= len(b) || b[i] != ':' {
				return -1
			}
			if i = s.value(s.ws(i+1), depth+1); i < 0 {
				return -1
			}
			var end bool
			if i, end = s.after(i, '}'); end {
				return i
			}
		}
	case c == '[':
		if depth >= maxFastDepth {
			return -1
		}
		i = s.ws(i + 1)
		if i < len(b) && b[i] == ']' {
			return i + 1
		}
		for {
			if i = s.value(i, depth+1); i < 0 {
				return -1
			}
			var end bool
			if i, end = s.after(i, ']'); end {
				return i
			}
		}
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || '0' <= c && c <= '9':
		return number(b, i)
	}
	return -1
}

// literal returns the end of lit at b[i], or -1.
func literal(b []byte, i int, lit string) int {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit)
	}
	return -1
}

// digits returns the index of the first non-digit at or after i.
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// number returns the end of the JSON number at b[i], or -1.
func number(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

// str returns the end of the JSON string whose quote is at b[i], or -1.
// Any byte from 0x20 up is allowed, as encoding/json allows it.
func (s *jsonScan) str(i int) int {
	b := s.b
	for i++; i < len(b); {
		c := b[i]
		if strSpecial[c] != 1 {
			i++
			continue
		}
		switch c {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		default: // a control character
			return -1
		}
	}
	return -1
}

// fieldString scans the JSON string value whose quote is at b[i], for a
// string field. It returns its end, whether it holds escapes, and ok false
// when the fast path leaves it to encoding/json: a \u escape, invalid
// UTF-8 (which encoding/json replaces), or invalid JSON.
func fieldString(b []byte, i int) (end int, escaped, ok bool) {
	start := i + 1
	nonASCII := false
	for i = start; i < len(b); {
		switch strSpecial[b[i]] {
		case 0:
			i++
			continue
		case 2:
			nonASCII = true
			i++
			continue
		}
		switch b[i] {
		case '"':
			if nonASCII && !utf8.Valid(b[start:i]) {
				return 0, false, false
			}
			return i + 1, escaped, true
		case '\\':
			if i+1 >= len(b) {
				return 0, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				escaped = true
				i += 2
			default:
				return 0, false, false
			}
		default:
			return 0, false, false
		}
	}
	return 0, false, false
}

// appendUnescaped appends the contents of a JSON string that fieldString
// accepted (quotes excluded), its simple escapes decoded.
func appendUnescaped(dst, raw []byte) []byte {
	for {
		k := bytes.IndexByte(raw, '\\')
		if k < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:k]...)
		c := raw[k+1]
		switch c {
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		}
		dst = append(dst, c)
		raw = raw[k+2:]
	}
}

// fieldUint scans the JSON number at b[i] for an unsigned field of at most
// limit. It gives up (ok false) on anything but digits in range: a sign, a
// fraction, an exponent or a leading zero are encoding/json's to refuse.
// The caller checks that a delimiter follows.
func fieldUint(b []byte, i int, limit uint64) (v uint64, end int, ok bool) {
	if i >= len(b) || b[i] < '0' || b[i] > '9' {
		return 0, 0, false
	}
	if b[i] == '0' {
		return 0, i + 1, true
	}
	for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
		d := uint64(b[i] - '0')
		if v > (limit-d)/10 {
			return 0, 0, false
		}
		v = v*10 + d
	}
	return v, i, true
}

// decodeEnvelopeFast decodes the common shape of body: one JSON object
// whose keys are plain ASCII, each field at most once, string fields
// without \u escapes and of valid UTF-8, unsigned fields as plain digits,
// a payload the strict codec accepts, and no other members. It returns ok false
// for anything else, and for any body DecodeEnvelope refuses, leaving the
// result and the error to decodeEnvelopeReference.
func decodeEnvelopeFast(body []byte) (e Envelope, ok bool) {
	return decodeEnvelopeFastSharing(body, nil)
}

// decodeEnvelopeFastSharing is decodeEnvelopeFast, with the string fields
// taken from msg's properties when they are spelled the same, and the
// payload a slice of body rather than a copy, when msg is not nil.
func decodeEnvelopeFastSharing(body []byte, msg *Message) (e Envelope, ok bool) {
	s := jsonScan{b: body}
	var (
		seen     uint16
		spans    [fCorrelationID + 1][2]int // string fields: content start, end
		escaped  bool                       // some string field holds escapes
		strLen   int
		payStart int
		payEnd   int
	)
	i := s.ws(0)
	if i >= len(body) || body[i] != '{' {
		return Envelope{}, false
	}
	i = s.ws(i + 1)
	for {
		if i >= len(body) || body[i] != '"' {
			return Envelope{}, false // includes {}, which lacks every field
		}
		ks := i + 1
		i = ks
		for i < len(body) && strSpecial[body[i]] == 0 {
			i++
		}
		if i >= len(body) || body[i] != '"' {
			return Envelope{}, false // escapes, controls or non-ASCII
		}
		f := envelopeField(body[ks:i])
		if i = s.ws(i + 1); i >= len(body) || body[i] != ':' {
			return Envelope{}, false
		}
		if i = s.ws(i + 1); i >= len(body) {
			return Envelope{}, false
		}
		if f < fUnknown {
			if seen&(1<<f) != 0 {
				return Envelope{}, false // a duplicate: the reference refuses it
			}
			seen |= 1 << f
		}
		switch f {
		case fJobID, fJobType, fQueue, fCorrelationID:
			if body[i] != '"' {
				return Envelope{}, false
			}
			end, esc, ok := fieldString(body, i)
			if !ok {
				return Envelope{}, false
			}
			spans[f] = [2]int{i + 1, end - 1}
			strLen += end - 2 - i
			escaped = escaped || esc
			i = end
		case fAttempt, fDeferrals:
			v, end, ok := fieldUint(body, i, math.MaxUint32)
			if !ok {
				return Envelope{}, false
			}
			if f == fAttempt {
				e.Attempt = uint32(v)
			} else {
				e.Deferrals = uint32(v)
			}
			i = end
		case fEnqueuedAtMs:
			v, end, ok := fieldUint(body, i, math.MaxUint64)
			if !ok {
				return Envelope{}, false
			}
			e.EnqueuedAtMs = v
			i = end
		case fPriority:
			v, end, ok := fieldUint(body, i, math.MaxUint8)
			if !ok {
				return Envelope{}, false
			}
			e.Priority = uint8(v)
			i = end
		case fPayload:
			payStart = i
			if i = s.value(i, 1); i < 0 || !jsontext.Value(body[payStart:i]).IsValid() {
				return Envelope{}, false
			}
			payEnd = i
		default: // an unknown member, kept by the reference, or a case twin

			return Envelope{}, false
		}
		if i = s.ws(i); i >= len(body) {
			return Envelope{}, false
		}
		if body[i] == '}' {
			break
		}
		if body[i] != ',' {
			return Envelope{}, false
		}
		i = s.ws(i + 1)
	}
	if s.ws(i+1) != len(body) || seen&requiredFields != requiredFields || e.Attempt == 0 {
		return Envelope{}, false
	}

	if msg != nil {
		if !escaped && sameString(body, spans[fJobID], msg.ID) && sameString(body, spans[fJobType], msg.Type) &&
			sameString(body, spans[fQueue], msg.Queue) && sameString(body, spans[fCorrelationID], msg.CorrelationID) {
			// As published: no allocation at all.
			e.JobID, e.JobType, e.Queue, e.CorrelationID = msg.ID, msg.Type, msg.Queue, msg.CorrelationID
			if checkFields(e) != nil {
				return Envelope{}, false
			}
			e.Payload = json.RawMessage(body[payStart:payEnd:payEnd])
			return e, true
		}
	}

	// One allocation for the string fields, one for the payload.
	var sb strings.Builder
	sb.Grow(strLen)
	var offs [fCorrelationID + 2]int
	var tmp []byte
	for _, f := range [...]int{fJobID, fJobType, fQueue, fCorrelationID} {
		offs[f] = sb.Len()
		raw := body[spans[f][0]:spans[f][1]]
		if escaped {
			tmp = appendUnescaped(tmp[:0], raw)
			raw = tmp
		}
		sb.Write(raw)
	}
	all := sb.String()
	e.JobID = all[offs[fJobID]:offs[fJobType]]
	e.JobType = all[offs[fJobType]:offs[fQueue]]
	e.Queue = all[offs[fQueue]:offs[fCorrelationID]]
	e.CorrelationID = all[offs[fCorrelationID]:]
	if checkFields(e) != nil {
		return Envelope{}, false
	}
	if msg != nil {
		e.Payload = json.RawMessage(body[payStart:payEnd:payEnd])
	} else {
		e.Payload = append(json.RawMessage(nil), body[payStart:payEnd]...)
	}
	return e, true
}

// sameString reports whether body[span[0]:span[1]] is s; a field that is
// absent (a zero span) is the empty string.
func sameString(body []byte, span [2]int, s string) bool {
	return string(body[span[0]:span[1]]) == s
}

// encodedSizeHint is the length of Encode's output when no string needs
// escaping and the payload is compact (else more is appended, or less):
// the body is allocated once, at its size, and the memory backend keeps it
// so, its last acks' bodies included.
func (e Envelope) encodedSizeHint() int {
	n := len(`{"job_id":"","job_type":"","queue":"","attempt":,"enqueued_at_ms":,"deferrals":,"priority":,"payload":}`) +
		len(e.JobID) + len(e.JobType) + len(e.Queue) +
		decimalLen(uint64(e.Attempt)) + decimalLen(e.EnqueuedAtMs) + decimalLen(uint64(e.Deferrals)) + decimalLen(uint64(e.Priority))
	if e.Payload == nil {
		n += len("null")
	} else {
		n += len(e.Payload)
	}
	if e.CorrelationID != "" {
		n += len(`,"correlation_id":""`) + len(e.CorrelationID)
	}
	return n
}

// decimalLen is the number of decimal digits of v.
func decimalLen(v uint64) int {
	n := 1
	for ; v >= 10; v /= 10 {
		n++
	}
	return n
}

// appendFast appends Encode's output to dst, or returns ok false when
// encodeReference must decide: a string of invalid UTF-8, a payload that
// is not valid JSON (for the reference's error) or nests deeper than the
// fast path follows, or unknown members to write back.
func (e Envelope) appendFast(dst []byte) ([]byte, bool) {
	if len(e.Unknown) > 0 {
		return nil, false
	}
	var id, typ, queue bool
	dst = append(dst, `{"job_id":`...)
	dst, id = appendJSONString(dst, e.JobID)
	dst = append(dst, `,"job_type":`...)
	dst, typ = appendJSONString(dst, e.JobType)
	dst = append(dst, `,"queue":`...)
	dst, queue = appendJSONString(dst, e.Queue)
	dst = append(dst, `,"attempt":`...)
	dst = strconv.AppendUint(dst, uint64(e.Attempt), 10)
	dst = append(dst, `,"enqueued_at_ms":`...)
	dst = strconv.AppendUint(dst, e.EnqueuedAtMs, 10)
	dst = append(dst, `,"deferrals":`...)
	dst = strconv.AppendUint(dst, uint64(e.Deferrals), 10)
	dst = append(dst, `,"priority":`...)
	dst = strconv.AppendUint(dst, uint64(e.Priority), 10)
	dst = append(dst, `,"payload":`...)
	dst, valid := appendPayload(dst, e.Payload)
	if !valid {
		return nil, false
	}
	corr := true
	if e.CorrelationID != "" {
		dst = append(dst, `,"correlation_id":`...)
		dst, corr = appendJSONString(dst, e.CorrelationID)
	}
	return append(dst, '}'), id && typ && queue && corr
}

// appendPayload appends p compacted, null for nil, or returns ok false for
// the reference to refuse it (or to take a nesting deeper than
// maxFastDepth).
func appendPayload(dst []byte, p json.RawMessage) ([]byte, bool) {
	if p == nil {
		return append(dst, "null"...), true
	}
	s := jsonScan{b: p}
	end := s.value(s.ws(0), 0)
	if end < 0 || s.ws(end) != len(p) || !jsontext.Value(p).IsValid() {
		return nil, false
	}
	if !s.space {
		return append(dst, p...), true
	}
	buf := bytes.NewBuffer(dst)
	if json.Compact(buf, p) != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

// appendJSONString appends s quoted as the strict codec quotes it: \" \\
// \b \f \n \r \t, other controls as \u00XX, everything else (U+2028
// and HTML's characters included) as it is. It reports false for invalid
// UTF-8, which the codec refuses.
func appendJSONString(dst []byte, s string) ([]byte, bool) {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return dst, false
			}
			i += size
			continue
		}
		if strSpecial[c] == 0 {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '\\', '"':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), true
}
