package trace_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The core must not depend on OpenTelemetry: only this package may.
func TestTheCoreDoesNotImportOpenTelemetry(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test", "-f", "{{.ImportPath}}", "github.com/queuey-go/queuey").Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list found only %v: the check would prove nothing", deps)
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "go.opentelemetry.io/") || strings.HasPrefix(dep, "github.com/queuey-go/queuey/trace") {
			t.Errorf("the root package (or its tests) depends on %s", dep)
		}
	}
}
