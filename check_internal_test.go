package durable

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

// TestCheckReadsReadOnly: the transaction Check and LoadHistory read in
// refuses every write, whatever the role may do.
func TestCheckReadsReadOnly(t *testing.T) {
	t.Parallel()
	e, err := New(pgtest.Pool(t), &Config{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		err := readOnly(context.Background(), e, iso, func(tx pgx.Tx) error {
			_, err := tx.Exec(context.Background(), "CREATE TEMP TABLE check_wrote (n int)")
			return err
		})
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "25006", pe.Code) // read_only_sql_transaction
	}
}
