package main

// The mutants of agentkit's budget rows (Limits.Reserve): reservations
// under row locks, their fit, their settlement, and what sub-agents and
// workflow tools inherit.

func init() {
	const file = "agentkit/budget.go"
	register(
		Mutant{
			Name:      "budget/lock",
			Mechanism: "a reservation locks its budget rows, so parallel sub-agents reserve from their caller's row one at a time",
			Edits: []Edit{{File: file,
				Find:    "ORDER BY b.id FOR UPDATE OF b`",
				Replace: "ORDER BY b.id`"}},
			Pkg: "./agentkit", Tests: "TestBudgetParallelSubAgents",
		},
		Mutant{
			Name:      "budget/fit-tokens",
			Mechanism: "a call whose token estimate does not fit in what a budget row has left is not made",
			Edits: []Edit{{File: file,
				Find:    "case l.Tokens >= 0 && (h.Tokens > l.Tokens || q.shrink && out < outputReserveMin):",
				Replace: "case false:"}},
			Pkg: "./agentkit", Tests: "TestBudgetReserve",
		},
		Mutant{
			Name:      "budget/fit-cost",
			Mechanism: "a call whose cost estimate does not fit in what a budget row has left is not made",
			Edits: []Edit{{File: file,
				Find:    "case l.CostMicros >= 0 && (h.CostMicros > l.CostMicros || l.CostMicros == 0):",
				Replace: "case l.CostMicros == 0:"}},
			Pkg: "./agentkit", Tests: "TestBudgetReserve|TestBudgetStep",
		},
		Mutant{
			Name:      "budget/fit-turns",
			Mechanism: "a call needs a turn left in every budget row it draws from: parallel sub-agents share their caller's turns",
			Edits: []Edit{{File: file,
				Find:    "case l.Turns >= 0 && h.Turns > l.Turns:",
				Replace: "case false:"}},
			Pkg: "./agentkit", Tests: "TestBudgetTurns",
		},
		Mutant{
			Name:      "budget/stale-holds",
			Mechanism: "holds of runs that ended without settling (a cancelled sub-agent) lapse instead of keeping budget",
			Edits: []Edit{{File: file,
				Find:    "AND NOT EXISTS (SELECT FROM `+t.workflows+` w WHERE w.id = h.run_id AND w.status IN ('pending', 'enqueued'))`, chain); err != nil {",
				Replace: "AND false`, chain); err != nil {"}},
			Pkg: "./agentkit", Tests: "TestBudgetCancelledChild",
		},
		Mutant{
			Name:      "budget/output-cap",
			Mechanism: "under a token limit, a call's reserved output is sent as its maximum output tokens",
			Edits: []Edit{{File: "agentkit/modelcall.go",
				Find:    "\t\t\treq.MaxOutputTokens = int(maxOut)\n",
				Replace: ""}},
			Pkg: "./agentkit", Tests: "TestBudgetReserve",
		},
		Mutant{
			Name:      "budget/settle",
			Mechanism: "a call's settlement charges what it used to every row it drew from",
			Edits: []Edit{{File: file,
				Find:    "UPDATE `+t.budgets+` b SET turns = b.turns + $3, tokens = b.tokens + $4, cost_micros = b.cost_micros + $5",
				Replace: "UPDATE `+t.budgets+` b SET turns = b.turns + 0*$3, tokens = b.tokens + 0*$4, cost_micros = b.cost_micros + 0*$5"}},
			Pkg: "./agentkit", Tests: "TestBudgetReserve",
		},
		Mutant{
			Name:      "budget/settle-resumed",
			Mechanism: "a call answered before a crash is settled by the resumed run, though its answer is replayed",
			Edits: []Edit{{File: "agentkit/modelcall.go",
				Find:    "\t\tif serr := settleStep(rs.wctx, rs.a.budgets, of, h, rs.runID+\"/\"+of, used, err); serr != nil && err == nil {",
				Replace: "\t\tif !live {\n\t\t\treturn resp, \"\", err\n\t\t}\n\t\tif serr := settleStep(rs.wctx, rs.a.budgets, of, h, rs.runID+\"/\"+of, used, err); serr != nil && err == nil {"}},
			Pkg: "./agentkit", Tests: "TestBudgetThroughSIGKILL",
		},
		Mutant{
			Name:      "budget/parent",
			Mechanism: "a run's budget row draws from the row of the nearest run above it that has one",
			Edits: []Edit{{File: file,
				Find:    "SELECT up.id FROM up JOIN `+t.budgets+` b ON b.id = up.id ORDER BY up.depth LIMIT 1`",
				Replace: "SELECT up.id FROM up JOIN `+t.budgets+` b ON b.id = up.id AND false ORDER BY up.depth LIMIT 1`"}},
			Pkg: "./agentkit", Tests: "TestBudgetParallelSubAgents|TestBudgetStep",
		},
		Mutant{
			Name:      "budget/inherit-reserve",
			Mechanism: "a sub-agent of a run with Limits.Reserve reserves too",
			Edits: []Edit{{File: "agentkit/agent.go",
				Find:    "\tl.Reserve = l.Reserve || b.Reserve\n",
				Replace: ""}},
			Pkg: "./agentkit", Tests: "TestBudgetParallelSubAgents",
		},
		Mutant{
			Name:      "budget/inherit-turns",
			Mechanism: "a sub-agent gets at most its caller's remaining turns",
			Edits: []Edit{{File: "agentkit/agent.go",
				Find:    "\t\tb.MaxTurns = max(rs.lim.MaxTurns-s.Turns, 1)\n",
				Replace: ""}},
			Pkg: "./agentkit", Tests: "TestBudgetTurns",
		},
		Mutant{
			Name:      "budget/fork-at-reservation",
			Mechanism: "ForkAt forks a reserving run at its turn's reservation, so the fork charges that turn to its own row",
			Edits: []Edit{{File: "agentkit/fixture.go",
				Find:    "if s.Name == modelStep(turn) || s.Name == reserveStepPrefix+strconv.Itoa(turn) {",
				Replace: "if s.Name == modelStep(turn) {"}},
			Pkg: "./agentkit", Tests: "TestBudgetContinuationAndFork",
		},
		Mutant{
			Name:      "budget/step-refused",
			Mechanism: "BudgetStep does not make a call its budget refused",
			Edits: []Edit{{File: file,
				Find:    "\tif h.Refused != nil {\n\t\treturn zero, h.Refused\n\t}\n",
				Replace: ""}},
			Pkg: "./agentkit", Tests: "TestBudgetStep",
		},
	)
}
