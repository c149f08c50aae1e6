package durablevet_test

import (
	"slices"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/durable-go/durable/durablevet"
)

// TestExamples runs the analyzer on the repository's examples and their
// tests: they must have no finding (a finding fails the test as an
// unexpected diagnostic), and the analyzer must have found their
// workflows.
func TestExamples(t *testing.T) {
	t.Parallel()
	var checked []string
	for _, r := range analysistest.Run(t, "..", durablevet.Analyzer, "./examples/...") {
		if res, ok := r.Action.Result.(*durablevet.Result); ok {
			checked = append(checked, res.Workflows...)
		}
	}
	t.Logf("workflows checked: %q", checked)
	for _, want := range []string{
		"(*github.com/durable-go/durable/examples/crashdemo.app).pipeline",
		"(*github.com/durable-go/durable/examples/onboarding.app).onboard",
	} {
		if !slices.Contains(checked, want) {
			t.Errorf("the analyzer did not check the example workflow %s", want)
		}
	}
}
