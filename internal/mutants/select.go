package main

// The mutants of Select: what wakes a parked Select, what it consumes and
// records, and how it chooses.

func init() {
	register(
		Mutant{
			Name:      "select/message-wakes",
			Mechanism: "a message on any topic of a parked Select wakes it",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "coalesce(wait_topic = $2 OR 'msg:' || $2 = ANY(wait_any), false) AND status = 'pending'",
				Replace: "coalesce(wait_topic = $2, false) AND status = 'pending'"}},
			Pkg: "./internal/sysdb", Tests: "TestWaitSelect",
		},
		Mutant{
			Name:      "select/event-wakes",
			Mechanism: "an event being set wakes the Selects parked on it",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "\tWHERE wait_any @> ARRAY['event:' || length($1::text) || ':' || $1::text || $5::text]",
				Replace: "\tWHERE wait_any @> ARRAY['event:' || $1::text || $5::text]"}},
			Pkg: "./internal/sysdb", Tests: "TestWaitSelect",
		},
		Mutant{
			Name:      "select/finish-wakes",
			Mechanism: "a run's finish wakes its parent parked in a Select with a case on it",
			Edits: []Edit{{File: "internal/sysdb/queries.go",
				Find:    "AND coalesce(p.wait_topic = ANY(k.keys) OR p.wait_any && k.keys, false) AS wake",
				Replace: "AND coalesce(p.wait_topic = ANY(k.keys), false) AS wake"}, {File: "internal/sysdb/queries.go",
				Find:    "coalesce(wait_topic = 'child:' || $1::text OR 'child:' || $1::text = ANY(wait_any), false)\n\t\t\tTHEN now()",
				Replace: "coalesce(wait_topic = 'child:' || $1::text, false)\n\t\t\tTHEN now()"}},
			Pkg: ".", Tests: "TestSelect/Parked",
		},
		Mutant{
			Name:      "select/receive-prefers-first",
			Mechanism: "of several topics with messages, a Select takes the first listed",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "`m.topic = ANY($3::text[])`, `array_position($3::text[], m.topic), `)",
				Replace: "`m.topic = ANY($3::text[])`)"}},
			Pkg: "./internal/sysdb", Tests: "TestWaitSelect",
		},
		Mutant{
			Name:      "select/receive-records-case",
			Mechanism: "the message a Select takes is recorded with the case of its topic",
			Edits: []Edit{{File: "internal/sysdb/wait_queries.go",
				Find:    "json_build_object('case', ($7::int[])[array_position($3::text[], msg.topic)]",
				Replace: "json_build_object('case', ($7::int[])[1]"}},
			Pkg: "./internal/sysdb", Tests: "TestWaitSelect",
		},
		Mutant{
			Name:      "select/look-at-every-case",
			Mechanism: "a case that is not ready does not hide the ready ones after it",
			Edits: []Edit{{File: "select.go",
				Find:    "\t\t\tif a == nil {\n\t\t\t\tcontinue\n\t\t\t}",
				Replace: "\t\t\tif a == nil {\n\t\t\t\treturn nil, nil\n\t\t\t}"}},
			Pkg: ".", Tests: "TestSelect/Parked",
		},
		Mutant{
			Name:      "select/waits-cleared",
			Mechanism: "a parked Select's waits are cleared when its run is claimed again",
			Edits: []Edit{{File: "internal/sysdb/recovery_queries.go",
				Find:    "\twake_at = NULL, wait_topic = NULL, wait_any = NULL, updated_at = now()\nWHERE w.id = ANY(ARRAY(SELECT c.id FROM (",
				Replace: "\twake_at = NULL, wait_topic = NULL, updated_at = now()\nWHERE w.id = ANY(ARRAY(SELECT c.id FROM ("}},
			Pkg: ".", Tests: "TestSelect/Parked",
		},
		Mutant{
			Name:      "select/only-chosen-has-value",
			Mechanism: "a case the Select did not choose has no value",
			Edits: []Edit{{File: "select.go",
				Find:    "\tif !c.chosen {\n\t\treturn nil,",
				Replace: "\tif false {\n\t\treturn nil,"}},
			Pkg: ".", Tests: "TestSelect/InMemory",
		},
		Mutant{
			Name:      "select/distinct-cases",
			Mechanism: "a Select refuses two cases on one wait",
			Edits: []Edit{{File: "select.go",
				Find:    "\t\tif seen[k] {",
				Replace: "\t\tif false && seen[k] {"}},
			Pkg: ".", Tests: "TestSelect/BadInput",
		},
	)
}
