package queuey_test

import (
	"testing"

	"github.com/queuey-go/queuey"
)

// CauseOf reads the cause of a dead letter that carries none in its
// headers (one of an earlier version, or of the Rust crate) from its
// reason's first words, and no cause from words the library never writes.
func TestCauseOfReadsTheReasonsTheLibraryWrites(t *testing.T) {
	for reason, want := range map[string]queuey.DeadLetterCause{
		"fatal error: upstream said no":                       queuey.CauseFatal,
		"max attempts (3) exhausted after attempt 3: boom":    queuey.CauseExhausted,
		"decode error: json: cannot unmarshal":                queuey.CauseDecode,
		"malformed envelope: not JSON":                        queuey.CauseMalformed,
		"too large: 20000000 bytes, over the worker's limit":  queuey.CauseTooLarge,
		`no handler for job type "x" after waiting 1h0m0s`:    queuey.CauseNoHandler,
		"invalid deferral: hold for defer: too long":          queuey.CauseInvalidDeferral,
		"poison: its worker died 3 times while it ran alone":  queuey.CausePoison,
		"could not be held for its retry (1s) after 5 tries":  queuey.CauseHoldRefused,
		"dead-lettered by hand":                               "",
		"":                                                    "",
		"Fatal error: capitalised, so not the library's text": "",
	} {
		if got := queuey.CauseOf(reason); got != want {
			t.Errorf("CauseOf(%q) = %q, want %q", reason, got, want)
		}
	}
}
