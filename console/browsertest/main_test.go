package browsertest

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if prefix := os.Getenv(childEnv); prefix != "" {
		os.Exit(childWorker(prefix)) // the worker TestAKilledWorkerLeavesTheWorkersPage kills
	}
	goleak.VerifyTestMain(m)
}
