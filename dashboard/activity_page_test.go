package dashboard_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestActivityPage: the activity page charts the runs finished by status,
// the queues' depth and the step latency, from the database: a queue
// declared by another engine is there.
func TestActivityPage(t *testing.T) {
	t.Parallel()
	rg := newRig(t, nil)
	ctx := ctxT(t)
	for range 2 {
		h, err := rg.many.Start(ctx, 3, nil)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.NoError(t, err)
	}
	h, err := rg.wf.Start(ctx, "x", nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := rg.e.Inspect(ctx, h.ID())
		return err == nil && info.WaitTopic == "go"
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, rg.e.Cancel(ctx, h.ID(), nil))

	// Another engine on the schema declares a queue and fills it.
	other, err := durable.New(pgtest.Pool(t), rg.cfg)
	require.NoError(t, err)
	q := durable.RegisterQueue(other, "work", nil)
	later := durable.Register(other, "later", func(durable.Context, int) (int, error) { return 0, nil }, nil)
	require.NoError(t, other.Launch(ctx))
	defer func() { _ = other.Shutdown(ctx) }()
	require.NoError(t, q.Pause(ctx))
	for i := range 2 {
		_, err := later.Enqueue(ctx, q, i, nil)
		require.NoError(t, err)
	}

	w := rg.do("GET", "/activity", nil, withBearer)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	body := w.Body.String()
	require.Contains(t, body, `id="finished-chart"`)
	require.Contains(t, body, `<span class="badge ok">success 2</span>`)
	require.Contains(t, body, `<span class="badge off">cancelled 1</span>`)
	require.Contains(t, body, `<span class="badge bad">error 0</span>`)
	require.Contains(t, body, `<g class="ok"><rect`, "a bar of successes")
	require.Contains(t, body, `<title>work: 0 running, 2 ready, 0 delayed</title>`)
	require.Contains(t, body, `id="latency-chart"`)
	require.Regexp(t, `Over \d+ steps of the newest runs`, body)
	require.Contains(t, body, `class="here">Activity</a>`)
}
