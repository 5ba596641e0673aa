package rabbitmq

import "time"

// SetAnswerCap sets answerCap for a test, before its backend is dialed,
// and restores it when the test ends (after its backend is closed).
func SetAnswerCap(t interface{ Cleanup(func()) }, d time.Duration) {
	old := answerCap
	answerCap = d
	t.Cleanup(func() { answerCap = old })
}
