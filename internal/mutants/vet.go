package main

// The mutants of the determinism analyzer (durablevet, a module of its
// own): each removes one rule or one piece of its reach, and TestRules
// (bad code flagged, good code not) must notice.

func init() {
	register(
		Mutant{
			Name:      "vet/time-now",
			Mechanism: "durablevet reports time.Now in workflow code",
			Edits: []Edit{{File: "durablevet/rules.go",
				Find:    `add(funcs, ruleNow, "time", "Now")`,
				Replace: `_ = ruleNow`}},
			Pkg: "durablevet", Tests: "TestRules",
		},
		Mutant{
			Name:      "vet/step-exemption",
			Mechanism: "only func literals taking a context.Context first are step code, not every closure",
			Edits: []Edit{{File: "durablevet/durablevet.go",
				Find:    "return firstParamIs(info.TypeOf(lit), isContextContext)",
				Replace: "return true"}},
			Pkg: "durablevet", Tests: "TestRules",
		},
		Mutant{
			Name:      "vet/follow-helpers",
			Mechanism: "durablevet follows workflow code into the package's functions it calls",
			Edits: []Edit{{File: "durablevet/durablevet.go",
				Find:    `w.body(fd, "in "+fn.Name()+" (called from workflow code)")`,
				Replace: `_ = fd`}},
			Pkg: "durablevet", Tests: "TestRules",
		},
		Mutant{
			Name:      "vet/map-order",
			Mechanism: "durablevet reports a range over a map whose body calls durable operations",
			Edits: []Edit{{File: "durablevet/durablevet.go",
				Find:    "if callsDurable(info, n.Body) {",
				Replace: "if false && callsDurable(info, n.Body) {"}},
			Pkg: "durablevet", Tests: "TestRules",
		},
		Mutant{
			Name:      "vet/global-setup",
			Mechanism: "writes at start-up (init, main, tests) do not make a package-level variable mutable state",
			Edits: []Edit{{File: "durablevet/index.go",
				Find:    "ok && !setup && isGlobal(ix.pass, v)",
				Replace: "ok && isGlobal(ix.pass, v)"}},
			Pkg: "durablevet", Tests: "TestRules",
		},
		Mutant{
			Name:      "vet/directive",
			Mechanism: "a //durable:nondeterministic-ok comment silences its line",
			Edits: []Edit{{File: "durablevet/durablevet.go",
				Find:    "if w.reported[pos] || w.silenced(pos) {",
				Replace: "if w.reported[pos] {"}},
			Pkg: "durablevet", Tests: "TestRules",
		},
		Mutant{
			Name:      "vet/examples-found",
			Mechanism: "durablevet finds the workflows of the examples (by their durable.Context parameter)",
			Edits: []Edit{{File: "durablevet/durablevet.go",
				Find:    `func isDurableContext(t types.Type) bool { return t != nil && isNamed(t, durablePath, "Context") }`,
				Replace: `func isDurableContext(t types.Type) bool { return t != nil && isNamed(t, durablePath, "Ctx") }`}},
			Pkg: "durablevet", Tests: "TestExamples",
		},
	)
}
