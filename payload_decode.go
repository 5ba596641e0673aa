//go:build !goexperiment.jsonv2

package queuey

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"sync"
	"time"
)

// maxPooledPayload bounds the payloads unmarshalPayload decodes with a
// pooled decoder: its buffer grows to the payload's size and stays so in
// the pool.
const maxPooledPayload = 4 << 10

// payloadDecoder is a json.Decoder over a reader that is reset per payload.
type payloadDecoder struct {
	r   bytes.Reader
	dec *json.Decoder
}

var payloadDecoders = sync.Pool{New: func() any {
	p := &payloadDecoder{}
	p.dec = json.NewDecoder(&p.r)
	return p
}}

// unmarshalPayload is json.Unmarshal(data, v), through a pooled
// json.Decoder when data is small: Unmarshal allocates its decoding state
// afresh (4 allocations, over 200 bytes) for every job.
//
// The result is Unmarshal's. Decode checks the whole value before it
// stores anything, as Unmarshal does, with the same scanner, then runs the
// same unmarshalling on the same bytes (options off, as Unmarshal's are).
// It differs only in its syntax errors, and in reading one value where
// Unmarshal wants all of data to be one: so a payload that is not exactly
// one valid JSON value (the scan failed, and nothing was stored or called,
// or bytes were left over) is decoded again by Unmarshal itself, into v
// made afresh by fresh. A payload out of an envelope is one valid value
// (DecodeEnvelope checked it), so that does not happen in practice.
func unmarshalPayload[T any](data []byte, v *T) (*T, error) {
	if len(data) == 0 || len(data) > maxPooledPayload {
		return v, json.Unmarshal(data, v)
	}
	p := payloadDecoders.Get().(*payloadDecoder)
	p.r.Reset(data)
	start := p.dec.InputOffset()
	err := p.dec.Decode(v)
	used := p.dec.InputOffset() - start
	p.r.Reset(nil) // hold no reference to data (the decoder keeps a copy of it in its buffer)
	if used != int64(len(data)) {
		// The scan failed (the decoder keeps the error: drop it), or
		// something follows the value (it stays buffered: drop it too).
		v = new(T)
		return v, json.Unmarshal(data, v)
	}
	payloadDecoders.Put(p)
	return v, err
}

// payloadPoolable reports whether T's payloads may decode through the
// pooled decoder: whether no UnmarshalJSON or UnmarshalText outside a few
// known ones is reached while decoding a T. Such a method is handed a
// slice of the decoder's buffer, which the pool reuses for the next job,
// where json.Unmarshal hands it a slice of the payload; one that keeps the
// slice (encoding/json says to copy it) would see it change.
func payloadPoolable[T any]() bool {
	return !reachesUnmarshaler(reflect.TypeFor[T](), map[reflect.Type]bool{})
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	// Unmarshalers that copy what they keep.
	copyingUnmarshalers = map[reflect.Type]bool{
		reflect.TypeFor[time.Time]():       true,
		reflect.TypeFor[json.RawMessage](): true,
	}
)

func reachesUnmarshaler(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	if copyingUnmarshalers[t] {
		return false
	}
	if t.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) ||
		reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return true
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return reachesUnmarshaler(t.Elem(), seen)
	case reflect.Map:
		return reachesUnmarshaler(t.Key(), seen) || reachesUnmarshaler(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if reachesUnmarshaler(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}
