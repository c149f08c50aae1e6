//go:build unix

// Command research runs a cron-scheduled research agent (every minute) on
// two replicas at once, and shows that each tick ran once: no leader, no
// lock service, only the tick's deterministic workflow ID.
//
// Run it from the repository root:
//
//	scripts/with-postgres go run ./examples/research
//
// The parent starts two replica processes (re-executions of itself) that
// both declare the schedule with agentkit.Schedule, waits for -ticks ticks
// (3 by default, so about three minutes), stops the replicas and prints
// which replica ran each tick. Each run is an agent whose model (an offline
// scripted server in each replica) calls competitor_prices, a tool of an
// MCP server (each replica serves one over streamable HTTP on a local
// port), then the save_report tool, a transaction step writing one row to
// research.reports, and answers with findings of a Go type
// (AgentConfig.Output: sent as the response format, checked, decoded by
// the parent). The demo drops and recreates the schemas research and
// research_durable on every run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/examples/internal/demo"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	envReplica   = "RESEARCH_REPLICA" // JSON replicaConfig: run as a replica
	agentName    = "market-research"
	scheduleName = "market-research"
	appVersion   = "research-1"
)

type options struct {
	Schema   string // app schema; the engine's is Schema + "_durable"; default "research"
	Spec     string // cron spec; default every minute
	Ticks    int    // ticks to wait for; default 3
	Replicas int    // default 2
}

type replicaConfig struct {
	N      int    `json:"n"`
	Schema string `json:"schema"`
	Spec   string `json:"spec"`
}

func main() {
	if os.Getenv(envReplica) != "" {
		os.Exit(replicaMain())
	}
	var o options
	flag.StringVar(&o.Spec, "spec", "* * * * *", "cron spec of the schedule (a leading seconds field is allowed)")
	flag.IntVar(&o.Ticks, "ticks", 3, "ticks to wait for")
	flag.IntVar(&o.Replicas, "replicas", 2, "replica processes")
	flag.Parse()
	demo.Main("research", func(ctx context.Context, out io.Writer) error { return run(ctx, out, o) })
}

func newEngine(pool *pgxpool.Pool, schema, executor string) (*durable.Engine, error) {
	return durable.New(pool, &durable.Config{Schema: schema + "_durable", AppVersion: appVersion, ExecutorID: executor,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PollInterval: 500 * time.Millisecond})
}

// setup drops and makes again the app schema (its reports table) and the
// engine's schema (schema + "_durable").
func setup(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+s+` CASCADE;
DROP SCHEMA IF EXISTS `+pgx.Identifier{schema + "_durable"}.Sanitize()+` CASCADE;
CREATE SCHEMA `+s+`;
CREATE TABLE `+s+`.reports (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id  text NOT NULL, -- deliberately not unique: a second run of a tick would show
    replica int NOT NULL,
    summary text NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
)`); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	return durable.Migrate(ctx, pool, schema+"_durable")
}

func run(ctx context.Context, out io.Writer, o options) error {
	if o.Schema == "" {
		o.Schema = "research"
	}
	if o.Spec == "" {
		o.Spec = "* * * * *"
	}
	if o.Ticks <= 0 {
		o.Ticks = 3
	}
	if o.Replicas <= 0 {
		o.Replicas = 2
	}
	w := demo.NewSyncWriter(out)
	say := func(format string, args ...any) { fmt.Fprintf(w, "[parent] "+format+"\n", args...) }
	pool, err := demo.Connect(ctx, "research")
	if err != nil {
		return err
	}
	defer pool.Close()
	s := pgx.Identifier{o.Schema}.Sanitize()
	if err := setup(ctx, pool, o.Schema); err != nil {
		return err
	}
	fmt.Fprintf(w, "research: a cron agent (%q) on %d replicas runs once per tick\n\n", o.Spec, o.Replicas)

	var procs []*exec.Cmd
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
		}
	}()
	for n := 1; n <= o.Replicas; n++ {
		b, _ := json.Marshal(replicaConfig{N: n, Schema: o.Schema, Spec: o.Spec})
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), envReplica+"="+string(b))
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, cmd)
		say("started replica %d (pid %d)", n, cmd.Process.Pid)
	}

	// Wait for Ticks finished runs of the schedule.
	eng, err := newEngine(pool, o.Schema, "research-parent")
	if err != nil {
		return err
	}
	prefix := "sched:" + scheduleName + ":"
	list := func() ([]durable.WorkflowInfo, error) {
		runs, _, err := eng.ListWorkflows(ctx, &durable.ListParams{IDPrefix: prefix, Limit: durable.ListLimitMax})
		return runs, err
	}
	say("waiting for %d ticks", o.Ticks)
	for {
		runs, err := list()
		if err != nil {
			return err
		}
		finished := 0
		for _, r := range runs {
			if r.Status.Finished() {
				finished++
			}
		}
		if finished >= o.Ticks {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Stop the replicas; a tick that fires meanwhile may leave a run
	// pending, which the report shows.
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		_ = p.Wait()
	}
	procs = nil
	say("stopped the replicas")

	runs, err := list()
	if err != nil {
		return err
	}
	type report struct {
		replica int
		summary string
	}
	reports := map[string][]report{}
	rows, err := pool.Query(ctx, `SELECT run_id, replica, summary FROM `+s+`.reports ORDER BY id`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var r report
		if err := rows.Scan(&id, &r.replica, &r.summary); err != nil {
			rows.Close()
			return err
		}
		reports[id] = append(reports[id], r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].ID < runs[j].ID })
	fmt.Fprintf(w, "\nRuns of schedule %q (one workflow ID per tick: sched:<name>:<tick>)\n", scheduleName)
	var bad []string
	byReplica := map[int]int{}
	for _, r := range runs {
		tick := strings.TrimPrefix(r.ID, prefix)
		line := fmt.Sprintf("  tick %s  %-8s", tick, r.Status)
		for _, rep := range reports[r.ID] {
			line += fmt.Sprintf("  replica %d: %s", rep.replica, rep.summary)
			byReplica[rep.replica]++
		}
		if r.Status == durable.StatusSuccess {
			f, err := decodeFindings(r.Output)
			if err != nil {
				bad = append(bad, fmt.Sprintf("tick %s: %v", tick, err))
			} else {
				line += fmt.Sprintf("  findings: %d competitors, cheapest %s", f.Competitors, f.Cheapest)
			}
		}
		fmt.Fprintln(w, line)
		if r.Status == durable.StatusSuccess && len(reports[r.ID]) != 1 {
			bad = append(bad, fmt.Sprintf("tick %s has %d reports", tick, len(reports[r.ID])))
		}
	}
	var extra []string
	for id := range reports {
		if !strings.HasPrefix(id, prefix) {
			extra = append(extra, id)
		}
	}
	if len(extra) > 0 {
		bad = append(bad, fmt.Sprintf("reports of runs that are not ticks: %v", extra))
	}
	finished := 0
	for _, r := range runs {
		if r.Status == durable.StatusSuccess {
			finished++
		}
	}
	if finished < o.Ticks {
		bad = append(bad, fmt.Sprintf("%d ticks succeeded, want %d", finished, o.Ticks))
	}
	var per []string
	for n := 1; n <= o.Replicas; n++ {
		per = append(per, fmt.Sprintf("replica %d ran %d", n, byReplica[n]))
	}
	fmt.Fprintf(w, "\n%s\n", strings.Join(per, ", "))
	if len(bad) > 0 {
		msg := "FAILED: " + strings.Join(bad, "; ")
		fmt.Fprintln(w, "\n"+msg)
		return &demo.Failed{Msg: msg}
	}
	fmt.Fprintf(w, "\nOK: %d ticks, each run once (one workflow, one report row) across %d replicas\n", finished, o.Replicas)
	return nil
}

// replicaMain is the entry of a replica process.
func replicaMain() int {
	var cfg replicaConfig
	if err := json.Unmarshal([]byte(os.Getenv(envReplica)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "research replica: bad %s: %v\n", envReplica, err)
		return 2
	}
	if err := runReplica(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "    [replica %d pid %d] error: %v\n", cfg.N, os.Getpid(), err)
		return 1
	}
	return 0
}

type reportArgs struct {
	Summary string `json:"summary"`
}

// findings are the agent's answer: AgentConfig.Output makes the model's
// final answer JSON of this type.
type findings struct {
	Competitors int    `json:"competitors"`
	Cheapest    string `json:"cheapest"`
	Summary     string `json:"summary"`
}

// researchScript is the offline model: look the prices up (the MCP
// tool), save a report, then answer with findings as JSON.
func researchScript() agentkittest.Script {
	return func(req *agentkittest.Request) agentkittest.Reply {
		switch req.Turn {
		case 1:
			return agentkittest.Reply{ToolCalls: []agentkit.ToolCall{{Name: "competitor_prices", Arguments: json.RawMessage(`{"market":"espresso machines"}`)}}}
		case 2:
			args, _ := json.Marshal(reportArgs{Summary: "3 competitors' prices; " + strings.TrimPrefix(req.Messages[1].Content, "Research the market as of ")})
			return agentkittest.Reply{ToolCalls: []agentkit.ToolCall{{Name: "save_report", Arguments: args}}}
		}
		answer, _ := json.Marshal(findings{Competitors: 3, Cheapest: "globex", Summary: req.ToolResults()[0]})
		return agentkittest.Reply{Text: string(answer)}
	}
}

// defineAgent defines the research agent name on eng: tools save_report
// (a transaction step writing to schema's reports table, by replica) and
// the MCP server at mcpURL's, findings as its answer; saved is told each
// run that saved its report.
func defineAgent(eng *durable.Engine, name string, model agentkit.Model, schema, mcpURL string, saved func(runID string), replica int) (*agentkit.Agent, error) {
	table := pgx.Identifier{schema, "reports"}.Sanitize()
	save := agentkit.TxTool("save_report", "Save the research report.",
		json.RawMessage(`{"type":"object","properties":{"summary":{"type":"string"}},"required":["summary"]}`),
		func(ctx context.Context, tx pgx.Tx, a reportArgs) (string, error) {
			info, _ := agentkit.ToolCallFrom(ctx)
			if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (run_id, replica, summary) VALUES ($1, $2, $3)`, info.RunID, replica, a.Summary); err != nil {
				return "", err
			}
			saved(info.RunID)
			return "saved", nil
		}, nil)
	out, err := agentkit.OutputOf[findings]()
	if err != nil {
		return nil, err
	}
	return agentkit.TryDefine(eng, name, agentkit.AgentConfig{Model: model, System: "You research the market.",
		Tools: []*agentkit.Tool{save}, MCP: []*agentkit.MCPServer{agentkit.MCPHTTP("market", mcpURL, nil)}, Output: out})
}

// decodeFindings reads the findings of a run's recorded result.
func decodeFindings(output json.RawMessage) (findings, error) {
	var res agentkit.Result
	if err := json.Unmarshal(output, &res); err != nil {
		return findings{}, err
	}
	return agentkit.DecodeOutput[findings](res)
}

type marketArgs struct {
	Market string `json:"market"`
}

// serveMarketMCP serves an MCP server with the competitor_prices tool on
// a local port, over streamable HTTP; it returns the endpoint.
func serveMarketMCP(ctx context.Context) (string, error) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "market", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "competitor_prices", Description: "Competitors' prices in a market."},
		func(_ context.Context, _ *mcp.CallToolRequest, a marketArgs) (*mcp.CallToolResult, any, error) {
			prices := "acme 19.90, globex 17.50, initech 21.00 (" + a.Market + ")"
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: prices}}}, nil, nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)}
	go func() { _ = hs.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	return "http://" + ln.Addr().String(), nil
}

func runReplica(cfg replicaConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	say := func(format string, args ...any) {
		fmt.Printf("    [replica %d pid %d] %s\n", cfg.N, os.Getpid(), fmt.Sprintf(format, args...))
	}
	srv := agentkittest.NewServer(researchScript())
	defer srv.Close()
	model, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: srv.URL, Model: "scripted"})
	if err != nil {
		return err
	}
	eng, err := newEngine(pool, cfg.Schema, fmt.Sprintf("research-%d", cfg.N))
	if err != nil {
		return err
	}
	mcpURL, err := serveMarketMCP(ctx)
	if err != nil {
		return err
	}
	agent, err := defineAgent(eng, agentName, model, cfg.Schema, mcpURL, func(runID string) {
		say("ran %s: saved its report", runID)
	}, cfg.N)
	if err != nil {
		return err
	}
	defer func() { _ = agent.Close() }()
	if err := agentkit.Schedule(agent, scheduleName, cfg.Spec, func(tick time.Time) string {
		return "Research the market as of " + tick.UTC().Format(time.RFC3339)
	}, nil); err != nil {
		return err
	}
	if err := eng.Launch(ctx); err != nil {
		return err
	}
	say("engine launched as executor %q with schedule %q (%s)", eng.ExecutorID(), scheduleName, cfg.Spec)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return eng.Shutdown(sctx)
}
