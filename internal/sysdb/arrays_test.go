package sysdb

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

// TestArrays: the batch statements' array parameters reach Postgres as
// the plain slices did, NULLs included, in every query exec mode (the
// exec and simple protocol modes know no parameter type, and take the
// slices' driver.Valuer).
func TestArrays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := time.Date(2024, 3, 1, 12, 0, 0, 123456000, time.UTC)
	args := []any{
		textArray{"a", "", `q"u,o{te}`}, int4Array{1, -2}, int8Array{1 << 40}, timeArray{at},
		jsonArray{json.RawMessage(`{"k":1}`), nil},
		valuerArray[pgtype.Text]{{String: "x", Valid: true}, {}},
		valuerArray[pgtype.Timestamptz]{{Time: at, Valid: true}, {}},
		jsonArray(nil), textArray{},
	}
	const query = `SELECT $1::text[]::text, $2::int4[]::text, $3::int8[]::text, $4::timestamptz[] = ARRAY['2024-03-01 12:00:00.123456+00'::timestamptz],
	$5::json[]::text, $6::text[]::text,
	($7::timestamptz[])[1] = '2024-03-01 12:00:00.123456+00' AND ($7::timestamptz[])[2] IS NULL AND cardinality($7::timestamptz[]) = 2,
	$8::json[] IS NULL, $9::text[]::text`
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		var texts, ints, bigs, jsons, nullable, empty string
		var times, nullTimes, nullArray *bool
		err := pgtest.Pool(t).QueryRow(ctx, query, append([]any{mode}, args...)...).
			Scan(&texts, &ints, &bigs, &times, &jsons, &nullable, &nullTimes, &nullArray, &empty)
		require.NoError(t, err, mode)
		require.Equal(t, `{a,"","q\"u,o{te}"}`, texts, mode)
		require.Equal(t, `{1,-2}`, ints, mode)
		require.Equal(t, `{1099511627776}`, bigs, mode)
		require.True(t, *times, mode)
		require.Equal(t, `{"{\"k\":1}",NULL}`, jsons, mode)
		require.Equal(t, `{x,NULL}`, nullable, mode)
		require.True(t, *nullTimes, mode)
		require.True(t, *nullArray, mode)
		require.Equal(t, `{}`, empty, mode)
	}
}

// TestArraysEncodeWithoutBoxing: with its type known, an array parameter
// encodes without an allocation per element (not parallel: AllocsPerRun
// counts the whole process).
func TestArraysEncodeWithoutBoxing(t *testing.T) {
	m := pgtype.NewMap()
	ids := make(textArray, 1000)
	for i := range ids {
		ids[i] = "run"
	}
	plan := m.PlanEncode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, ids)
	require.NotNil(t, plan)
	buf := make([]byte, 0, 16<<10)
	allocs := testing.AllocsPerRun(10, func() {
		var err error
		_, err = plan.Encode(ids, buf[:0])
		require.NoError(t, err)
	})
	require.Less(t, allocs, 10.0, "a 1,000-element array encodes without an allocation per element")
}
