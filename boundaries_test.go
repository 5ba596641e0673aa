package queuey_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ARCHITECTURE.md §2's boundaries: only broker/rabbitmq speaks AMQP, only trace
// imports OpenTelemetry, and the runtime packages import neither. Programs
// (examples, cmd, bench), tests and an owner's own subpackages (its test
// support, broker/rabbitmq/rabbittest) may use what they need.
func TestPackageBoundaries(t *testing.T) {
	owners := map[string]string{
		"github.com/rabbitmq/amqp091-go": "broker/rabbitmq",
		"go.opentelemetry.io/otel":       "trace",
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "examples", "cmd", "bench", "testdata", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for prefix, owner := range owners {
				if strings.HasPrefix(p, prefix) && dir != owner && !strings.HasPrefix(dir, owner+"/") {
					t.Errorf("%s imports %s; only %s may", path, p, owner)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
