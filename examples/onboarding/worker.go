//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// envWorker holds the JSON workerConfig of a worker process; the parent
// sets it when it re-executes itself (see startWorker).
const envWorker = "ONBOARDING_WORKER"

const (
	workflowName = "enterprise-onboarding"
	agentName    = "onboarding-configurator"
	runID        = "onboard-acme"
	executorID   = "onboarding-worker" // the same in both workers: Launch resumes its own runs at once
	appVersion   = "onboarding-1"
)

// workerConfig is what the parent hands a worker.
type workerConfig struct {
	Worker       int           `json:"worker"`
	AppSchema    string        `json:"app_schema"`
	EngineSchema string        `json:"engine_schema"`
	StepDelay    time.Duration `json:"step_delay"`
	Chunks       int           `json:"chunks"`
	PaymentsURL  string        `json:"payments_url"`
	MailURL      string        `json:"mail_url"`
	ChatURL      string        `json:"chat_url"`
	ModelURL     string        `json:"model_url"`
	ModelName    string        `json:"model_name"`
	Verbose      bool          `json:"verbose"`
}

// Customer is the workflow's input.
type Customer struct {
	Company  string   `json:"company"`
	Plan     string   `json:"plan"`
	Seats    int      `json:"seats"`
	Contacts []Member `json:"contacts"` // one per role: admin, billing, developer
}

// Member is a contact of the customer.
type Member struct {
	Role  string `json:"role"`
	Email string `json:"email"`
}

// Onboarded is the workflow's result; every field comes from a recorded step.
type Onboarded struct {
	WorkspaceID  int64    `json:"workspace_id"`
	Imported     int      `json:"imported"`
	Config       string   `json:"config"`
	Subscription string   `json:"subscription"`
	Emails       []string `json:"emails"`
	ChatMessage  string   `json:"chat_message"`
	AuditID      int64    `json:"audit_id"`
}

var acme = Customer{Company: "Acme Corp", Plan: "enterprise", Seats: 250, Contacts: []Member{
	{Role: "admin", Email: "it@acme.example"},
	{Role: "billing", Email: "finance@acme.example"},
	{Role: "developer", Email: "dev@acme.example"},
}}

// recordsPerChunk is the number of customer records each import chunk writes.
const recordsPerChunk = 500

// app is what the workflow's steps need.
type app struct {
	cfg    workerConfig
	pool   *pgxpool.Pool
	schema string // quoted identifier
	http   *http.Client
	agent  *agentkit.Agent
	out    io.Writer
}

func (a *app) t(table string) string { return a.schema + "." + table }

// say prints a progress line of this worker.
func (a *app) say(format string, args ...any) {
	fmt.Fprintf(a.out, "    [worker %d pid %d] %s\n", a.cfg.Worker, os.Getpid(), fmt.Sprintf(format, args...))
}

// work simulates part of a step's duration.
func work(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// post sends body to a provider with an idempotency key and returns the
// ID of the resource it created (or had created for that key before).
func (a *app) post(ctx context.Context, url, key string, body any) (id string, replayed bool, err error) {
	b, err := json.Marshal(body)
	if err != nil {
		return "", false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := a.http.Do(req)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", false, fmt.Errorf("POST %s: %s: %s", url, resp.Status, strings.TrimSpace(string(msg)))
	}
	var out struct {
		ID       string `json:"id"`
		Replayed bool   `json:"replayed"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", false, fmt.Errorf("POST %s: %w", url, err)
	}
	return out.ID, out.Replayed, nil
}

// effectStep is a plain step that calls a provider halfway through its
// duration: a kill in the second half lands after the effect and before
// the checkpoint, so the step runs again and the provider sees the key
// again.
func (a *app) effectStep(what, url string, key func(ctx context.Context) string, body any) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		if err := work(ctx, a.cfg.StepDelay/2); err != nil {
			return "", err
		}
		k := key(ctx)
		id, replayed, err := a.post(ctx, url, k, body)
		if err != nil {
			return "", err
		}
		if replayed {
			a.say("%-22s provider already had key %s: returned %s, did nothing new", what, k, id)
		} else {
			a.say("%-22s -> %s (Idempotency-Key %s)", what, id, k)
		}
		return id, work(ctx, a.cfg.StepDelay/2)
	}
}

// onboard is the workflow: seven steps of onboarding an enterprise
// customer.
func (a *app) onboard(wctx durable.Context, in Customer) (Onboarded, error) {
	var r Onboarded
	var err error
	run := wctx.WorkflowID()

	// 1. Provision the workspace: app rows and checkpoint in one transaction.
	r.WorkspaceID, err = durable.TxStep(wctx, "provision-workspace", func(ctx context.Context, tx pgx.Tx) (int64, error) {
		if err := work(ctx, a.cfg.StepDelay); err != nil {
			return 0, err
		}
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO `+a.t("workspaces")+` (run_id, company, plan, seats) VALUES ($1, $2, $3, $4) RETURNING id`,
			run, in.Company, in.Plan, in.Seats).Scan(&id); err != nil {
			return 0, err
		}
		for _, m := range in.Contacts {
			if _, err := tx.Exec(ctx, `INSERT INTO `+a.t("members")+` (workspace_id, role, email) VALUES ($1, $2, $3)`, id, m.Role, m.Email); err != nil {
				return 0, err
			}
		}
		a.say("%-22s workspace %d with %d members (rows commit with the checkpoint)", "1 provision-workspace", id, len(in.Contacts))
		return id, nil
	}, nil)
	if err != nil {
		return r, err
	}

	// 2. Import the customer's data: the source allows one chunk per
	// interval, so the run sleeps durably between chunks.
	for c := 1; c <= a.cfg.Chunks; c++ {
		if c > 1 {
			if err := durable.Sleep(wctx, a.cfg.StepDelay/time.Duration(a.cfg.Chunks)); err != nil {
				return r, err
			}
		}
		n, err := durable.TxStep(wctx, fmt.Sprintf("import-chunk-%d", c), func(ctx context.Context, tx pgx.Tx) (int, error) {
			if err := work(ctx, a.cfg.StepDelay/time.Duration(a.cfg.Chunks)); err != nil {
				return 0, err
			}
			tag, err := tx.Exec(ctx, `INSERT INTO `+a.t("records")+` (workspace_id, chunk, n)
SELECT $1, $2, g FROM generate_series(1, $3) g`, r.WorkspaceID, c, recordsPerChunk)
			if err != nil {
				return 0, err
			}
			a.say("%-22s chunk %d/%d: %d records (rate limit: one chunk per %v)", "2 import-data", c, a.cfg.Chunks, tag.RowsAffected(),
				a.cfg.StepDelay/time.Duration(a.cfg.Chunks))
			return int(tag.RowsAffected()), nil
		}, nil)
		if err != nil {
			return r, err
		}
		r.Imported += n
	}

	// 3. A model writes the starter configuration. The agent runs as a
	// child workflow, and Await records its answer: a resumed run gets it
	// back from the database instead of asking the model again (and a
	// long wait for it parks this run instead of holding a goroutine).
	h, err := a.agent.Workflow().StartChild(wctx, agentkit.Input{Prompt: fmt.Sprintf(
		"Write the starter configuration of the workspace of %s: plan %s, %d seats, roles admin, billing and developer. Answer with one compact JSON object only.",
		in.Company, in.Plan, in.Seats)}, nil)
	if err != nil {
		return r, err
	}
	res, err := h.Await(wctx)
	if err != nil {
		return r, fmt.Errorf("generate config: %w", err)
	}
	r.Config = res.Final

	// 4. The subscription, deduplicated by the step's idempotency key.
	r.Subscription, err = durable.Step(wctx, "create-subscription", a.effectStep("4 create-subscription", a.cfg.PaymentsURL,
		durable.IdempotencyKey, map[string]any{"customer": in.Company, "plan": in.Plan, "seats": in.Seats}), nil)
	if err != nil {
		return r, err
	}

	// 5. Three welcome emails, deduplicated on run + email type.
	for _, m := range in.Contacts {
		key := func(context.Context) string { return run + "/welcome-" + m.Role }
		id, err := durable.Step(wctx, "welcome-email-"+m.Role, a.effectStep("5 welcome-email-"+m.Role, a.cfg.MailURL, key,
			map[string]any{"to": m.Email, "template": "welcome-" + m.Role, "workspace": r.WorkspaceID}), nil)
		if err != nil {
			return r, err
		}
		r.Emails = append(r.Emails, id)
	}

	// 6. A chat message to the account team.
	r.ChatMessage, err = durable.Step(wctx, "post-chat-message", a.effectStep("6 post-chat-message", a.cfg.ChatURL,
		durable.IdempotencyKey, map[string]any{"channel": "#new-customers",
			"text": fmt.Sprintf("%s is live on %s (%d seats, subscription %s)", in.Company, in.Plan, in.Seats, r.Subscription)}), nil)
	if err != nil {
		return r, err
	}

	// 7. The audit record, in the same transaction as its checkpoint.
	r.AuditID, err = durable.TxStep(wctx, "write-audit", func(ctx context.Context, tx pgx.Tx) (int64, error) {
		if err := work(ctx, a.cfg.StepDelay); err != nil {
			return 0, err
		}
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO `+a.t("audit")+` (run_id, workspace_id, subscription, emails, chat_message)
VALUES ($1, $2, $3, $4, $5) RETURNING id`, run, r.WorkspaceID, r.Subscription, r.Emails, r.ChatMessage).Scan(&id)
		if err != nil {
			return 0, err
		}
		a.say("%-22s audit row %d", "7 write-audit", id)
		return id, nil
	}, nil)
	return r, err
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

func newEngine(pool *pgxpool.Pool, schema, executor string, logger *slog.Logger) (*durable.Engine, error) {
	return durable.New(pool, &durable.Config{Schema: schema, AppVersion: appVersion, ExecutorID: executor, Logger: logger})
}

// register declares the workflow and its agent on eng. model may be nil
// in a process that only reads.
func register(eng *durable.Engine, a *app, model agentkit.Model) *durable.Workflow[Customer, Onboarded] {
	if model == nil {
		model = agentkit.ModelFunc(func(context.Context, *agentkit.Request) (*agentkit.Response, error) {
			return nil, errors.New("this process does not call the model")
		})
	}
	a.agent = agentkit.Define(eng, agentName, agentkit.AgentConfig{
		Model:  model,
		System: "You configure new SaaS workspaces. Reply with a single JSON object, no prose.",
		Limits: agentkit.Limits{MaxTurns: 2},
	})
	return durable.Register(eng, workflowName, a.onboard, nil)
}

// workerMain is the entry of a worker process. It returns the exit code.
func workerMain() int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(envWorker)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "onboarding worker: bad %s: %v\n", envWorker, err)
		return 2
	}
	if err := runWorker(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "    [worker %d pid %d] error: %v\n", cfg.Worker, os.Getpid(), err)
		return 1
	}
	return 0
}

func runWorker(cfg workerConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.Verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	eng, err := newEngine(pool, cfg.EngineSchema, executorID, logger)
	if err != nil {
		return err
	}
	model, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: cfg.ModelURL, Model: cfg.ModelName})
	if err != nil {
		return err
	}
	a := &app{cfg: cfg, pool: pool, schema: pgx.Identifier{cfg.AppSchema}.Sanitize(), http: &http.Client{Timeout: 30 * time.Second}, out: os.Stdout}
	counted := agentkit.ModelFunc(func(ctx context.Context, req *agentkit.Request) (*agentkit.Response, error) {
		a.say("%-22s asking the model %s (only ever for a turn that was never recorded)", "3 generate-config", cfg.ModelName)
		resp, err := model.Generate(ctx, req)
		if err == nil {
			a.say("%-22s the model answered (recorded with the step): %s", "3 generate-config", oneLine(resp.Message.Text(), 50))
		}
		return resp, err
	})
	wf := register(eng, a, counted)
	if err := eng.Launch(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng.Shutdown(sctx)
	}()

	var h *durable.Handle[Onboarded]
	if cfg.Worker == 1 {
		a.say("engine launched as executor %q; starting run %s of %s", executorID, runID, workflowName)
		h, err = wf.Start(ctx, acme, &durable.StartOpts{ID: runID})
	} else {
		a.say("engine launched as executor %q: Launch resumed its pending runs; following %s", executorID, runID)
		h, err = wf.Handle(ctx, runID)
	}
	if err != nil {
		return err
	}
	res, err := h.Result(ctx)
	if err != nil {
		return fmt.Errorf("run %s: %w", runID, err)
	}
	a.say("run %s finished: workspace %d, subscription %s, emails %s, audit row %d", runID, res.WorkspaceID, res.Subscription,
		strings.Join(res.Emails, " "), res.AuditID)
	return nil
}
