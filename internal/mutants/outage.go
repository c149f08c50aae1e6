package main

// The mutants of riding out a database that is away: transient errors
// (a lost connection, a server shutting down) are retried, and a
// transaction step's serialization failures and deadlocks re-run it.

func init() {
	register(
		Mutant{
			Name:      "outage/retry-transient",
			Mechanism: "a write that failed with a transient error (the database away) is tried again with backoff (retryTransient)",
			Edits: []Edit{{File: "outage.go",
				Find:    "\t\tif err == nil || !isTransient(err) {\n\t\t\treturn err, false\n\t\t}\n",
				Replace: "\t\tif true {\n\t\t\treturn err, false\n\t\t}\n"}},
			Pkg: ".", Tests: "^TestDatabaseOutageMidRun$",
		},
		Mutant{
			Name:      "txstep/conflict-retries",
			Mechanism: "a transaction step's serialization failure or deadlock (40001, 40P01) re-runs the whole transaction",
			Edits: []Edit{{File: "step.go",
				Find:    "\t\tcase isConflict(err) && conflicts < o.ConflictRetries:\n",
				Replace: "\t\tcase false && isConflict(err) && conflicts < o.ConflictRetries:\n"}},
			Pkg: ".", Tests: "^TestTxStep$/^RetriesConflicts$",
		},
	)
}
