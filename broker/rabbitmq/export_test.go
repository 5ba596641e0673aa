package rabbitmq

import "time"

// SetAnswerCap sets answerCap for a test, before its backend is dialed,
// and restores it when the test ends (after its backend is closed).
func SetAnswerCap(t interface{ Cleanup(func()) }, d time.Duration) {
	old := answerCap
	answerCap = d
	t.Cleanup(func() { answerCap = old })
}

// Written is how many bytes b's publishing connection has written to its
// socket (0 before it is connected).
func Written(b *Backend) int64 {
	b.mu.Lock()
	s := b.pub.conn
	b.mu.Unlock()
	if s == nil {
		return 0
	}
	return s.written()
}
