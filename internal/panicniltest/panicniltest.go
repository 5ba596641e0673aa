// Package panicniltest runs a test under GODEBUG=panicnil=1, a setting a
// program may run with, under which a panic(nil) is recovered as nil
// rather than as a *runtime.PanicNilError: code that tells a panic by
// recover's value alone takes it for a normal return there.
package panicniltest

import (
	"os"
	"os/exec"
	"testing"
)

// env marks the process that runs the test with the setting.
const env = "QUEUEY_TEST_PANICNIL"

// Under reports whether t runs with GODEBUG=panicnil=1. When it does not,
// it runs t alone again with the setting, in a process of its own (the
// test binary), fails t if that fails, and reports false: the caller
// returns.
func Under(t *testing.T) bool {
	t.Helper()
	if os.Getenv(env) != "" {
		return true
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GODEBUG=panicnil=1", env+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("with GODEBUG=panicnil=1: %v\n%s", err, out)
	}
	return false
}
