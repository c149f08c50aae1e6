package sysdb

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// TagQueries are the statements of the tags a run's code sets (SetTag).
type TagQueries struct {
	set string
}

// NewTagQueries renders the tag statements for schema.
func NewTagQueries(schema string) *TagQueries {
	r := func(s string) string { return Render(s, schema) }
	return &TagQueries{
		// Records the step and sets the tag in one statement, fenced: only
		// while the run is pending at epoch $2, whose row it locks first
		// (as a change of owner would), and only once (a step already
		// recorded at $3 writes nothing, not even the tag). A tag that
		// would take the run over $8 tags is not set: the step records
		// false, so that a replay refuses it again without asking. An
		// unchanged value writes the step alone, and the last tag removed
		// leaves the column NULL.
		// $1 workflow_id, $2 epoch, $3 pos, $4 step name, $5 key, $6 value
		// (NULL: remove the tag), $7 started_at, $8 most tags.
		// Returns whether the tag fits and whether the step was written; no
		// row: the run is not pending at $2.
		set: r(`WITH w AS (
	SELECT id, tags AS old, CASE WHEN $6::text IS NULL THEN coalesce(tags, '{}') - $5::text
		ELSE coalesce(tags, '{}') || jsonb_build_object($5::text, $6::text) END AS new
	FROM {{schema}}.workflows WHERE id = $1 AND epoch = $2 AND status = 'pending'
	FOR NO KEY UPDATE),
t AS (
	SELECT id, old, nullif(new, '{}') AS new, (SELECT count(*) FROM jsonb_object_keys(new)) <= $8 AS fits FROM w),
ins AS (
	INSERT INTO {{schema}}.steps (workflow_id, pos, name, status, output, attempts, started_at)
	SELECT id, $3, $4, 'done', to_json(fits), 1, $7 FROM t
	ON CONFLICT (workflow_id, pos) DO NOTHING
	RETURNING workflow_id),
upd AS (
	UPDATE {{schema}}.workflows x SET tags = t.new
	FROM t WHERE x.id = t.id AND t.fits AND t.old IS DISTINCT FROM t.new AND EXISTS (SELECT 1 FROM ins))
SELECT fits, EXISTS (SELECT 1 FROM ins) FROM t`),
	}
}

// SetTagParams are one SetTag: the step it is recorded as, the run's
// epoch, and the tag.
type SetTagParams struct {
	WorkflowID string
	Epoch      int64
	Pos        int
	Name       string // the step's
	Key        string
	Value      string // "": remove the tag
	StartedAt  time.Time
	MaxTags    int // the most tags a run may have
}

// SetTagRow says what SetTag did.
type SetTagRow struct {
	Owned   bool // the run is pending at the epoch; if not, nothing was written
	Fits    bool // the run has at most MaxTags tags with it; if not, the tag was not set
	Written bool // the step was recorded (and the tag set, if it fits) by this call
}

// SetTag records the step of a SetTag and, if it fits, sets the tag, both
// or neither.
func (q *TagQueries) SetTag(ctx context.Context, db DBTX, p SetTagParams) (SetTagRow, error) {
	row := SetTagRow{Owned: true}
	err := db.QueryRow(ctx, q.set, p.WorkflowID, p.Epoch, p.Pos, p.Name, p.Key, nullIfEmpty(p.Value), p.StartedAt, p.MaxTags).
		Scan(&row.Fits, &row.Written)
	if errors.Is(err, pgx.ErrNoRows) {
		return SetTagRow{}, nil
	}
	return row, err
}
