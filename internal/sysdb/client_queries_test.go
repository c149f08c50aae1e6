package sysdb

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClientCreateQueue(t *testing.T) {
	f := newQueueFix(t)
	c := NewClientQueries(f.schema)
	create := func(name string, s QueueSettings, declared string) bool {
		t.Helper()
		created, err := c.CreateQueue(f.ctx, f.pool, CreateQueueParams{Name: name, Settings: s, Declared: declared})
		require.NoError(t, err)
		return created
	}
	settings := func(name string) QueueSettings {
		t.Helper()
		row, err := f.q.Settings(f.ctx, f.pool, name)
		require.NoError(t, err)
		return row.Settings
	}
	declare := func(name string, s QueueSettings, declared string) {
		t.Helper()
		require.NoError(t, f.q.Declare(f.ctx, f.pool, QueueDeclareParams{Name: name, Settings: s, Declared: declared}))
	}
	schemaSet := QueueSettings{GlobalConcurrency: 1, WorkerConcurrency: 2, PartitionConcurrency: 3, RateLimit: 4,
		RatePeriod: 5 * time.Second, ReleaseParked: true}
	code := QueueSettings{WorkerConcurrency: 7}

	require.True(t, create("pinned", schemaSet, DeclaredBySchema))
	require.Equal(t, schemaSet, settings("pinned"))
	require.False(t, create("pinned", QueueSettings{GlobalConcurrency: 9}, DeclaredBySchema), "an existing queue is left alone")
	require.Equal(t, schemaSet, settings("pinned"))

	// The first declaration by code keeps the schema's settings and records
	// itself: the same code again keeps them, a deploy with other code
	// replaces them.
	declare("pinned", code, "v1")
	require.Equal(t, schemaSet, settings("pinned"), "the first executor keeps the schema's settings")
	require.Equal(t, "v1", value[string](f, `SELECT declared FROM {{schema}}.queues WHERE name = 'pinned'`))
	declare("pinned", code, "v1")
	require.Equal(t, schemaSet, settings("pinned"))
	declare("pinned", code, "v2")
	require.Equal(t, code, settings("pinned"), "a deploy declaring other settings replaces them")

	// Created without a declaration: the first executor's settings apply.
	require.True(t, create("open", QueueSettings{}, ""))
	declare("open", code, "v1")
	require.Equal(t, code, settings("open"))

	// A queue created after code declared it is left as code declared it.
	declare("coded", code, "v1")
	require.False(t, create("coded", schemaSet, DeclaredBySchema))
	require.Equal(t, code, settings("coded"))
	require.Equal(t, "v1", value[string](f, `SELECT declared FROM {{schema}}.queues WHERE name = 'coded'`))
}
