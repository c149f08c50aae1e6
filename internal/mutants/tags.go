package main

// The mutants of tags: the statement of SetTag (its fence, once, the
// limit), the tags every start writes, the listing's filter and its plan,
// and the checks of the API.

func init() {
	const set, list = "internal/sysdb/tag_queries.go", "internal/sysdb/list_queries.go"
	register(
		Mutant{
			Name:      "tags/set-fenced",
			Mechanism: "SetTag writes only while the run is owned at the writer's epoch: a run taken over is left alone",
			Edits: []Edit{{File: set,
				Find:    "WHERE id = $1 AND epoch = $2 AND status = 'pending'",
				Replace: "WHERE id = $1 AND status = 'pending'"}},
			Pkg: "internal/sysdb", Tests: "TestSetTag$",
		},
		Mutant{
			Name:      "tags/set-fenced-engine",
			Mechanism: "a SetTag of an executor that lost the run writes neither tag nor step, and stops its code (ErrFenced)",
			Edits: []Edit{{File: set,
				Find:    "WHERE id = $1 AND epoch = $2 AND status = 'pending'",
				Replace: "WHERE id = $1 AND status = 'pending'"}},
			Pkg: ".", Tests: "TestSetTagFenced",
		},
		Mutant{
			Name:      "tags/set-pending",
			Mechanism: "SetTag writes nothing to a finished run",
			Edits: []Edit{{File: set,
				Find:    "WHERE id = $1 AND epoch = $2 AND status = 'pending'",
				Replace: "WHERE id = $1 AND epoch = $2"}},
			Pkg: "internal/sysdb", Tests: "TestSetTag$",
		},
		Mutant{
			Name:      "tags/set-once",
			Mechanism: "SetTag sets the tag only with the step it records: a step already recorded writes the tag no more",
			Edits: []Edit{{File: set,
				Find:    " AND t.old IS DISTINCT FROM t.new AND EXISTS (SELECT 1 FROM ins))",
				Replace: " AND t.old IS DISTINCT FROM t.new)"}},
			Pkg: "internal/sysdb", Tests: "TestSetTag$",
		},
		Mutant{
			// Two guards, either enough: a replay returns what the step
			// recorded without a statement, and the statement sets no tag
			// for a step already recorded.
			Name:      "tags/replay-writes-nothing",
			Mechanism: "a run resumed by replay passes a recorded SetTag without setting the tag again",
			Edits: []Edit{
				{File: "tags.go",
					Find:    "\tif rec != nil {\n\t\treturn recordedTag(r, key, rec.output)\n\t}\n",
					Replace: "\tif false {\n\t\treturn recordedTag(r, key, rec.output)\n\t}\n"},
				{File: set,
					Find:    " AND t.old IS DISTINCT FROM t.new AND EXISTS (SELECT 1 FROM ins))",
					Replace: " AND t.old IS DISTINCT FROM t.new)"},
			},
			Pkg: ".", Tests: "^TestSetTag$",
		},
		Mutant{
			Name:      "tags/step-recorded",
			Mechanism: "SetTag records its step with the tag (else its own check finds no record and halts the run)",
			Edits: []Edit{{File: set,
				Find:    "SELECT id, $3, $4, 'done', to_json(fits), 1, $7 FROM t\n",
				Replace: "SELECT id, $3, $4, 'done', to_json(fits), 1, $7 FROM t WHERE false\n"}},
			Pkg: ".", Tests: "^TestSetTag$",
		},
		Mutant{
			Name:      "tags/set-limit",
			Mechanism: "SetTag does not take a run over MaxTags tags",
			Edits: []Edit{{File: set,
				Find:    "(SELECT count(*) FROM jsonb_object_keys(new)) <= $8 AS fits",
				Replace: "true AS fits"}},
			Pkg: "internal/sysdb", Tests: "TestSetTag$",
		},
		Mutant{
			Name:      "tags/replay-refused",
			Mechanism: "a replayed SetTag that was refused (over MaxTags) is refused again, as its first execution was",
			Edits: []Edit{{File: "tags.go",
				Find:    "\t\treturn r.halt(&DecodeError{WorkflowID: r.id, What: fmt.Sprintf(\"SetTag %q\", key), Err: err})\n\t}\n\treturn tagRefused(key, fits)",
				Replace: "\t\treturn r.halt(&DecodeError{WorkflowID: r.id, What: fmt.Sprintf(\"SetTag %q\", key), Err: err})\n\t}\n\treturn nil"}},
			Pkg: ".", Tests: "^TestSetTag$",
		},
		Mutant{
			Name:      "tags/check-count",
			Mechanism: "a start with more than MaxTags tags is refused (ErrInvalidArgument) and writes nothing",
			Edits: []Edit{{File: "tags.go",
				Find:    "\tif len(tags) > MaxTags {",
				Replace: "\tif len(tags) > 2*MaxTags {"}},
			Pkg: ".", Tests: "TestTagsBadInput",
		},
		Mutant{
			Name:      "tags/check-value",
			Mechanism: "a start with a bad tag value (empty, overlong, not UTF-8) is refused and writes nothing",
			Edits: []Edit{{File: "tags.go",
				Find:    "\treturn checkName(fmt.Sprintf(\"%s value of key %q\", what, key), value)",
				Replace: "\treturn nil"}},
			Pkg: ".", Tests: "TestTagsBadInput",
		},
		Mutant{
			Name:      "tags/start-owned",
			Mechanism: "a run this executor starts (Start, a child, a continuation) is inserted with its tags",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "VALUES ($1, $2, 'pending', $3, $4, 1, $5, $6, $7, $8, $9::jsonb)",
				Replace: "VALUES ($1, $2, 'pending', $3, $4, 1, $5, $6, $7, $8, NULL::jsonb)"}},
			Pkg: "internal/sysdb", Tests: "TestRunsStartWithTags",
		},
		Mutant{
			Name:      "tags/enqueue",
			Mechanism: "an enqueued run is inserted with its tags",
			Edits: []Edit{{File: "internal/sysdb/queue_queries.go",
				Find:    "$12, $13::jsonb FROM q",
				Replace: "$12, NULL::jsonb FROM q"}},
			Pkg: "internal/sysdb", Tests: "TestRunsStartWithTags",
		},
		Mutant{
			Name:      "tags/fork-copies",
			Mechanism: "a fork copies its source's tags unless ForkOpts.Tags is set",
			Edits: []Edit{{File: "internal/sysdb/control_queries.go",
				Find:    "CASE WHEN $7::bool THEN $6::jsonb ELSE tags END",
				Replace: "$6::jsonb"}},
			Pkg: "internal/sysdb", Tests: "TestRunsStartWithTags",
		},
		Mutant{
			Name:      "tags/continue-keeps",
			Mechanism: "a continuation keeps the run's tags, SetTag's included, unless StartOpts.Tags is set",
			Edits: []Edit{{File: "continue.go",
				Find:    "\t\t\to.Tags = link.Tags // the run's tags, SetTag's included\n",
				Replace: ""}},
			Pkg: ".", Tests: "TestTagsAtStart",
		},
		Mutant{
			Name:      "tags/filter",
			Mechanism: "a listing by tags keeps only the runs that have every tag given",
			Edits: []Edit{{File: list,
				Find:    "where = append(where, \"tags @> \"+arg(string(b))+\"::jsonb\")",
				Replace: "where = append(where, \"tags ?| ARRAY(SELECT jsonb_object_keys(\"+arg(string(b))+\"::jsonb))\")"}},
			Pkg: "internal/sysdb", Tests: "TestListByTags$",
		},
		Mutant{
			Name:      "tags/filter-engine",
			Mechanism: "ListWorkflows passes ListParams.Tags on to the listing",
			Edits: []Edit{{File: "list.go",
				Find:    "\tf.Tags = p.Tags\n",
				Replace: ""}},
			Pkg: ".", Tests: "TestListWorkflowsByTags$",
		},
		Mutant{
			Name:      "tags/filter-planned-for-a-page",
			Mechanism: "a small page of a listing by tags is planned for a default page, so it reads workflows_tags_idx, not the history",
			Edits: []Edit{{File: list,
				Find:    " || len(f.Tags) > 0) && f.Limit < minStatusPlanRows",
				Replace: ") && f.Limit < minStatusPlanRows"}},
			Pkg: "internal/sysdb", Tests: "TestListByTagsReadsTheTagsIndex",
		},
		Mutant{
			Name:      "tags/index-partial",
			Mechanism: "workflows_tags_idx holds tagged runs only: an untagged run writes no entry",
			Edits: []Edit{{File: "migrations/024_tags.sql",
				Find:    "USING gin (tags jsonb_path_ops) WHERE tags IS NOT NULL;",
				Replace: "USING gin (tags jsonb_path_ops);"}},
			Pkg: "internal/sysdb", Tests: "TestTagsKeepUpdatesHOT",
		},
	)
}
