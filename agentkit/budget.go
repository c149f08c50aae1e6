package agentkit

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable"
)

// Budget rows. A run whose Limits.Reserve is set keeps its limits in a
// row of agentkit_budgets, keyed by its run ID, that points at the row of
// the nearest run above it with one (the run that called it as a tool, or
// that run's caller, ...; a continuation points at its chain's first
// run). Before each model call the run reserves an estimate of the call
// from its row and every row above it, under their row locks, in a
// transaction step; the call is not made unless the estimate fits in what
// each row has left after what was used and what calls in flight hold.
// After the call the hold is replaced by what the call used, in another
// transaction step. Calls of parallel sub-agents thus draw from their
// parent's row one at a time, and together can never pass it.
//
// Holds (agentkit_budget_holds) are rows of their own, one per budget row
// a call drew from, so a hold of a run that ended without settling (a
// cancelled sub-agent) is dropped by the next reservation instead of
// shrinking its parent's budget for good.

// Defaults of reservations.
const (
	// OutputReserveDefault is the output a call reserves when
	// AgentConfig.MaxOutputTokens is 0. When a token limit applies, the
	// reserved output is sent as the call's maximum output tokens, so the
	// provider cannot answer past it.
	OutputReserveDefault = 4096
	// outputReserveMin is the least output a call may be shrunk to when
	// AgentConfig.MaxOutputTokens is 0 and less than OutputReserveDefault
	// is left: below it the run ends at its limit instead.
	outputReserveMin = 256
	// budgetDepthMax bounds the walk up the rows.
	budgetDepthMax = 32
)

// Errors of budgets.
var (
	// ErrBudgetExhausted is matched by a [*BudgetError].
	ErrBudgetExhausted = errors.New("agentkit: budget exhausted")
	// ErrNoBudget: [ReadBudget] found no such row.
	ErrNoBudget = errors.New("agentkit: no such budget")
)

// BudgetError reports a reservation that did not fit: the estimate of a
// call (a turn, its tokens, its cost) is more than what a budget row has
// left. Agent runs end with the matching Outcome instead; [BudgetStep]
// returns it.
type BudgetError struct {
	// Budget is the ID of the row that refused (the run it belongs to).
	Budget string
	// Outcome names the limit: OutcomeLimitTurns, OutcomeLimitTokens or
	// OutcomeLimitCost.
	Outcome Outcome
	// Need is the estimate, Left what the row had left, in turns, tokens
	// or cost micros.
	Need, Left int64
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("agentkit: budget %q: %s: the call needs %d, %d left", e.Budget, e.Outcome, e.Need, e.Left)
}

// Is makes a BudgetError match ErrBudgetExhausted.
func (e *BudgetError) Is(target error) bool { return target == ErrBudgetExhausted }

// Amount is an amount of a budget.
type Amount struct {
	Turns      int64 `json:"turns"`
	Tokens     int64 `json:"tokens"`
	CostMicros int64 `json:"cost_micros"`
}

// Budget is a budget row (see [ReadBudget]).
type Budget struct {
	ID       string
	ParentID string // "" for a root
	// Limits of the row; a row with none only passes its calls up.
	Limits Limits
	// Used is what the calls drawn from this row used: its run's and
	// those of every run below it.
	Used Amount
	// Held is what calls in flight reserved, of runs still running.
	Held Amount
}

// ReadBudget returns the budget row id (a run ID) in schema
// (durable.SchemaDefault when empty); an error matching
// ErrNoBudget when there is none.
func ReadBudget(ctx context.Context, pool *pgxpool.Pool, schema, id string) (Budget, error) {
	t, err := budgetTablesOf(schema)
	if err != nil {
		return Budget{}, err
	}
	b := Budget{ID: id}
	var parent *string
	err = pool.QueryRow(ctx, `SELECT b.parent_id, b.max_turns, b.max_tokens, b.max_cost_micros, b.turns, b.tokens, b.cost_micros,
	coalesce(sum(h.turns), 0), coalesce(sum(h.tokens), 0), coalesce(sum(h.cost_micros), 0)
FROM `+t.budgets+` b
LEFT JOIN `+t.holds+` h ON h.budget_id = b.id
	AND EXISTS (SELECT FROM `+t.workflows+` w WHERE w.id = h.run_id AND w.status IN ('pending', 'enqueued'))
WHERE b.id = $1 GROUP BY b.id`, id).Scan(&parent, &b.Limits.MaxTurns, &b.Limits.MaxTokens, &b.Limits.MaxCostMicros,
		&b.Used.Turns, &b.Used.Tokens, &b.Used.CostMicros, &b.Held.Turns, &b.Held.Tokens, &b.Held.CostMicros)
	if errors.Is(err, pgx.ErrNoRows) {
		return Budget{}, fmt.Errorf("%w: %q", ErrNoBudget, id)
	}
	if err != nil {
		return Budget{}, fmt.Errorf("agentkit: read budget %q: %w", id, err)
	}
	if parent != nil {
		b.ParentID = *parent
	}
	b.Limits.Reserve = true
	return b, nil
}

// budgetTables are the quoted names of the tables reservations use.
type budgetTables struct{ budgets, holds, workflows string }

func budgetTablesOf(schema string) (budgetTables, error) {
	schema = cmp.Or(schema, durable.SchemaDefault)
	if !identRE.MatchString(schema) {
		return budgetTables{}, fmt.Errorf("%w: schema %q must be a plain identifier", durable.ErrInvalidArgument, schema)
	}
	return budgetTables{
		budgets:   pgx.Identifier{schema, "agentkit_budgets"}.Sanitize(),
		holds:     pgx.Identifier{schema, "agentkit_budget_holds"}.Sanitize(),
		workflows: pgx.Identifier{schema, "workflows"}.Sanitize(),
	}, nil
}

// holdRequest asks for a reservation.
type holdRequest struct {
	leaf   string // the budget row the call draws from first
	parent string // the leaf's parent if it is created now; "" walks the runs above runID
	runID  string // the run making the call: its hold lapses when it ends
	limits Limits // of the leaf if it is created now
	holdID string
	turns  int64
	input  int64 // estimated input tokens
	output int64 // output tokens to reserve
	shrink bool  // output may shrink to fit, down to outputReserveMin
	cost   func(input, output int64) int64
	// inReserve is the test knob hooks.AgentKnobs.InReserve.
	inReserve func()
}

// hold is a reservation, recorded as a step's output.
type hold struct {
	// Chain is the rows drawn from, leaf first.
	Chain   []string     `json:"chain,omitempty"`
	Refused *BudgetError `json:"refused,omitempty"`
	Amount
	// Output is the output tokens reserved when a token limit applied,
	// sent as the call's maximum (0: no token limit).
	Output int64 `json:"output_tokens,omitempty"`
}

// budgetRow is a locked budget row with what its live holds keep.
type budgetRow struct {
	id                 string
	maxTurns           int64
	maxTokens, maxCost int64
	used, held         Amount
}

// left is what the row has left, per dimension; -1 means no limit.
func (r *budgetRow) left() Amount {
	l := Amount{Turns: -1, Tokens: -1, CostMicros: -1}
	if r.maxTurns >= 0 {
		l.Turns = max(r.maxTurns-r.used.Turns-r.held.Turns, 0)
	}
	if r.maxTokens > 0 {
		l.Tokens = max(r.maxTokens-r.used.Tokens-r.held.Tokens, 0)
	}
	if r.maxCost > 0 {
		l.CostMicros = max(r.maxCost-r.used.CostMicros-r.held.CostMicros, 0)
	}
	return l
}

// reserve makes the reservation q in tx: it creates the leaf row if it is
// missing, locks the rows of the chain in ID order (the same order for
// every caller, so reservations do not deadlock), drops the holds of runs
// that ended, and holds the estimate in every row if it fits in all.
func reserve(ctx context.Context, tx pgx.Tx, t budgetTables, q *holdRequest) (hold, error) {
	rows, err := lockChain(ctx, tx, t, q.leaf)
	if err != nil {
		return hold{}, err
	}
	if len(rows) == 0 {
		if err := createBudget(ctx, tx, t, q); err != nil {
			return hold{}, err
		}
		if rows, err = lockChain(ctx, tx, t, q.leaf); err != nil {
			return hold{}, err
		}
	}
	chain := make([]string, len(rows))
	byID := map[string]*budgetRow{}
	for i := range rows {
		chain[i] = rows[i].id
		byID[rows[i].id] = &rows[i]
	}
	// Holds of runs that ended (cancelled, failed, pruned) are dropped.
	if _, err := tx.Exec(ctx, `DELETE FROM `+t.holds+` h WHERE h.budget_id = ANY($1)
	AND NOT EXISTS (SELECT FROM `+t.workflows+` w WHERE w.id = h.run_id AND w.status IN ('pending', 'enqueued'))`, chain); err != nil {
		return hold{}, err
	}
	hr, err := tx.Query(ctx, `SELECT budget_id, sum(turns), sum(tokens), sum(cost_micros) FROM `+t.holds+`
WHERE budget_id = ANY($1) GROUP BY budget_id`, chain)
	if err != nil {
		return hold{}, err
	}
	for hr.Next() {
		var id string
		var a Amount
		if err := hr.Scan(&id, &a.Turns, &a.Tokens, &a.CostMicros); err != nil {
			hr.Close()
			return hold{}, err
		}
		byID[id].held = a
	}
	hr.Close()
	if err := hr.Err(); err != nil {
		return hold{}, err
	}
	if q.inReserve != nil {
		q.inReserve()
	}
	h := fit(rows, q)
	if h.Refused != nil {
		return h, nil
	}
	h.Chain = leafFirst(rows, q.leaf)
	_, err = tx.Exec(ctx, `INSERT INTO `+t.holds+` (budget_id, hold_id, run_id, turns, tokens, cost_micros)
SELECT b, $2, $3, $4, $5, $6 FROM unnest($1::text[]) AS b`, h.Chain, q.holdID, q.runID, h.Turns, h.Tokens, h.CostMicros)
	return h, err
}

// fit decides the reservation q against the locked rows.
func fit(rows []budgetRow, q *holdRequest) hold {
	out, capped := q.output, false
	room := int64(-1) // the least tokens left over the rows with a token limit
	for i := range rows {
		if l := rows[i].left(); l.Tokens >= 0 && (room < 0 || l.Tokens < room) {
			room = l.Tokens
		}
	}
	if room >= 0 {
		capped = true
		if q.shrink && q.input+out > room {
			out = max(min(out, room-q.input), 0)
		}
	}
	h := hold{Amount: Amount{Turns: q.turns, Tokens: q.input + out}}
	if q.cost != nil {
		h.CostMicros = q.cost(q.input, out)
	}
	if capped {
		h.Output = out
	}
	for i := range rows {
		r := &rows[i]
		l := r.left()
		switch {
		case l.Turns >= 0 && h.Turns > l.Turns:
			h.Refused = &BudgetError{Budget: r.id, Outcome: OutcomeLimitTurns, Need: h.Turns, Left: l.Turns}
		case l.Tokens >= 0 && (h.Tokens > l.Tokens || q.shrink && out < outputReserveMin):
			h.Refused = &BudgetError{Budget: r.id, Outcome: OutcomeLimitTokens, Need: q.input + max(out, outputReserveMin), Left: l.Tokens}
		case l.CostMicros >= 0 && (h.CostMicros > l.CostMicros || l.CostMicros == 0):
			h.Refused = &BudgetError{Budget: r.id, Outcome: OutcomeLimitCost, Need: h.CostMicros, Left: l.CostMicros}
		}
		if h.Refused != nil {
			return hold{Refused: h.Refused}
		}
	}
	return h
}

// leafFirst lists the chain's IDs from the leaf, then the rows above.
func leafFirst(rows []budgetRow, leaf string) []string {
	ids := []string{leaf}
	for _, r := range rows {
		if r.id != leaf {
			ids = append(ids, r.id)
		}
	}
	return ids
}

// lockChain locks the row id and the rows above it, in ID order.
func lockChain(ctx context.Context, tx pgx.Tx, t budgetTables, id string) ([]budgetRow, error) {
	rows, err := tx.Query(ctx, `WITH RECURSIVE chain(id, parent_id, depth) AS (
	SELECT id, parent_id, 0 FROM `+t.budgets+` WHERE id = $1
	UNION ALL
	SELECT b.id, b.parent_id, c.depth + 1 FROM `+t.budgets+` b JOIN chain c ON b.id = c.parent_id WHERE c.depth < $2)
SELECT b.id, b.max_turns, b.max_tokens, b.max_cost_micros, b.turns, b.tokens, b.cost_micros
FROM `+t.budgets+` b JOIN chain c ON c.id = b.id ORDER BY b.id FOR UPDATE OF b`, id, budgetDepthMax)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (budgetRow, error) {
		var r budgetRow
		err := row.Scan(&r.id, &r.maxTurns, &r.maxTokens, &r.maxCost, &r.used.Turns, &r.used.Tokens, &r.used.CostMicros)
		return r, err
	})
}

// createBudget creates the leaf row of q, under the nearest run above
// q.runID that has a row (q.parent when set).
func createBudget(ctx context.Context, tx pgx.Tx, t budgetTables, q *holdRequest) error {
	var parent *string
	if q.parent != "" {
		parent = &q.parent
	} else {
		err := tx.QueryRow(ctx, `WITH RECURSIVE up(id, depth) AS (
	SELECT parent_id, 1 FROM `+t.workflows+` WHERE id = $1
	UNION ALL
	SELECT w.parent_id, up.depth + 1 FROM up JOIN `+t.workflows+` w ON w.id = up.id
	WHERE up.depth < $2 AND NOT EXISTS (SELECT FROM `+t.budgets+` b WHERE b.id = up.id))
SELECT up.id FROM up JOIN `+t.budgets+` b ON b.id = up.id ORDER BY up.depth LIMIT 1`, q.runID, budgetDepthMax).Scan(&parent)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
	}
	l := q.limits
	_, err := tx.Exec(ctx, `INSERT INTO `+t.budgets+` (id, parent_id, max_turns, max_tokens, max_cost_micros)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING`, q.leaf, parent, l.MaxTurns, l.MaxTokens, l.MaxCostMicros)
	return err
}

// settleHold replaces the hold holdID in the rows of chain by what the
// call used. Only rows that still hold it are charged.
func settleHold(ctx context.Context, tx pgx.Tx, t budgetTables, chain []string, holdID string, used Amount) error {
	if _, err := tx.Exec(ctx, `SELECT FROM `+t.budgets+` WHERE id = ANY($1) ORDER BY id FOR UPDATE`, chain); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `WITH h AS (DELETE FROM `+t.holds+` WHERE budget_id = ANY($1) AND hold_id = $2 RETURNING budget_id)
UPDATE `+t.budgets+` b SET turns = b.turns + $3, tokens = b.tokens + $4, cost_micros = b.cost_micros + $5
FROM h WHERE b.id = h.budget_id`, chain, holdID, used.Turns, used.Tokens, used.CostMicros)
	return err
}

// Steps of a run's reservations: reserve:<turn> before the model call of
// the turn, settle:<turn> after it (compact for the summary's call).
const (
	reserveStepPrefix = "agentkit.reserve:"
	settleStepPrefix  = "agentkit.settle:"
)

// estimateInput estimates the input tokens of a call: a token per four
// bytes of text, and a few per message.
func estimateInput(system string, hist []Message, extra *Message, specs []ToolSpec) int64 {
	n := len(system)
	for _, m := range hist {
		n += messageSize(m) + 16
	}
	if extra != nil {
		n += messageSize(*extra) + 16
	}
	for _, s := range specs {
		n += len(s.Name) + len(s.Description) + len(s.Parameters)
	}
	return int64(n+3)/4 + 8
}

// reserveCall reserves the estimate of the model call `of` (a turn
// number, or "compact") from the run's budget rows.
func (rs *runState) reserveCall(of string, extra *Message, withTools bool) (hold, error) {
	a := rs.a
	var specs []ToolSpec
	if withTools {
		specs = rs.specs
	}
	q := &holdRequest{leaf: rs.runID, runID: rs.runID, limits: rs.lim, holdID: rs.runID + "/" + of, turns: 1,
		input: estimateInput(a.cfg.System, rs.hist, extra, specs), output: int64(a.cfg.MaxOutputTokens)}
	if rs.in.Generation > 0 && rs.in.ChainID != "" {
		// A continuation draws from its chain's row, which holds the limits
		// (directly: a long chain does not make a deep walk).
		q.parent, q.limits = rs.in.ChainID, Limits{MaxTurns: -1}
	}
	if q.output == 0 {
		q.output, q.shrink = OutputReserveDefault, true
	}
	if k := a.knobs.InReserve; k != nil {
		q.inReserve = func() { k(rs.runID) }
	}
	if p := a.cfg.Pricing; p != nil {
		q.cost = func(in, out int64) int64 { return p("", Usage{InputTokens: in, OutputTokens: out}) }
	}
	return reserveStep(rs.wctx, a.budgets, of, q)
}

// reserveStep makes the reservation q as the transaction step
// reserve:<of>: the holds and the step's record commit together.
func reserveStep(wctx durable.Context, t budgetTables, of string, q *holdRequest) (hold, error) {
	return durable.TxStep(wctx, reserveStepPrefix+of, func(ctx context.Context, tx pgx.Tx) (hold, error) {
		return reserve(ctx, tx, t, q)
	}, nil)
}

// settleStep charges what the call of the hold h used (nothing when it
// failed: err is its error) as the transaction step settle:<of>, so it is
// charged once whatever crashes in between.
func settleStep(wctx durable.Context, t budgetTables, of string, h hold, holdID string, u Usage, err error) error {
	var used Amount
	if err == nil {
		used = Amount{Turns: 1, Tokens: u.Tokens(), CostMicros: u.CostMicros}
	}
	_, serr := durable.TxStep(wctx, settleStepPrefix+of, func(ctx context.Context, tx pgx.Tx) (struct{}, error) {
		return struct{}{}, settleHold(ctx, tx, t, h.Chain, holdID, used)
	}, nil)
	return serr
}

// BudgetStep runs fn as a step of workflow code charged to a budget: the
// budget row of the nearest run above the calling workflow with
// Limits.Reserve (typically the agent run that called it as a
// [WorkflowTool]), and every row above that. est is reserved first, in a
// transaction step (a call counts as a turn; est.CostMicros is its cost);
// fn runs only if est fits, else BudgetStep returns a [*BudgetError]
// matching ErrBudgetExhausted. What fn reports it used is charged after,
// in another transaction step, exactly once. Agents started by the same
// workflow with Limits.Reserve draw from the same rows. With no such row
// above, the calls are counted in a row of the workflow's own, without
// limits. The rows live in e's schema (see [Migrate]).
func BudgetStep[R any](wctx durable.Context, e *durable.Engine, name string, est Usage, fn func(ctx context.Context) (R, Usage, error), opts *durable.StepOpts) (R, error) {
	var zero R
	if e == nil || fn == nil {
		return zero, fmt.Errorf("%w: BudgetStep %q needs an engine and a function", durable.ErrInvalidArgument, name)
	}
	if est.InputTokens < 0 || est.OutputTokens < 0 || est.CostMicros < 0 {
		return zero, fmt.Errorf("%w: BudgetStep %q: a negative estimate", durable.ErrInvalidArgument, name)
	}
	t, err := budgetTablesOf(e.Schema())
	if err != nil {
		return zero, err
	}
	id := wctx.WorkflowID()
	q := &holdRequest{leaf: id, runID: id, limits: Limits{MaxTurns: -1}, holdID: id + "/" + name, turns: 1,
		input: est.InputTokens, output: est.OutputTokens}
	q.cost = func(int64, int64) int64 { return est.CostMicros }
	h, err := reserveStep(wctx, t, name, q)
	if err != nil {
		return zero, err
	}
	if h.Refused != nil {
		return zero, h.Refused
	}
	type result struct {
		Value R     `json:"value"`
		Usage Usage `json:"usage"`
	}
	res, err := durable.Step(wctx, name, func(ctx context.Context) (result, error) {
		v, u, err := fn(ctx)
		return result{Value: v, Usage: u}, err
	}, opts)
	if serr := settleStep(wctx, t, name, h, q.holdID, res.Usage, err); serr != nil && err == nil {
		err = serr
	}
	return res.Value, err
}
