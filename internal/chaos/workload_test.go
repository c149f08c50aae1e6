package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
)

// The workload. Every workflow is registered the same way in the executors
// (which run it) and in the controller (which starts runs with StartTx and
// EnqueueTx on an engine it never launches).

// schema holds the engine's tables and the app rows; the controller picks
// it and hands it to the executors (envSchema).
var schema = "chaos"

func appTable() string { return pgx.Identifier{schema, "app_rows"}.Sanitize() }

const (
	queueName  = "limited"
	tickName   = "chaos-tick"
	tickSpec   = "* * * * * *" // every second
	topicGo    = "go"
	globalConc = 3 // queue limits, verified from the recorded intervals
	workerConc = 2
)

var queueOpts = durable.QueueOpts{GlobalConcurrency: globalConc, WorkerConcurrency: workerConc}

// mixedIn is the input of a mixed workflow; the controller draws it.
type mixedIn struct {
	SleepMS int  `json:"sleep_ms"`
	Msg     bool `json:"msg"`   // waits for a message from the controller
	Child   bool `json:"child"` // starts and awaits a child workflow
}

type mixedOut struct {
	Effects []string `json:"effects"`
	Msg     string   `json:"msg,omitempty"`
	Child   string   `json:"child,omitempty"`
}

type queuedIn struct {
	HoldMS int `json:"hold_ms"`
}

// workload is the registered workload of one engine.
type workload struct {
	mixed  *durable.Workflow[mixedIn, mixedOut]
	leaf   *durable.Workflow[int, string]
	queued *durable.Workflow[queuedIn, string]
	tick   *durable.Workflow[struct{}, string]
	agent  *agentkit.Agent
	queue  *durable.Queue
}

// ledgerClient talks to the controller's ledger (the external world: it
// outlives every executor and the database).
type ledgerClient struct {
	url string
	pid int
}

func (l *ledgerClient) post(ctx context.Context, path string, hdr map[string]string, body any) ([]byte, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("ledger %s: %d %s", path, resp.StatusCode, out)
	}
	return out, err
}

// exec records that the step of ctx starts executing now. It is recorded
// before the step does anything, so the verdict can tell whether a step
// ran after its checkpoint existed.
func (l *ledgerClient) exec(ctx context.Context, tx bool) error {
	info := durable.StepInfoMust(ctx)
	_, err := l.post(ctx, "/exec", nil, execRec{WF: info.WorkflowID, Pos: info.Pos, Name: info.Name, Tx: tx, At: time.Now().UnixNano(), PID: l.pid})
	return err
}

// run records that workflow code starts executing (a start or a resume,
// after the engine loaded the run's recorded steps).
func (l *ledgerClient) run(wctx durable.Context) {
	if l == nil {
		return
	}
	_, _ = l.post(wctx, "/run", nil, runRec{WF: wctx.WorkflowID(), At: time.Now().UnixNano(), PID: l.pid})
}

// effect is an external effect under the step's idempotency key: the
// ledger applies a key once and answers every retry alike.
func (l *ledgerClient) effect(ctx context.Context) (string, error) {
	if err := l.exec(ctx, false); err != nil {
		return "", err
	}
	out, err := l.post(ctx, "/effect", map[string]string{"Idempotency-Key": durable.IdempotencyKey(ctx)}, nil)
	return string(out), err
}

// appRow writes the application row of a transaction step, keyed by the
// step's idempotency key (the table has no unique constraint: a duplicate
// would show).
func (l *ledgerClient) appRow(ctx context.Context, tx pgx.Tx) (string, error) {
	if err := l.exec(ctx, true); err != nil {
		return "", err
	}
	info := durable.StepInfoMust(ctx)
	key := info.IdempotencyKey()
	_, err := tx.Exec(ctx, "INSERT INTO "+appTable()+" (key, workflow_id) VALUES ($1, $2)", key, info.WorkflowID)
	return key, err
}

type execRec struct {
	WF   string `json:"wf"`
	Pos  int    `json:"pos"`
	Name string `json:"name"`
	Tx   bool   `json:"tx"`
	At   int64  `json:"at"` // unix ns
	PID  int    `json:"pid"`
}

type runRec struct {
	WF  string `json:"wf"`
	At  int64  `json:"at"`
	PID int    `json:"pid"`
}

type intervalRec struct {
	WF    string `json:"wf"`
	Begin bool   `json:"begin"`
	At    int64  `json:"at"`
	PID   int    `json:"pid"`
	Began int64  `json:"began"` // the At of the execution's begin: names the execution
}

// effectRetry rides out a ledger hiccup; the ledger is never down for long.
var effectRetry = &durable.StepOpts{Retry: &durable.RetryPolicy{MaxAttempts: 20, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second}}

// agentTurns is the scripted model's side of every agent run: two turns of
// tool calls (an effect and an app row, then another effect) and an answer.
var agentTurns = [][]agentkit.ToolCall{
	{{ID: "c0", Name: "effect", Arguments: json.RawMessage(`{}`)}, {ID: "c1", Name: "row", Arguments: json.RawMessage(`{}`)}},
	{{ID: "c2", Name: "effect", Arguments: json.RawMessage(`{}`)}},
}

// register registers the workload on e. l may be nil in the controller.
func register(e *durable.Engine, l *ledgerClient, modelURL string) (*workload, error) {
	w := &workload{}
	w.queue = durable.RegisterQueue(e, queueName, &queueOpts)
	w.leaf = durable.Register(e, "leaf", func(wctx durable.Context, n int) (string, error) {
		l.run(wctx)
		eff, err := durable.Step(wctx, "effect", l.effect, effectRetry)
		if err != nil {
			return "", err
		}
		if _, err := durable.TxStep(wctx, "app-row", l.appRow, nil); err != nil {
			return "", err
		}
		return eff, nil
	}, nil)
	w.mixed = durable.Register(e, "mixed", func(wctx durable.Context, in mixedIn) (mixedOut, error) {
		l.run(wctx)
		var out mixedOut
		eff, err := durable.Step(wctx, "effect", l.effect, effectRetry)
		if err != nil {
			return out, err
		}
		out.Effects = append(out.Effects, eff)
		if _, err := durable.TxStep(wctx, "app-row", l.appRow, nil); err != nil {
			return out, err
		}
		if err := durable.Sleep(wctx, time.Duration(in.SleepMS)*time.Millisecond); err != nil {
			return out, err
		}
		if in.Child {
			h, err := w.leaf.StartChild(wctx, 1, nil)
			if err != nil {
				return out, err
			}
			if out.Child, err = h.Await(wctx); err != nil {
				return out, err
			}
		}
		if in.Msg {
			msg, ok, err := durable.Recv[string](wctx, topicGo, time.Hour)
			if err != nil {
				return out, err
			}
			if !ok {
				return out, fmt.Errorf("no message on %q", topicGo)
			}
			out.Msg = msg
		}
		eff, err = durable.Step(wctx, "effect", l.effect, effectRetry)
		if err != nil {
			return out, err
		}
		out.Effects = append(out.Effects, eff)
		return out, nil
	}, nil)
	w.queued = durable.Register(e, "queued", func(wctx durable.Context, in queuedIn) (string, error) {
		l.run(wctx)
		return durable.Step(wctx, "hold", func(ctx context.Context) (string, error) {
			if err := l.exec(ctx, false); err != nil {
				return "", err
			}
			// Ignores its context, as code calling a slow API may: a
			// cancelled run keeps its slot until this returns. The begin
			// is posted without the context too: a cancel that cut the
			// post after the ledger recorded it would leave an interval
			// that never ends (counted as running until the process died).
			id, began := wctx.WorkflowID(), time.Now().UnixNano()
			if _, err := l.post(context.WithoutCancel(ctx), "/interval", nil, intervalRec{WF: id, Begin: true, At: began, PID: l.pid, Began: began}); err != nil {
				return "", err
			}
			time.Sleep(time.Duration(in.HoldMS) * time.Millisecond)
			_, err := l.post(context.WithoutCancel(ctx), "/interval", nil, intervalRec{WF: id, At: time.Now().UnixNano(), PID: l.pid, Began: began})
			return "held " + strconv.Itoa(in.HoldMS), err
		}, effectRetry)
	}, nil)
	w.tick = durable.Register(e, "tick", func(wctx durable.Context, _ struct{}) (string, error) {
		l.run(wctx)
		if _, ok := durable.ScheduledTime(wctx); !ok {
			return "", fmt.Errorf("tick %s has no scheduled time", wctx.WorkflowID())
		}
		eff, err := durable.Step(wctx, "effect", l.effect, effectRetry)
		if err != nil {
			return "", err
		}
		_, err = durable.TxStep(wctx, "app-row", l.appRow, nil)
		return eff, err
	}, nil)
	if err := durable.TrySchedule(w.tick, tickName, tickSpec, &durable.ScheduleOpts[struct{}]{CatchUp: durable.ScheduleCatchUpMax}); err != nil {
		return nil, err
	}
	model, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: modelURL, Model: "scripted", Timeout: time.Minute})
	if err != nil {
		return nil, err
	}
	type noArgs struct{}
	w.agent, err = agentkit.TryDefine(e, "chaos-agent", agentkit.AgentConfig{
		Model:  model,
		System: "You are the chaos agent.",
		Tools: []*agentkit.Tool{
			agentkit.StepTool("effect", "An external effect.", nil, func(ctx context.Context, _ noArgs) (string, error) {
				return l.effect(ctx)
			}, nil),
			agentkit.TxTool("row", "An application row.", nil, func(ctx context.Context, tx pgx.Tx, _ noArgs) (string, error) {
				return l.appRow(ctx, tx)
			}, nil),
		},
		ModelRetry: &durable.RetryPolicy{MaxAttempts: 20, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second},
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// workflowKind tells the verdict what a workflow ID is.
func workflowKind(name string) string {
	switch {
	case strings.HasPrefix(name, agentkit.WorkflowPrefix):
		return "agent"
	default:
		return name
	}
}
