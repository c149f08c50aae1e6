package main

// The mutants of the edges: what a caller hands in, and the dashboard's
// and the CLI's defences.

func init() {
	register(
		Mutant{
			Name:      "start/input-mismatch",
			Mechanism: "a start of an existing ID with another input is refused (ErrInputMismatch)",
			Edits: []Edit{{File: "workflow.go",
				Find:    "if input != nil && !ownChild && !bytes.Equal(info.input, input) {",
				Replace: "if input != nil && !ownChild && !bytes.Equal(info.input, input) && false {"}},
			Pkg: ".", Tests: "^TestWorkflow$/^StartIDInputMismatch$",
		},
		Mutant{
			Name:      "start/unencodable-input",
			Mechanism: "input JSON cannot encode is an ErrInvalidArgument",
			Edits: []Edit{{File: "workflow.go",
				Find:    "if err != nil && !errors.Is(err, ErrPayloadTooLarge) {",
				Replace: "if false {"}},
			Pkg: ".", Tests: "^TestBadInput$/^UnencodableArguments$",
		},
		Mutant{
			Name:      "dashboard/host-check",
			Mechanism: "the dashboard refuses a Host header that is not its own (DNS rebinding)",
			Edits: []Edit{{File: "dashboard/dashboard.go",
				Find:    "case !g.d.hostOK(r.Host, host, local):",
				Replace: "case false:"}},
			Pkg: "./dashboard", Tests: "TestHostChecked",
		},
		Mutant{
			Name:      "dashboard/unauthenticated-loopback",
			Mechanism: "AllowUnauthenticated is refused on a non-loopback listener",
			Edits: []Edit{{File: "dashboard/dashboard.go",
				Find:    "case !isLoopback(host) && o.AllowUnauthenticated:",
				Replace: "case false:"}},
			Pkg: "./dashboard", Tests: "TestAllowUnauthenticatedLoopbackOnly",
		},
		Mutant{
			Name:      "dashboard/sign-out-revokes",
			Mechanism: "sign-out revokes the session on the server",
			Edits: []Edit{{File: "dashboard/dashboard.go",
				Find:    "\t\td.sessions.revoke(c.Value)",
				Replace: "\t\t_ = c.Value"}},
			Pkg: "./dashboard", Tests: "TestSignOutRevokes",
		},
		Mutant{
			Name:      "dashboard/secure-cookies",
			Mechanism: "Options.SecureCookies marks the session cookie Secure",
			Edits: []Edit{{File: "dashboard/dashboard.go",
				Find:    "Secure: d.opts.SecureCookies || r.TLS != nil",
				Replace: "Secure: r.TLS != nil"}},
			Pkg: "./dashboard", Tests: "TestSecureCookies",
		},
		Mutant{
			Name:      "cli/show-windows",
			Mechanism: "durable show reads a run's steps one window at a time",
			Edits: []Edit{{File: "cmd/durable/commands.go",
				Find:    "steps, total, err := listStepWindow(c.eng, ctx, id, from, showWindow)",
				Replace: "steps, total, err := listStepWindow(c.eng, ctx, id, from, durable.StepWindowMax)"}},
			Pkg: "cmd/durable", Tests: "TestShowManySteps",
		},
		Mutant{
			Name:      "cli/global-flags-before",
			Mechanism: "the flags every command takes also work before the command name",
			Edits: []Edit{{File: "cmd/durable/main.go",
				Find:    "setErr = cmp.Or(setErr, fs.Set(f.Name, f.Value.String()))",
				Replace: "setErr = cmp.Or(setErr, nil)"}},
			Pkg: "cmd/durable", Tests: "TestGlobalFlagsBeforeCommand",
		},
		Mutant{
			Name:      "proctest/child-main",
			Mechanism: "a test binary started as a child runs the child's entry point, not the tests",
			Edits: []Edit{{File: "internal/proctest/main.go",
				Find:    "\tif os.Getenv(env) != \"\" {",
				Replace: "\tif false {"}},
			Pkg: "./internal/proctest", Tests: "TestMainRunsChild",
		},
		Mutant{
			Name:      "agentkit/test-knobs",
			Mechanism: "agentkit.Define takes the test knobs attached to its engine and name (hooks.SetAgent)",
			Edits: []Edit{{File: "agentkit/agent.go",
				Find:    "knobs: hooks.TakeAgent(e, name), budgets: budgets}",
				Replace: "knobs: hooks.TakeAgent(nil, name), budgets: budgets}"}},
			Pkg: "./agentkit", Tests: "TestCrashAtTurnLimit",
		},
	)
}
