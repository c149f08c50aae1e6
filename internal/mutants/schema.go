package main

// The mutant of schema.sql, the whole current schema written out for
// reading: it must build what the migrations build.

func init() {
	register(
		Mutant{
			Name:      "schema/sql-matches-migrations",
			Mechanism: "schema.sql has every index the migrations create",
			Edits: []Edit{{File: "schema.sql",
				Find:    "CREATE INDEX workflows_queue_rate_idx\n    ON {{schema}}.workflows (queue_name, rate_start) WHERE rate_start IS NOT NULL;\n",
				Replace: ""}},
			Pkg: ".", Tests: "TestSchemaSQL",
		},
	)
}
