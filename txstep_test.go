package durable_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
)

// TestTxStep covers transaction steps: a conflict re-runs the whole
// transaction, an error rolls it back, and only the engine commits it.
func TestTxStep(t *testing.T) {
	t.Parallel()

	// RetriesConflicts: a serialization failure or a deadlock re-runs
	// the whole transaction, and only the committed attempt's rows remain.
	t.Run("RetriesConflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		_, err := b.pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s.ledger (attempt int, code text)", b.schema))
		require.NoError(t, err)
		var attempts atomic.Int32
		var isolation atomic.Value
		var wf *durable.Workflow[string, int]
		b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "conflicting", func(wctx durable.Context, code string) (int, error) {
				attempts.Store(0)
				return durable.TxStep(wctx, "write-ledger", func(ctx context.Context, tx pgx.Tx) (int, error) {
					n := int(attempts.Add(1))
					var iso string
					if err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil {
						return 0, err
					}
					isolation.Store(iso)
					if _, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s.ledger VALUES ($1, $2)", b.schema), n, code); err != nil {
						return 0, err
					}
					if n < 3 { // the first two attempts fail as a real conflict would
						_, err := tx.Exec(ctx, fmt.Sprintf("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '%s'; END $$", code))
						return 0, err
					}
					return n, nil
				}, &durable.TxStepOpts{IsoLevel: pgx.Serializable, Retry: &durable.RetryPolicy{MaxAttempts: 1}})
			}, nil)
		})
		for _, code := range []string{"40001", "40P01"} {
			h, err := wf.Start(ctx, code, nil)
			require.NoError(t, err)
			n, err := h.Result(ctx)
			require.NoError(t, err, code)
			require.Equal(t, 3, n, "two conflicts, then success (%s)", code)
			require.Equal(t, "serializable", isolation.Load())
			var rows, attempt int
			require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*), max(attempt) FROM %s.ledger WHERE code = $1", b.schema), code).Scan(&rows, &attempt))
			require.Equal(t, 1, rows, "only the committed attempt's row exists")
			require.Equal(t, 3, attempt)
		}
	})

	// ErrorRollsBack: an application error rolls the transaction
	// back, is recorded, and leaves no rows.
	t.Run("ErrorRollsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		_, err := b.pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s.items (v int)", b.schema))
		require.NoError(t, err)
		var wf *durable.Workflow[int, int]
		b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "rollback", func(wctx durable.Context, in int) (int, error) {
				return durable.TxStep(wctx, "insert-then-fail", func(ctx context.Context, tx pgx.Tx) (int, error) {
					if _, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s.items VALUES (1)", b.schema)); err != nil {
						return 0, err
					}
					return 0, durable.Permanent(fmt.Errorf("out of stock"))
				}, nil)
			}, nil)
		})
		h, err := wf.Start(ctx, 1, nil)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorIs(t, err, durable.ErrPermanent)
		require.ErrorContains(t, err, "out of stock")
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.items", b.schema)).Scan(&n))
		require.Zero(t, n)
	})

	// OwnCommitRefused: a function that commits the engine's
	// transaction itself gets a clear permanent error.
	t.Run("OwnCommitRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var wf *durable.Workflow[int, int]
		b.engine(t, nil, func(e *durable.Engine) {
			wf = durable.Register(e, "self-commit", func(wctx durable.Context, in int) (int, error) {
				return durable.TxStep(wctx, "commits", func(ctx context.Context, tx pgx.Tx) (int, error) {
					return 1, tx.Commit(ctx)
				}, nil)
			}, nil)
		})
		ctx := ctxT(t)
		h, err := wf.Start(ctx, 1, nil)
		require.NoError(t, err)
		_, err = h.Result(ctx)
		require.ErrorIs(t, err, durable.ErrPermanent)
		require.ErrorContains(t, err, "the engine commits it")
	})
}
