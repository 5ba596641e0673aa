package queuey_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// serviceMain is a service that uses every public package of the library.
const serviceMain = `package main

import (
	"github.com/queuey-go/queuey"
	"github.com/queuey-go/queuey/broker/memory"
	"github.com/queuey-go/queuey/broker/rabbitmq"
	"github.com/queuey-go/queuey/trace"
)

func main() {
	_ = queuey.Queue{Name: "q"}
	_ = memory.New(nil)
	_ = rabbitmq.Options{}
	_, _ = trace.New(nil)
}
`

// notPulled are the modules that only the library's benchmarks, fault
// tests, examples and SDK tests use, each in a module of its own: a service
// that requires queuey must pull none of them.
var notPulled = []string{
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters",
	"github.com/queuey-go/queuey/",
	"github.com/RichardKnop/machinery",
	"github.com/hibiken/asynq",
	"github.com/riverqueue/river",
	"github.com/jackc/pgx",
	"github.com/redis/go-redis",
}

// A fresh module that requires queuey (replaced by this checkout) pulls
// only what the library's packages import: its module graph holds nothing
// of the benchmarks, the chaos harness, the examples or the OpenTelemetry
// SDK. Run it with -v to see the graph.
func TestAServiceThatRequiresQueueyPullsNothingElse(t *testing.T) {
	t.Parallel()
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "go.mod"), "module example.com/service\n\ngo 1.26.0\n\n"+
		"require github.com/queuey-go/queuey v0.0.0\n\nreplace github.com/queuey-go/queuey => "+repo+"\n")
	write(t, filepath.Join(dir, "main.go"), serviceMain)
	goIn(t, dir, "mod", "tidy")
	modules := strings.Fields(goIn(t, dir, "list", "-m", "-f", "{{.Path}}", "all"))
	t.Logf("go list -m all:\n%s", strings.Join(modules, "\n"))
	t.Logf("go mod graph:\n%s", goIn(t, dir, "mod", "graph"))
	built := goIn(t, dir, "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".")
	t.Logf("modules compiled into the service:\n%s", strings.Join(uniqueLines(built), "\n"))
	if len(modules) < 5 {
		t.Fatalf("the graph has only %v: the check would prove nothing", modules)
	}
	for _, m := range modules {
		for _, bad := range notPulled {
			if strings.HasPrefix(m, bad) {
				t.Errorf("a service that requires queuey pulls %s", m)
			}
		}
	}
}

// goIn runs the go command in dir and returns its standard output.
func goIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

// write writes a file for a test, failing it on error.
func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// uniqueLines returns the non-empty lines of s, each once, in order.
func uniqueLines(s string) []string {
	seen := map[string]bool{}
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" && !seen[l] {
			seen[l] = true
			lines = append(lines, l)
		}
	}
	return lines
}
