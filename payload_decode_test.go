package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// payloadProbe covers what unmarshalling can do: nested values, a
// json.RawMessage, an interface, a text unmarshaler and a json.Unmarshaler
// that can fail.
type payloadProbe struct {
	N   int               `json:"n"`
	S   string            `json:"s,omitempty"`
	F   float64           `json:"f"`
	U   uint8             `json:"u"`
	L   []int             `json:"l"`
	M   map[string]any    `json:"m"`
	R   json.RawMessage   `json:"r"`
	A   any               `json:"a"`
	P   *payloadProbe     `json:"p"`
	E   probeUnmarshaler  `json:"e"`
	Arr [2]string         `json:"arr"`
	Tag map[string]string `json:"tag"`
}

type probeUnmarshaler struct{ V string }

func (p *probeUnmarshaler) UnmarshalJSON(b []byte) error {
	if string(b) == `"fail"` {
		return errors.New("probe refuses fail")
	}
	p.V = string(b)
	return nil
}

// checkPayloadDecode holds unmarshalPayload to json.Unmarshal: the same
// value and the same error, text and type.
func checkPayloadDecode(t *testing.T, data []byte) {
	t.Helper()
	want := new(payloadProbe)
	wantErr := json.Unmarshal(data, want)
	got, gotErr := unmarshalPayload(data, new(payloadProbe))
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || reflect.TypeOf(gotErr) != reflect.TypeOf(wantErr) {
		t.Fatalf("%q: error %T %v, json.Unmarshal's %T %v", data, gotErr, gotErr, wantErr, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decoded %+v, json.Unmarshal %+v", data, got, want)
	}
	var gotTE, wantTE *json.UnmarshalTypeError
	if errors.As(gotErr, &gotTE) && errors.As(wantErr, &wantTE) && *gotTE != *wantTE {
		t.Fatalf("%q: type error %+v, json.Unmarshal's %+v", data, *gotTE, *wantTE)
	}
}

var payloadCases = []string{
	`{"n":1}`, `{"n":1,"s":"x","f":1.5e3,"u":255,"l":[1,2],"m":{"k":[null,true]},"r":{"a": 1},"a":[1,"x"],"p":{"n":2},"e":"ok","arr":["a","b","c"],"tag":{"a":"b"}}`,
	`null`, `{}`, `[]`, `1`, `"s"`, `true`, ` {"n":1} `, `{"n":1}x`, `{"n":1} {"n":2}`, `{"n":1}}`,
	`{"n":"1"}`, `{"n":1.5}`, `{"u":256}`, `{"u":-1}`, `{"p":{"p":{"n":"x"}}}`, `{"l":{}}`, `{"m":[]}`,
	`{"e":"fail"}`, `{"e":"fail","n":"x"}`, `{"n":"x","e":"fail"}`, `{"N":3,"S":"case"}`, `{"tag":{"a":1}}`,
	`{"n":1`, `{"n":}`, `{"n":01}`, `{"s":"\ud800"}`, "{\"s\":\"\xff\"}", `{"s":"a\u0000b"}`, ``, ` `, `}`, `nul`, `12 `,
	`{"n":1e400}`, `{"f":1e400}`, strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"a":` + strings.Repeat(`[`, 5000) + strings.Repeat(`]`, 5000) + `}`,
	`{"s":"` + strings.Repeat("y", 5000) + `"}`, // over maxPooledPayload
}

func TestUnmarshalPayloadMatchesUnmarshal(t *testing.T) {
	// Twice over, interleaved, so that a pooled decoder left in a bad
	// state by one case would show in the next.
	for range 2 {
		for _, c := range payloadCases {
			checkPayloadDecode(t, []byte(c))
		}
	}
}

func FuzzUnmarshalPayloadMatchesUnmarshal(f *testing.F) {
	for _, c := range payloadCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkPayloadDecode(t, data)
		checkPayloadDecode(t, data) // again, with a decoder from the pool
	})
}

// retainer keeps the bytes it is given, against encoding/json's advice.
type retainer struct{ kept []byte }

func (r *retainer) UnmarshalJSON(b []byte) error {
	r.kept = b
	return nil
}

type textKeeper string

func (k *textKeeper) UnmarshalText(b []byte) error {
	*k = textKeeper(b)
	return nil
}

type listNode struct {
	N    int
	Next *listNode
}

type retainJob struct {
	V retainer `json:"v"`
}

func (retainJob) Kind() string { return "retain" }
func (retainJob) Queue() Queue { return Queue{Name: "q"} }
func (timeJob) Kind() string   { return "time" }
func (timeJob) Queue() Queue   { return Queue{Name: "q"} }

type timeJob struct {
	At  time.Time       `json:"at"`
	Raw json.RawMessage `json:"raw"`
	N   int             `json:"n"`
}

func TestPayloadPoolable(t *testing.T) {
	for _, c := range []struct {
		name string
		got  bool
		want bool
	}{
		{"plain", payloadPoolable[struct{ N int }](), true},
		{"time and raw JSON", payloadPoolable[timeJob](), true},
		{"a cycle", payloadPoolable[listNode](), true},
		{"anything", payloadPoolable[struct{ A any }](), true},
		{"an UnmarshalJSON", payloadPoolable[retainJob](), false},
		{"deep inside", payloadPoolable[struct{ M map[string][]*retainer }](), false},
		{"an UnmarshalText key", payloadPoolable[map[textKeeper]int](), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: poolable %t, want %t", c.name, c.got, c.want)
		}
	}
}

// A job type whose UnmarshalJSON keeps its bytes is decoded by
// json.Unmarshal, from the payload: the next job does not change them.
func TestAnUnmarshalerThatKeepsItsBytesKeepsThem(t *testing.T) {
	h := newTypedHandler[retainJob](HandlerFunc[retainJob](func(context.Context, retainJob, JobContext) error { return nil }))
	first, err := h.decode(json.RawMessage(`{"v":"first job"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.decode(json.RawMessage(`{"v":"other job"}`)); err != nil {
		t.Fatal(err)
	}
	if got := string(first.(*retainJob).V.kept); got != `"first job"` {
		t.Errorf("the first job's kept bytes read %s, want \"first job\"", got)
	}
}
