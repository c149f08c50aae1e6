package durable_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/hooks"
)

// TestGroupCommitManyConcurrentRuns runs many runs at once, so checkpoints
// and finishes go out as multi-row statements, with and without group
// commit; every step is recorded once and every result is right.
func TestGroupCommitManyConcurrentRuns(t *testing.T) {
	t.Parallel()
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprintf("disable=%v", disable), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var wf *durable.Workflow[int, string]
			e := b.engine(t, func(c *durable.Config) { hooks.Set(c, hooks.Knobs{NoGroupCommit: disable}) }, func(e *durable.Engine) {
				wf = durable.Register(e, "five", func(wctx durable.Context, in int) (string, error) {
					out := ""
					for i := 0; i < 5; i++ {
						s, err := durable.Step(wctx, fmt.Sprintf("s%d", i), func(ctx context.Context) (string, error) {
							return fmt.Sprintf("%d.%d;", in, i), nil
						}, nil)
						if err != nil {
							return "", err
						}
						out += s
					}
					return out, nil
				}, nil)
			})
			ctx := ctxT(t)
			const n = 120
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h, err := wf.Start(ctx, i, nil)
					if err == nil {
						var out string
						out, err = h.Result(ctx)
						if err == nil && out != fmt.Sprintf("%d.0;%d.1;%d.2;%d.3;%d.4;", i, i, i, i, i) {
							err = fmt.Errorf("run %d returned %q", i, out)
						}
						if err == nil {
							var steps []durable.StepRecord
							steps, err = e.ListSteps(ctx, h.ID())
							if err == nil && len(steps) != 5 {
								err = fmt.Errorf("run %d has %d steps", i, len(steps))
							}
						}
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
		})
	}
}
