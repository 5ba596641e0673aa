package supervisor_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsStayInBounds keeps the runtime packages free of broker and
// telemetry code (ARCHITECTURE.md §2, "Boundaries"): outside the standard
// library, only the listed imports are allowed.
func TestImportsStayInBounds(t *testing.T) {
	allowed := map[string]bool{
		"github.com/benbjohnson/clock": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			stdlib := !strings.Contains(strings.Split(path, "/")[0], ".")
			if !stdlib && !allowed[path] {
				t.Errorf("%s imports %q, which supervisor must not depend on", name, path)
			}
		}
	}
}
