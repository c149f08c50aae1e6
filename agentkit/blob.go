package agentkit

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// BlobRef points at content stored by reference: tool outputs over
// AgentConfig.BlobThreshold are recorded as a BlobRef instead of inline,
// and loaded again just before each model call.
type BlobRef struct {
	SHA256 string `json:"sha256"` // hex digest of the content
	Size   int    `json:"size"`
}

// ErrBlobNotFound: a referenced blob is not in the store.
var ErrBlobNotFound = errors.New("agentkit: blob not found")

// BlobStore keeps large payloads out of the recorded steps. Put must be
// idempotent (a step may run it again after a crash): content addressing
// makes it so.
type BlobStore interface {
	Put(ctx context.Context, data []byte) (BlobRef, error)
	Get(ctx context.Context, ref BlobRef) ([]byte, error)
}

// TxBlobStore is a [BlobStore] that can also write inside a transaction;
// a transaction tool's large output is then stored in the tool's own
// transaction.
type TxBlobStore interface {
	BlobStore
	PutTx(ctx context.Context, tx pgx.Tx, data []byte) (BlobRef, error)
}

// PGBlobStore is a content-addressed [BlobStore] in the Postgres table
// agentkit_blobs of a schema, created by [Migrate]. Equal contents are
// stored once.
type PGBlobStore struct {
	pool   *pgxpool.Pool
	schema string
	table  string
}

var _ TxBlobStore = (*PGBlobStore)(nil)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// NewPGBlobStore returns the blob store in schema (durable.SchemaDefault
// when empty), usually the engine's schema. Run [Migrate] first.
func NewPGBlobStore(pool *pgxpool.Pool, schema string) (*PGBlobStore, error) {
	schema = cmp.Or(schema, durable.SchemaDefault)
	if pool == nil {
		return nil, fmt.Errorf("%w: NewPGBlobStore needs a pool", durable.ErrInvalidArgument)
	}
	if !identRE.MatchString(schema) {
		return nil, fmt.Errorf("%w: schema %q must be a plain identifier", durable.ErrInvalidArgument, schema)
	}
	return &PGBlobStore{pool: pool, schema: schema, table: pgx.Identifier{schema, "agentkit_blobs"}.Sanitize()}, nil
}

func blobRef(data []byte) BlobRef {
	sum := sha256.Sum256(data)
	return BlobRef{SHA256: hex.EncodeToString(sum[:]), Size: len(data)}
}

// putSQL stores content once; putting it again refreshes created_at when
// it is over a minute old, so a Prune running meanwhile spares it (its
// delete re-checks the row it would remove).
func (s *PGBlobStore) putSQL() string {
	return `INSERT INTO ` + s.table + ` AS b (sha256, size, data) VALUES ($1, $2, $3)
ON CONFLICT (sha256) DO UPDATE SET created_at = now() WHERE b.created_at < now() - interval '1 minute'`
}

// Put stores data and returns its reference.
func (s *PGBlobStore) Put(ctx context.Context, data []byte) (BlobRef, error) {
	ref := blobRef(data)
	if _, err := s.pool.Exec(ctx, s.putSQL(), ref.SHA256, ref.Size, data); err != nil {
		return BlobRef{}, fmt.Errorf("agentkit: put blob: %w", err)
	}
	return ref, nil
}

// PutTx stores data inside tx.
func (s *PGBlobStore) PutTx(ctx context.Context, tx pgx.Tx, data []byte) (BlobRef, error) {
	ref := blobRef(data)
	if _, err := tx.Exec(ctx, s.putSQL(), ref.SHA256, ref.Size, data); err != nil {
		return BlobRef{}, fmt.Errorf("agentkit: put blob: %w", err)
	}
	return ref, nil
}

// PruneBlobsMinAge is the least olderThan [PGBlobStore.Prune] takes: a blob
// is put by a tool step before the step's checkpoint refers to it.
const PruneBlobsMinAge = 10 * time.Minute

// Prune deletes the blobs that no run refers to any more and that were
// last put more than olderThan ago, and returns how many it deleted. Blobs
// are shared between runs (equal contents are stored once), so they are
// not removed with the runs that made them: call Prune after pruning runs
// (durable's Engine.Prune or Config.Retention), e.g. from a daily schedule.
//
// A reference is a BlobRef recorded in the runs of the engine whose schema
// holds the store (keep the store in the engine's schema): in a step's
// output (a tool's result), or in a run's input or output (a history
// handed to a new run). Prune reads all of them, one scan of those
// columns. A reference kept only outside the database (a history saved by
// the application, not in any run) does not keep its blob: a run started
// from it after the blob was pruned fails with [ErrBlobNotFound].
func (s *PGBlobStore) Prune(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < PruneBlobsMinAge {
		return 0, fmt.Errorf("%w: Prune: olderThan %s is below %s", durable.ErrInvalidArgument, olderThan, PruneBlobsMinAge)
	}
	runs := pgx.Identifier{s.schema, "workflows"}.Sanitize()
	steps := pgx.Identifier{s.schema, "steps"}.Sanitize()
	var ok bool
	if err := s.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL", runs, steps).Scan(&ok); err != nil {
		return 0, fmt.Errorf("agentkit: prune blobs: %w", err)
	}
	if !ok {
		return 0, fmt.Errorf("%w: Prune: schema %q holds no durable runs; keep the blob store in the engine's schema", durable.ErrInvalidArgument, s.schema)
	}
	// The references are collected first (a run finishing meanwhile is
	// seen or, if it put a blob, spared by created_at); the delete then
	// re-checks created_at on the row it removes.
	tag, err := s.pool.Exec(ctx, `WITH texts AS (
	SELECT output::text AS t FROM `+steps+` WHERE output::text LIKE '%sha256%'
	UNION ALL SELECT input::text FROM `+runs+` WHERE input::text LIKE '%sha256%'
	UNION ALL SELECT output::text FROM `+runs+` WHERE output::text LIKE '%sha256%'),
live AS MATERIALIZED (
	SELECT DISTINCT m[1] AS sha256 FROM texts, regexp_matches(texts.t, '"sha256"\s*:\s*"([0-9a-f]{64})"', 'g') AS m)
DELETE FROM `+s.table+` b
WHERE b.created_at < now() - $1 * interval '1 millisecond'
	AND NOT EXISTS (SELECT 1 FROM live WHERE live.sha256 = b.sha256)`, olderThan.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("agentkit: prune blobs: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Get returns the content of ref, or an error matching [ErrBlobNotFound].
func (s *PGBlobStore) Get(ctx context.Context, ref BlobRef) ([]byte, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM `+s.table+` WHERE sha256 = $1`, ref.SHA256).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrBlobNotFound, ref.SHA256)
	}
	if err != nil {
		return nil, fmt.Errorf("agentkit: get blob %s: %w", ref.SHA256, err)
	}
	return data, nil
}
