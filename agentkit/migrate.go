package agentkit

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// Migrate creates agentkit's tables in schema (durable.SchemaDefault when
// empty) if they do not exist: agentkit_blobs for a [PGBlobStore], and
// agentkit_budgets and agentkit_budget_holds for runs with
// Limits.Reserve (they must be in the engine's schema). It is idempotent
// and safe to run from several processes at once; when every table
// exists it runs no DDL, so a role with only DML grants can run it.
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
		// CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when
		// the schema exists, which a role owning only its schema lacks.
		var schemaExists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&schemaExists); err != nil {
			return err
		}
		for _, tbl := range agentkitTables {
			var exists bool
			if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s+"."+tbl.name).Scan(&exists); err != nil {
				return err
			}
			if exists {
				continue
			}
			if !schemaExists {
				if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+s); err != nil {
					return err
				}
				schemaExists = true
			}
			if _, err := tx.Exec(ctx, strings.ReplaceAll(tbl.ddl, "{{schema}}", s)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("agentkit: migrate schema %q: %w", schema, err)
	}
	return nil
}

// agentkitTables are the tables Migrate creates, in order.
var agentkitTables = []struct{ name, ddl string }{
	// created_at is when the content was last put (refreshed at most once
	// a minute): Prune spares blobs put recently.
	{"agentkit_blobs", `CREATE TABLE {{schema}}.agentkit_blobs (
	sha256     text PRIMARY KEY,
	size       integer NOT NULL,
	data       bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
)`},
	// A budget row per run with Limits.Reserve (budget.go): its limits
	// (-1 turns and 0 tokens or cost: none), and what the calls drawn from
	// it used.
	{"agentkit_budgets", `CREATE TABLE {{schema}}.agentkit_budgets (
	id              text COLLATE "C" PRIMARY KEY,
	parent_id       text COLLATE "C",
	max_turns       bigint NOT NULL,
	max_tokens      bigint NOT NULL,
	max_cost_micros bigint NOT NULL,
	turns           bigint NOT NULL DEFAULT 0,
	tokens          bigint NOT NULL DEFAULT 0,
	cost_micros     bigint NOT NULL DEFAULT 0,
	created_at      timestamptz NOT NULL DEFAULT now()
)`},
	// What a call in flight reserved, once per budget row it drew from.
	{"agentkit_budget_holds", `CREATE TABLE {{schema}}.agentkit_budget_holds (
	budget_id   text COLLATE "C" NOT NULL,
	hold_id     text COLLATE "C" NOT NULL,
	run_id      text COLLATE "C" NOT NULL,
	turns       bigint NOT NULL,
	tokens      bigint NOT NULL,
	cost_micros bigint NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (budget_id, hold_id)
)`},
}
