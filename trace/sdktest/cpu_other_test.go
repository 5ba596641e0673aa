//go:build !unix

package sdktest_test

import (
	"testing"
	"time"
)

// processCPU is zero where getrusage is missing: the benchmarks then
// report no CPU figures.
func processCPU(*testing.B) time.Duration { return 0 }
