package agentkit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/internal/pgtest"
)

// TestMigrateWithLeastPrivilege: agentkit.Migrate works for a role that
// owns only its schema (no CREATE on the database), and, once the table
// exists, for a role with only DML grants on it.
func TestMigrateWithLeastPrivilege(t *testing.T) {
	t.Parallel()
	admin := pgtest.Pool(t)
	ctx := ctxT(t)
	var can bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user").Scan(&can))
	if !can {
		t.Skip("the DATABASE_URL user cannot create roles")
	}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1e12)
	owner, dml := "agentkit_owner_"+suffix, "agentkit_dml_"+suffix
	schema := pgx.Identifier{"agentkit_lp_" + suffix}.Sanitize()
	exec := func(sql string) {
		t.Helper()
		_, err := admin.Exec(context.Background(), sql)
		require.NoError(t, err, sql)
	}
	for _, r := range []string{owner, dml} {
		exec("CREATE ROLE " + r + " LOGIN PASSWORD 'pw' NOSUPERUSER NOCREATEDB NOCREATEROLE")
		t.Cleanup(func() { exec("DROP OWNED BY " + r); exec("DROP ROLE " + r) })
	}
	exec("CREATE SCHEMA " + schema + " AUTHORIZATION " + owner)
	t.Cleanup(func() { exec("DROP SCHEMA " + schema + " CASCADE") })
	connect := func(role string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
		require.NoError(t, err)
		cfg.ConnConfig.User, cfg.ConnConfig.Password = role, "pw"
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	name := "agentkit_lp_" + suffix
	ownerPool := connect(owner)
	require.NoError(t, agentkit.Migrate(ctx, ownerPool, name))
	require.NoError(t, agentkit.Migrate(ctx, ownerPool, name))

	exec("GRANT USAGE ON SCHEMA " + schema + " TO " + dml)
	exec("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + dml)
	dmlPool := connect(dml)
	require.NoError(t, agentkit.Migrate(ctx, dmlPool, name))
	blobs, err := agentkit.NewPGBlobStore(dmlPool, name)
	require.NoError(t, err)
	ref, err := blobs.Put(ctx, []byte("hello"))
	require.NoError(t, err)
	got, err := blobs.Get(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, "hello", string(got))
}
