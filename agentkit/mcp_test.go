package agentkit_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/internal/proctest"
)

// payMCP is a test MCP server: "add" adds two numbers; "charge" charges
// once per idempotency key (the call's _meta), answering a repeated key
// with the first charge's ID; "decline" fails as a tool. hold, when set,
// makes the first charge wait, once done, until its client goes.
type payMCP struct {
	mu       sync.Mutex
	lists    int               // tools/list requests
	charges  []string          // the key of every charge request
	effects  map[string]string // key -> charge ID
	hold     bool
	held     chan struct{}
	heldOnce sync.Once
	restart  func() // set by serveHTTP
}

func newPayMCP(hold bool) *payMCP {
	return &payMCP{effects: map[string]string{}, hold: hold, held: make(chan struct{})}
}

type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

type chargeIn struct {
	Amount int `json:"amount"`
}

func (p *payMCP) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "pay", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two numbers."}, func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(in.A + in.B)}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "charge", Description: "Charge the card."}, func(ctx context.Context, req *mcp.CallToolRequest, in chargeIn) (*mcp.CallToolResult, any, error) {
		key, _ := req.Params.GetMeta()[agentkit.MCPMetaKey].(string)
		p.mu.Lock()
		p.charges = append(p.charges, key)
		id, seen := p.effects[key]
		if !seen {
			id = fmt.Sprintf("ch_%d_%d", len(p.effects)+1, in.Amount)
			p.effects[key] = id
		}
		first := !seen && len(p.effects) == 1
		p.mu.Unlock()
		if first && p.hold {
			p.heldOnce.Do(func() { close(p.held) })
			<-ctx.Done() // the client dies before it reads the answer
			return nil, nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "charged " + id}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "decline", Description: "Always declines."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "card declined"}}}, nil, nil
	})
	return s
}

// serveHTTP serves p over streamable HTTP, counting tools/list requests.
// p.restart makes it forget its sessions, as a restarted server does.
func (p *payMCP) serveHTTP(t *testing.T) string {
	s := p.server()
	var handler atomic.Pointer[mcp.StreamableHTTPHandler]
	p.restart = func() { handler.Store(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)) }
	p.restart()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			b, _ := io.ReadAll(r.Body)
			if bytes.Contains(b, []byte(`"tools/list"`)) {
				p.mu.Lock()
				p.lists++
				p.mu.Unlock()
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		handler.Load().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveMCPStdioIfAsked is the test binary as an MCP server on stdin and
// stdout, for MCPCommand.
func serveMCPStdioIfAsked() bool {
	if os.Getenv("AGENTKIT_MCP_STDIO") == "" {
		return false
	}
	if err := newPayMCP(false).server().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcp server:", err)
		os.Exit(3)
	}
	os.Exit(0)
	return true
}

// mcpScript: turn 1 calls add, charge and decline; turn 2 answers with
// what it got.
func mcpScript() agentkittest.Script {
	return func(r *agentkittest.Request) agentkittest.Reply {
		if r.Turn == 1 {
			return agentkittest.Reply{ToolCalls: []agentkit.ToolCall{
				call("add", `{"a":2,"b":3}`), call("charge", `{"amount":7}`), call("decline", `{}`),
			}}
		}
		return agentkittest.Reply{Text: "Done: " + strings.Join(r.ToolResults(), "; ")}
	}
}

// TestMCPTools: an agent's MCP server over streamable HTTP, listed once
// per run (a recorded step), its tools offered beside the agent's own
// and called as steps with the call's idempotency key in _meta; a tool
// error reaches the model as an error result. A server that restarted
// between two runs (the agent's session unknown to it) is connected to
// again.
func TestMCPTools(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	pay := newPayMCP(false)
	url := pay.serveHTTP(t)
	srv := agentkittest.NewServer(mcpScript())
	defer srv.Close()
	var a *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		a = agentkit.Define(e, "mcp", agentkit.AgentConfig{
			Model: openAI(t, srv),
			Tools: []*agentkit.Tool{agentkit.StepTool("lookup", "Look up.", nil, func(context.Context, keyArgs) (string, error) { return "", nil }, nil)},
			MCP:   []*agentkit.MCPServer{agentkit.MCPHTTP("pay", url, nil)},
		})
	})
	t.Cleanup(func() { _ = a.Close() })
	for _, id := range []string{"mcp-1", "mcp-2"} {
		if id == "mcp-2" {
			pay.restart() // the agent's session is gone: it connects again
		}
		h, err := a.Start(ctx, agentkit.Input{Prompt: "Pay."}, &durable.StartOpts{ID: id})
		require.NoError(t, err)
		res, err := h.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "Done: 5; charged ch_"+map[string]string{"mcp-1": "1", "mcp-2": "2"}[id]+"_7; card declined", res.Final)
	}
	reqs := srv.Requests()
	require.Equal(t, []string{"lookup", "add", "charge", "decline"}, reqs[0].Tools, "the agent's tools, then the server's")
	pay.mu.Lock()
	defer pay.mu.Unlock()
	require.Equal(t, 3, pay.lists, "one list per run, and run 2's first try on the forgotten session")
	require.Equal(t, []string{"mcp-1/1/call_1_1", "mcp-2/1/call_1_1"}, pay.charges, "each charge carries its call's key")
}

// TestMCPToolsOverStdio: an MCP server run as a command (this test binary)
// serves the agent over stdin and stdout; Close stops it.
func TestMCPToolsOverStdio(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	srv := agentkittest.NewServer(mcpScript())
	defer srv.Close()
	var a *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		a = agentkit.Define(e, "stdio", agentkit.AgentConfig{
			Model: openAI(t, srv),
			MCP: []*agentkit.MCPServer{agentkit.MCPCommand("calc", func() *exec.Cmd {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), "AGENTKIT_MCP_STDIO=1")
				return cmd
			})},
		})
	})
	h, err := a.Start(ctx, agentkit.Input{Prompt: "Pay."}, &durable.StartOpts{ID: "stdio-1"})
	require.NoError(t, err)
	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "Done: 5; charged ch_1_7; card declined", res.Final)
	require.NoError(t, a.Close())
}

// TestMCPConfig: bad MCP servers are typed errors at Define; a server
// tool named like an agent's tool fails the run unless prefixed.
func TestMCPConfig(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := ctxT(t)
	pay := newPayMCP(false)
	url := pay.serveHTTP(t)
	srv := agentkittest.NewServer(mcpScript())
	defer srv.Close()
	model := openAI(t, srv)
	add := agentkit.StepTool("add", "Add.", nil, func(context.Context, addIn) (int, error) { return 0, nil }, nil)
	odd := mcp.NewServer(&mcp.Implementation{Name: "odd", Version: "v1"}, nil)
	mcp.AddTool(odd, &mcp.Tool{Name: "look.up"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	oddSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return odd }, nil))
	t.Cleanup(oddSrv.Close)
	var clash, prefixed, badName *agentkit.Agent
	v.engine(t, nil, func(e *durable.Engine) {
		badName = agentkit.Define(e, "badname", agentkit.AgentConfig{Model: model, MCP: []*agentkit.MCPServer{agentkit.MCPHTTP("odd", oddSrv.URL, nil)}})
		for _, bad := range [][]*agentkit.MCPServer{{nil}, {{Name: "bad name", Connect: agentkit.MCPHTTP("x", url, nil).Connect}},
			{{Name: "noconnect"}}, {agentkit.MCPHTTP("dup", url, nil), agentkit.MCPHTTP("dup", url, nil)},
			{{Name: "badopts", Connect: agentkit.MCPHTTP("x", url, nil).Connect, Opts: &agentkit.ToolOpts{Retry: &durable.RetryPolicy{MaxAttempts: -1}}}}} {
			_, err := agentkit.TryDefine(e, "bad", agentkit.AgentConfig{Model: model, MCP: bad})
			require.ErrorIs(t, err, durable.ErrInvalidArgument)
		}
		clash = agentkit.Define(e, "clash", agentkit.AgentConfig{Model: model, Tools: []*agentkit.Tool{add},
			MCP: []*agentkit.MCPServer{agentkit.MCPHTTP("pay", url, nil)}})
		p := agentkit.MCPHTTP("pay", url, nil)
		p.Prefix = "pay_"
		prefixed = agentkit.Define(e, "prefixed", agentkit.AgentConfig{Model: model, Tools: []*agentkit.Tool{add},
			MCP: []*agentkit.MCPServer{p}})
	})
	t.Cleanup(func() { _ = clash.Close(); _ = prefixed.Close(); _ = badName.Close() })
	h, err := badName.Start(ctx, agentkit.Input{Prompt: "Look."}, &durable.StartOpts{ID: "badname-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorContains(t, err, `MCP server "odd"`)
	require.ErrorContains(t, err, `"look.up"`, "a tool name a model API refuses fails the run, naming it")

	h, err = clash.Start(ctx, agentkit.Input{Prompt: "Pay."}, &durable.StartOpts{ID: "clash-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.ErrorContains(t, err, `the tool "add" of MCP server "pay" has the name of another tool`)

	h, err = prefixed.Start(ctx, agentkit.Input{Prompt: "Pay."}, &durable.StartOpts{ID: "prefixed-1"})
	require.NoError(t, err)
	_, err = h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"add", "pay_add", "pay_charge", "pay_decline"}, srv.Requests()[len(srv.Requests())-1].Tools)
}

// runMCPChild runs the agent of TestMCPToolsThroughSIGKILL: its tools are
// those of the MCP server at AGENTKIT_MCP_URL.
func runMCPChild(ctx context.Context, e *durable.Engine, model agentkit.Model) error {
	a := agentkit.Define(e, "mcpcrash", agentkit.AgentConfig{
		Model: model,
		MCP:   []*agentkit.MCPServer{agentkit.MCPHTTP("pay", os.Getenv("AGENTKIT_MCP_URL"), nil)},
	})
	defer func() { _ = a.Close() }()
	return runToResult(ctx, e, a, "mcp-crash", "Pay.", func(res agentkit.Result) string { return res.Final })
}

// TestMCPToolsThroughSIGKILL: the process running an agent is SIGKILLed
// after its MCP server charged the card, before the call's checkpoint.
// The restarted process resumes the run by replay: the recorded tool list
// is not asked for again, the recorded model turn not re-sampled, and the
// charge is called again with the same idempotency key, which the server
// answers with the first charge.
func TestMCPToolsThroughSIGKILL(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	pay := newPayMCP(true)
	url := pay.serveHTTP(t)
	srv := agentkittest.NewServer(mcpScript())
	defer srv.Close()
	env := []string{"AGENTKIT_MODEL_URL=" + srv.URL, "AGENTKIT_MCP_URL=" + url}

	first := proctest.Start(t, append([]string{"AGENTKIT_CHILD=mcp", "AGENTKIT_SCHEMA=" + v.schema}, env...)...)
	select {
	case <-pay.held:
	case <-ctxT(t).Done():
		t.Fatalf("the charge was never called; child stderr:\n%s", first.Stderr.String())
	}
	first.Kill(t)

	second := proctest.Start(t, append([]string{"AGENTKIT_CHILD=mcp", "AGENTKIT_SCHEMA=" + v.schema}, env...)...)
	require.Equal(t, "result Done: 5; charged ch_1_7; card declined", second.WaitLine(t, "result"))
	require.NoError(t, second.Wait(t))

	pay.mu.Lock()
	defer pay.mu.Unlock()
	require.Equal(t, 1, pay.lists, "the recorded list is not asked for again")
	require.Equal(t, []string{"mcp-crash/1/call_1_1", "mcp-crash/1/call_1_1"}, pay.charges, "the same key twice")
	require.Len(t, pay.effects, 1, "one charge")
	require.Equal(t, map[int]int{1: 1, 2: 1}, srv.TurnCounts(), "no recorded turn was asked again")
}
