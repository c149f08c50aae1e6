package agentkit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/durable-go/durable"
)

// Fixture is a recorded agent run: its input, the system prompt and tools
// it was offered, and turn by turn what the model answered and what its
// step and transaction tools returned. [ExportFixture] makes one from a
// run; [Fixture.Model] answers from it, so the agent's own code (its loop,
// its tools) is re-tested against the recording offline, and a change
// that makes the run diverge from it is reported at the turn where it
// does.
type Fixture struct {
	mu   sync.Mutex
	last *DivergenceError // the last divergence its Model reported

	Agent  string        `json:"agent"`
	RunID  string        `json:"run_id"`
	Input  Input         `json:"input"`
	System string        `json:"system,omitempty"`
	Tools  []string      `json:"tools,omitempty"` // offered to the model, in order
	Turns  []FixtureTurn `json:"turns"`
}

// FixtureTurn is one recorded turn.
type FixtureTurn struct {
	Turn     int             `json:"turn"`
	Response Response        `json:"response"`
	Results  []FixtureResult `json:"results,omitempty"` // of its step and transaction tools, in call order
}

// FixtureResult is what a tool call returned.
type FixtureResult struct {
	CallID  string `json:"call_id"`
	Tool    string `json:"tool"`
	Content string `json:"content"`
	IsError bool   `json:"is_error,omitempty"`
	ByRef   bool   `json:"by_ref,omitempty"` // stored in a blob store: not compared
}

// ExportFixture records run runID of agent a as a Fixture, from its
// recorded steps: the run may be finished or not, in any process.
func ExportFixture(ctx context.Context, a *Agent, runID string) (*Fixture, error) {
	info, err := a.e.Inspect(ctx, runID)
	if err != nil {
		return nil, err
	}
	f := &Fixture{Agent: a.name, RunID: runID, System: a.cfg.System}
	if err := json.Unmarshal(info.Input, &f.Input); err != nil {
		return nil, fmt.Errorf("agentkit: run %q is not a run of an agent: %w", runID, err)
	}
	for _, s := range a.specs {
		f.Tools = append(f.Tools, s.Name)
	}
	steps, err := a.e.ListSteps(ctx, runID)
	if err != nil {
		return nil, err
	}
	for _, s := range steps {
		switch {
		case strings.HasPrefix(s.Name, "agentkit.mcp:"):
			var specs []ToolSpec
			if err := json.Unmarshal(s.Output, &specs); err != nil {
				return nil, fmt.Errorf("agentkit: step %d %q: %w", s.Pos, s.Name, err)
			}
			for _, sp := range specs {
				f.Tools = append(f.Tools, sp.Name)
			}
		case strings.HasPrefix(s.Name, modelStepPrefix):
			turn, err := strconv.Atoi(strings.TrimPrefix(s.Name, modelStepPrefix))
			if err != nil {
				continue // a summary's call, not a turn
			}
			ft := FixtureTurn{Turn: turn}
			if err := json.Unmarshal(s.Output, &ft.Response); err != nil {
				return nil, fmt.Errorf("agentkit: step %d %q: %w", s.Pos, s.Name, err)
			}
			f.Turns = append(f.Turns, ft)
		case strings.HasPrefix(s.Name, "agentkit.tool:") && len(f.Turns) > 0 && s.Err == nil:
			tool, callID, _ := strings.Cut(strings.TrimPrefix(s.Name, "agentkit.tool:"), ":")
			var o toolOutcome
			if err := json.Unmarshal(s.Output, &o); err != nil {
				return nil, fmt.Errorf("agentkit: step %d %q: %w", s.Pos, s.Name, err)
			}
			last := &f.Turns[len(f.Turns)-1]
			last.Results = append(last.Results, FixtureResult{CallID: callID, Tool: tool, Content: o.Content, IsError: o.IsError, ByRef: o.Ref != nil})
		}
	}
	return f, nil
}

// WriteFile writes f to file as indented JSON.
func (f *Fixture) WriteFile(file string) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

// ReadFixture reads a Fixture written by WriteFile.
func ReadFixture(file string) (*Fixture, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var f Fixture
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("agentkit: fixture %s: %w", file, err)
	}
	return &f, nil
}

// DivergenceError reports where a run replayed against a Fixture left
// the recording.
type DivergenceError struct {
	Turn   int    // the turn whose request differs
	Reason string // what differs
}

func (e *DivergenceError) Error() string {
	return fmt.Sprintf("agentkit: the run diverges from the recording at turn %d: %s", e.Turn, e.Reason)
}

// Model returns a Model that answers each turn with the recorded answer,
// after checking that the request matches the recording: the same system
// prompt and tools, and for turn k the results the tools of turn k-1
// returned. A request that does not, or a turn past the recording, fails
// with a *DivergenceError (inside a *ModelError that is not retried).
func (f *Fixture) Model() Model { return &fixtureModel{f: f} }

type fixtureModel struct{ f *Fixture }

func (m *fixtureModel) Generate(_ context.Context, req *Request) (*Response, error) {
	turn := 1
	for _, msg := range req.Messages {
		if msg.Role == RoleAssistant {
			turn++
		}
	}
	if reason := m.f.diverges(turn, req); reason != "" {
		d := &DivergenceError{Turn: turn, Reason: reason}
		m.f.mu.Lock()
		m.f.last = d
		m.f.mu.Unlock()
		return nil, &ModelError{Retryable: false, Message: d.Error(), Err: d}
	}
	resp := m.f.Turns[turn-1].Response
	return &resp, nil
}

// diverges returns how req, the request of turn, differs from the
// recording ("" when it does not).
func (f *Fixture) diverges(turn int, req *Request) string {
	if turn > len(f.Turns) {
		return fmt.Sprintf("the run asks for turn %d; the recording ends at turn %d", turn, len(f.Turns))
	}
	system := ""
	if len(req.Messages) > 0 && req.Messages[0].Role == RoleSystem {
		system = req.Messages[0].Text()
	}
	if system != f.System {
		return fmt.Sprintf("the system prompt is %q; the recording has %q", clip(system), clip(f.System))
	}
	var tools []string
	for _, t := range req.Tools {
		tools = append(tools, t.Name)
	}
	if len(tools) > 0 && !slices.Equal(tools, f.Tools) {
		return fmt.Sprintf("the tools offered are %v; the recording has %v", tools, f.Tools)
	}
	if turn == 1 {
		return ""
	}
	recorded := map[string]FixtureResult{}
	for _, r := range f.Turns[turn-2].Results {
		recorded[r.CallID] = r
	}
	for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role == RoleTool; i-- {
		msg := req.Messages[i]
		r, ok := recorded[msg.ToolCallID]
		if !ok || r.ByRef {
			continue // a child's result, or one stored by reference
		}
		if got := msg.Text(); got != r.Content || msg.IsError != r.IsError {
			return fmt.Sprintf("tool %s (call %s of turn %d) returned %q (error %v); the recording has %q (error %v)",
				r.Tool, r.CallID, turn-1, clip(got), msg.IsError, clip(r.Content), r.IsError)
		}
	}
	return ""
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// Replay starts a run of a (whose Model is f.Model()) with the recorded
// input, as run id, and returns its result; a run that left the
// recording fails with the *DivergenceError.
func (f *Fixture) Replay(ctx context.Context, a *Agent, id string) (Result, error) {
	f.mu.Lock()
	f.last = nil
	f.mu.Unlock()
	h, err := a.Start(ctx, f.Input, &durable.StartOpts{ID: id})
	if err != nil {
		return Result{}, err
	}
	res, err := h.Result(ctx)
	if err != nil {
		f.mu.Lock()
		d := f.last
		f.mu.Unlock()
		if d != nil {
			return res, d // the model's report: the run's error is its recorded text
		}
	}
	return res, err
}

// ForkAt starts a run of agent a that continues run runID (of a or of
// another agent with the same tools) from its turn: the turns before it
// are reused as recorded (answers and tool results, not asked again),
// and from turn on a's model answers, with a's system prompt. Define a
// second agent with another prompt or model and fork runs into it to
// evaluate the change on real conversations. opts.ID names the new run.
func (a *Agent) ForkAt(ctx context.Context, runID string, turn int, opts *durable.ForkOpts) (*durable.Handle[Result], error) {
	if turn < 1 {
		return nil, fmt.Errorf("%w: ForkAt turn %d: turns count from 1", durable.ErrInvalidArgument, turn)
	}
	steps, err := a.e.ListSteps(ctx, runID)
	if err != nil {
		return nil, err
	}
	at := -1
	for _, s := range steps {
		// The turn's reservation, when the run reserves, comes first: the
		// fork reserves its own.
		if s.Name == modelStep(turn) || s.Name == reserveStepPrefix+strconv.Itoa(turn) {
			at = s.Pos
			break
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("%w: run %q has no recorded turn %d", durable.ErrInvalidArgument, runID, turn)
	}
	var o durable.ForkOpts
	if opts != nil {
		o = *opts
	}
	o.Workflow = WorkflowPrefix + a.name
	id, err := a.e.Fork(ctx, runID, at, &o)
	if err != nil {
		return nil, err
	}
	return a.wf.Handle(ctx, id)
}
