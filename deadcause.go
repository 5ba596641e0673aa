package queuey

import "strings"

// headerDeadLetterCause carries a dead letter's cause (a DeadLetterCause),
// as the worker that dead-lettered it knew it. Like every x-queuey-*
// header, a replay does not carry it on.
const headerDeadLetterCause = "x-queuey-dead-letter-cause"

// causePrefixes are the first words of the reason each cause's dead
// letter carries; the cause itself does not travel in the message.
var causePrefixes = []struct {
	prefix string
	cause  DeadLetterCause
}{
	{"fatal error: ", CauseFatal},
	{"max attempts (", CauseExhausted},
	{"decode error: ", CauseDecode},
	{"malformed envelope: ", CauseMalformed},
	{"too large: ", CauseTooLarge},
	{"no handler for job type ", CauseNoHandler},
	{"invalid deferral: ", CauseInvalidDeferral},
	{"poison: ", CausePoison},
	{"could not be held for its ", CauseHoldRefused},
}

// CauseOf reads a dead letter's cause from the first words of its reason,
// as the library writes them; "" for a reason the library did not write
// (a dead letter another program made). A dead letter of this version
// carries its cause in a header too, which DeadLetters reads first.
func CauseOf(reason string) DeadLetterCause {
	for _, p := range causePrefixes {
		if strings.HasPrefix(reason, p.prefix) {
			return p.cause
		}
	}
	return ""
}
