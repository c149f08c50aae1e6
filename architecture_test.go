package durable_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The layers of the engine, bottom up (docs/architecture.md): a package
// may import the layers below it, never one above. Each entry names the
// packages of a layer, relative to the module root.
var layers = [][]string{
	{"internal/clock"},
	{"internal/hooks", "internal/service", "internal/testsignal", "internal/errs"},
	{"internal/sysdb"},
	{"internal/notify", "internal/commit"},
	{"internal/lease", "internal/dispatch", "internal/schedule", "internal/stream", "internal/recovery", "internal/maintenance"},
	{"."},
	{"agentkit"},
	{"dashboard"},
	{"cmd/durable"},
}

const modulePath = "github.com/durable-go/durable"

// imports returns the module-internal imports of the non-test files of dir.
func moduleImports(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == modulePath {
				out["."] = true
			} else if rest, ok := strings.CutPrefix(p, modulePath+"/"); ok {
				out[rest] = true
			}
		}
	}
	return out
}

// TestLayering fails when a package imports a layer above its own: an
// internal service importing the root package, the data layer importing a
// service. A package under internal/ missing from layers fails too, so a
// new package gets its place in the picture.
func TestLayering(t *testing.T) {
	level := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			level[p] = i
		}
	}
	dirs, err := filepath.Glob("internal/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		goFiles, _ := filepath.Glob(filepath.Join(d, "*.go"))
		var src int
		for _, f := range goFiles {
			if !strings.HasSuffix(f, "_test.go") {
				src++
			}
		}
		// Test-only packages (chaos, the benchmarks' proccpu) and commands
		// (mutants) are outside the engine.
		if src == 0 || d == "internal/mutants" || d == "internal/chaos" || d == "internal/sysdbtest" || d == "internal/pgtest" || d == "internal/proctest" || d == "internal/proccpu" {
			continue
		}
		if _, ok := level[d]; !ok {
			t.Errorf("package %s has no layer: add it to layers and to docs/architecture.md", d)
		}
	}
	for pkg, lv := range level {
		if _, err := os.Stat(pkg); err != nil {
			continue
		}
		for imp := range moduleImports(t, pkg) {
			il, known := level[imp]
			switch {
			case imp == "internal/pgtest" || imp == "internal/proctest" || imp == "internal/sysdbtest" || imp == "internal/proccpu":
				t.Errorf("%s imports the test-only package %s", pkg, imp)
			case !known:
				continue // a package of the same subtree (agentkit's own), checked by its own rules
			case il >= lv && imp != pkg:
				t.Errorf("%s (layer %d) imports %s (layer %d): a package may only import layers below its own", pkg, lv, imp, il)
			}
		}
	}
}
