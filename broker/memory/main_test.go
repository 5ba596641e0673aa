package memory_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The backend starts no goroutine of its own; the clock's timer callbacks
// must all have finished by the end of the run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
