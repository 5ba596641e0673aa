package broker_test

import (
	"testing"

	"github.com/queuey-go/queuey/broker"
)

// BenchmarkDecodeEnvelope decodes the golden body with a correlation id, the
// shape every delivery carries.
func BenchmarkDecodeEnvelope(b *testing.B) {
	body := []byte(readGoldenString("envelope_v1_correlation.json"))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := broker.DecodeEnvelope(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeEnvelope encodes the envelope of that golden body.
func BenchmarkEncodeEnvelope(b *testing.B) {
	e := fixedEnvelope()
	e.CorrelationID = "req-7f3a"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}
