package main

// The mutants of workflow semantics beyond steps: compensations.

func init() {
	register(
		Mutant{
			Name:      "compensate/reverse",
			Mechanism: "compensations run latest first (the undo of the last effect before the one before it)",
			Edits: []Edit{{File: "compensate.go",
				Find:    "\tfor i := len(undo) - 1; i >= 0; i-- {\n\t\tc := undo[i]",
				Replace: "\tfor i := range undo {\n\t\tc := undo[i]"}},
			Pkg: ".", Tests: "TestCompensationsRunInReverse",
		},
		Mutant{
			Name:      "compensate/on-failure",
			Mechanism: "a run whose code fails runs its registered compensations",
			Edits: []Edit{{File: "runner.go",
				Find:    "\t} else if err != nil {\n\t\terr = compensate(r, err)\n\t}",
				Replace: "\t}"}},
			Pkg: ".", Tests: "TestCompensationsRunInReverse",
		},
		Mutant{
			Name:      "compensate/go-on-after-failed-undo",
			Mechanism: "a compensation that fails for good is recorded and the ones after it still run",
			Edits: []Edit{{File: "compensate.go",
				Find:    "\t\t\tce.Failed = append(ce.Failed, se)\n",
				Replace: "\t\t\tce.Failed = append(ce.Failed, se)\n\t\t\treturn ce\n"}},
			Pkg: ".", Tests: "TestCompensationFailureSurfaced",
		},
		Mutant{
			Name:      "compensate/failed-kind",
			Mechanism: "the recorded error of a run whose compensation failed matches ErrCompensationFailed when read back",
			Edits: []Edit{{File: "errors.go",
				Find:    "\tcase errors.Is(err, ErrCompensationFailed):\n\t\treturn kindCompensationFailed\n",
				Replace: ""}},
			Pkg: ".", Tests: "TestCompensationFailureSurfaced",
		},
		Mutant{
			Name:      "compensate/past-deadline",
			Mechanism: "a run past its deadline still runs its compensations (the deadline halt lets them)",
			Edits: []Edit{{File: "compensate.go",
				Find:    "\treturn h == nil || (h == cause && errors.Is(h, context.DeadlineExceeded))",
				Replace: "\treturn h == nil"}},
			Pkg: ".", Tests: "TestCompensationsPastDeadline",
		},
		Mutant{
			Name:      "compensate/deadline-lifted",
			Mechanism: "the deadline no longer stops new steps once the compensations run",
			Edits: []Edit{{File: "run.go",
				Find:    "!r.compensating.Load() && ",
				Replace: ""}},
			Pkg: ".", Tests: "TestCompensationsPastDeadline",
		},
		Mutant{
			Name:      "compensate/detached-context",
			Mechanism: "compensations past the deadline get a context that the passed deadline does not end",
			Edits: []Edit{{File: "compensate.go",
				Find:    "\tif r.ctx.Err() != nil && r.replaying == nil {\n\t\tdetachDeadline(r)\n\t}",
				Replace: ""}},
			Pkg: ".", Tests: "TestCompensationsPastDeadline",
		},
		Mutant{
			Name:      "compensate/resumed-past-deadline",
			Mechanism: "a run resumed past its deadline replays its recorded steps (registering its compensations) before it halts",
			Edits: []Edit{{File: "runner.go",
				Find:    "if r.pastDeadline() && r.hist.replayed() == 0 {",
				Replace: "if r.pastDeadline() {"}},
			Pkg: ".", Tests: "TestCompensationsSurviveKill/deadline",
		},
		Mutant{
			Name:      "compensate/replayed",
			Mechanism: "a replay (Check, ReplayHistory) replays the compensation steps too",
			Edits: []Edit{{File: "replay.go",
				Find:    "\t\tif err != nil && r.halted() == nil {\n\t\t\terr = compensate(r, err) // their steps replay as well\n\t\t}\n",
				Replace: ""}},
			Pkg: ".", Tests: "TestCompensationsReplay",
		},
	)
}
