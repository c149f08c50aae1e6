package durablevet_test

import (
	"path/filepath"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/durable-go/durable/durablevet"
)

// TestRules runs the analyzer on the packages of testdata: each has bad
// code, flagged with the expected message (a "want" comment), and good
// code that must not be flagged. testdata is a module in a workspace with
// the repository's root module, so it uses the real durable API.
func TestRules(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs("testdata") // analysistest sets GOWORK from it
	if err != nil {
		t.Fatal(err)
	}
	analysistest.Run(t, dir, durablevet.Analyzer, "./...")
}
