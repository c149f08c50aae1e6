package durable_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Limits of the engine's shape: a type whose methods outgrow one screen of
// names, or a file too long to read in one sitting, wants splitting.
const (
	maxMethods   = 30
	maxFileLines = 800
)

// TestShape fails when a type of the module has more than maxMethods
// methods or a source file more than maxFileLines lines.
func TestShape(t *testing.T) {
	methods := map[string]int{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bench" || d.Name() == "e2e") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := strings.Count(string(b), "\n"); n > maxFileLines {
			t.Errorf("%s has %d lines (at most %d)", path, n, maxFileLines)
		}
		af, err := parser.ParseFile(token.NewFileSet(), path, b, 0)
		if err != nil {
			return err
		}
		for _, decl := range af.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			methods[filepath.Dir(path)+"."+recvName(fd.Recv.List[0].Type)]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var over []string
	for typ, n := range methods {
		if n > maxMethods {
			over = append(over, typ+": "+strconv.Itoa(n)+" methods (at most "+strconv.Itoa(maxMethods)+")")
		}
	}
	sort.Strings(over)
	for _, o := range over {
		t.Errorf("type %s", o)
	}
}

func recvName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvName(x.X)
	case *ast.IndexExpr:
		return recvName(x.X)
	case *ast.IndexListExpr:
		return recvName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}
