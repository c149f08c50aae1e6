package main

// The mutants of the nudge: a wake-up that comes while a run executes (a
// message, a child's finish) makes its next park due at once, so a park
// that lands after its process died is not left waiting for its time.

func init() {
	const wait, core = "internal/sysdb/wait_queries.go", "internal/sysdb/queries.go"
	register(
		Mutant{
			Name:      "nudge/park-reads-it",
			Mechanism: "a park of a nudged run is due at once",
			Edits: []Edit{{File: wait,
				Find:    "wake_at = CASE WHEN w.cancel_requested OR w.nudged THEN now() ELSE $3 END, nudged = NULL,",
				Replace: "wake_at = CASE WHEN w.cancel_requested THEN now() ELSE $3 END, nudged = NULL,"}},
			Pkg: "internal/sysdb", Tests: "^TestWaitParkNudged$",
		},
		Mutant{
			Name:      "nudge/park-clears-it",
			Mechanism: "a park clears the nudge it consumed: the run's next park waits for its time",
			Edits: []Edit{{File: wait,
				Find:    "ELSE $3 END, nudged = NULL,",
				Replace: "ELSE $3 END,"}},
			Pkg: "internal/sysdb", Tests: "^TestWaitParkNudged$",
		},
		Mutant{
			Name:      "nudge/send",
			Mechanism: "a message sent to a run that executes nudges it",
			Edits: []Edit{{File: wait,
				Find:    "\t\tnudged = CASE WHEN executor_id IS NOT NULL THEN true ELSE nudged END,\n\t\tnot_before",
				Replace: "\t\tnot_before"}},
			Pkg: "internal/sysdb", Tests: "^TestWaitParkNudged$",
		},
		Mutant{
			Name:      "nudge/finish-batch",
			Mechanism: "a batch of finishes nudges the parents of its runs that execute",
			Edits: []Edit{{File: core,
				Find:    "\t\tnudged = CASE WHEN p.executor_id IS NOT NULL THEN true ELSE p.nudged END\n",
				Replace: "\t\tnudged = p.nudged\n"}},
			Pkg: "internal/sysdb", Tests: "^TestWaitParkNudged$",
		},
		Mutant{
			Name:      "nudge/finish-batch-locks-parent",
			Mechanism: "a batch of finishes locks every pending parent, so it sees a park of one that commits meanwhile",
			Edits: []Edit{{File: core,
				Find:    "WHERE p.id = k.parent_id AND p.status = 'pending' FOR NO KEY UPDATE) p),",
				Replace: "WHERE p.id = k.parent_id AND p.status = 'pending' AND p.executor_id IS NULL FOR NO KEY UPDATE) p),"}},
			Pkg: "internal/sysdb", Tests: "^TestWaitParkNudged$",
		},
		Mutant{
			Name:      "nudge/wake-parent",
			Mechanism: "a lone finish's WakeParent nudges a parent that executes",
			Edits: []Edit{{File: core,
				Find:    "\t\tnudged = CASE WHEN executor_id IS NOT NULL THEN true ELSE nudged END\n\tWHERE id = $2 AND status = 'pending'",
				Replace: "\t\tnudged = nudged\n\tWHERE id = $2 AND status = 'pending'"}},
			Pkg: "internal/sysdb", Tests: "^TestWaitParkNudged$",
		},
	)
}
