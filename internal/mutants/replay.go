package main

// The mutants of the replay-only mode, history replay and durable.Check.

func init() {
	register(
		Mutant{
			Name:      "replay/name-check",
			Mechanism: "a replayed call is compared with the step recorded at its position (NonDeterminismError)",
			Edits: []Edit{{File: "run.go",
				Find:    "\t\tif rec.name != name {",
				Replace: "\t\tif false {"}},
			Pkg: ".", Tests: "TestCheckFindsIncompatibleBuilds$|TestExportHistory$",
		},
		Mutant{
			Name:      "replay/frontier",
			Mechanism: "a replay ends at the first call with no record instead of running it (and writing its checkpoint)",
			Edits: []Edit{{File: "run.go",
				Find:    "\tif r.replaying != nil {\n\t\t// The end of the recorded history",
				Replace: "\tif false {\n\t\t// The end of the recorded history"}},
			Pkg: ".", Tests: "TestCheckFindsIncompatibleBuilds$|TestCheckIsReadOnly$|TestReplayHistoryNeedsNoDatabase$",
		},
		Mutant{
			Name:      "replay/intent-frontier",
			Mechanism: "a replay ends at an intent in flight instead of resolving it",
			Edits: []Edit{{File: "step.go",
				Find:    "\tif r.replaying != nil {\n\t\t// An effect in flight",
				Replace: "\tif false {\n\t\t// An effect in flight"}},
			Pkg: ".", Tests: "TestReplayHistoryNeedsNoDatabase$",
		},
		Mutant{
			Name:      "replay/sleep",
			Mechanism: "a replayed Sleep waits for nothing (it would sleep or park the run: a write)",
			Edits: []Edit{{File: "wait.go",
				Find:    "rp.replaying != nil {",
				Replace: "rp.replaying != nil && false {"}},
			Pkg: ".", Tests: "TestCheckFindsIncompatibleBuilds$|TestReplayHistoryNeedsNoDatabase$",
		},
		Mutant{
			Name:      "replay/sleep-frontier",
			Mechanism: "a replay ends at a sleep with no record after it: the run waits there",
			Edits: []Edit{{File: "replay.go",
				Find:    "rec != nil || r.replaying.finished {",
				Replace: "rec != nil || true {"}},
			Pkg: ".", Tests: "TestReplayHistoryNeedsNoDatabase$",
		},
		Mutant{
			Name:      "replay/finished-waits",
			Mechanism: "the waits of a finished run's history are over: its replay goes past them",
			Edits: []Edit{{File: "replay.go",
				Find:    "rec != nil || r.replaying.finished {",
				Replace: "rec != nil {"}},
			Pkg: ".", Tests: "TestReplayHistoryNeedsNoDatabase$",
		},
		Mutant{
			Name:      "replay/stream",
			Mechanism: "a replay writes no stream entry",
			Edits: []Edit{{File: "stream.go",
				Find:    "if err != nil || r.replaying != nil {",
				Replace: "if err != nil {"}},
			Pkg: ".", Tests: "TestReplayHistoryNeedsNoDatabase$",
		},
		Mutant{
			Name:      "check/read-only",
			Mechanism: "Check and LoadHistory read in a READ ONLY transaction",
			Edits: []Edit{{File: "history.go",
				Find:    "AccessMode: pgx.ReadOnly})",
				Replace: "AccessMode: pgx.ReadWrite})"}},
			Pkg: ".", Tests: "TestCheckReadsReadOnly$",
		},
		Mutant{
			Name:      "check/app-version",
			Mechanism: "Check keeps the runs of the selected app versions only (default: the engine's)",
			Edits: []Edit{{File: "check.go",
				Find:    "if rep.AppVersions != nil && !slices.Contains(rep.AppVersions, row.AppVersion) {",
				Replace: "if false && !slices.Contains(rep.AppVersions, row.AppVersion) {"}},
			Pkg: ".", Tests: "TestCheckFindsIncompatibleBuilds$",
		},
	)
}
