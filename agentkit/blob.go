package agentkit

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"

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
	pool  *pgxpool.Pool
	table string
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
	return &PGBlobStore{pool: pool, table: pgx.Identifier{schema, "agentkit_blobs"}.Sanitize()}, nil
}

// Migrate creates agentkit's table (agentkit_blobs) in schema
// (durable.SchemaDefault when empty) if it does not exist. It is
// idempotent and safe to run from several processes at once. agentkit
// needs it only with a [PGBlobStore].
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	schema = cmp.Or(schema, durable.SchemaDefault)
	if !identRE.MatchString(schema) {
		return fmt.Errorf("%w: schema %q must be a plain identifier", durable.ErrInvalidArgument, schema)
	}
	s := pgx.Identifier{schema}.Sanitize()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Serialise concurrent migrations; CREATE ... IF NOT EXISTS alone
		// can still collide on the catalog.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('agentkit.migrate:' || $1))", schema); err != nil {
			return err
		}
		// Nothing to do runs no DDL, so a role with only DML grants works;
		// CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when
		// the schema exists, which a role owning only its schema lacks.
		var schemaExists, tableExists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1), to_regclass($2) IS NOT NULL",
			schema, s+".agentkit_blobs").Scan(&schemaExists, &tableExists); err != nil {
			return err
		}
		if tableExists {
			return nil
		}
		if !schemaExists {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+s); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s+`.agentkit_blobs (
	sha256     text PRIMARY KEY,
	size       integer NOT NULL,
	data       bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("agentkit: migrate schema %q: %w", schema, err)
	}
	return nil
}

func blobRef(data []byte) BlobRef {
	sum := sha256.Sum256(data)
	return BlobRef{SHA256: hex.EncodeToString(sum[:]), Size: len(data)}
}

// Put stores data and returns its reference.
func (s *PGBlobStore) Put(ctx context.Context, data []byte) (BlobRef, error) {
	ref := blobRef(data)
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.table+` (sha256, size, data) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING`, ref.SHA256, ref.Size, data)
	if err != nil {
		return BlobRef{}, fmt.Errorf("agentkit: put blob: %w", err)
	}
	return ref, nil
}

// PutTx stores data inside tx.
func (s *PGBlobStore) PutTx(ctx context.Context, tx pgx.Tx, data []byte) (BlobRef, error) {
	ref := blobRef(data)
	_, err := tx.Exec(ctx, `INSERT INTO `+s.table+` (sha256, size, data) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING`, ref.SHA256, ref.Size, data)
	if err != nil {
		return BlobRef{}, fmt.Errorf("agentkit: put blob: %w", err)
	}
	return ref, nil
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
