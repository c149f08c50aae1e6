package agentkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/durable-go/durable"
)

// MCPServer is a source of tools served over the Model Context Protocol.
// A run lists the server's tools once, at its start, as a recorded step:
// its turns offer them to the model beside AgentConfig.Tools, and a replay
// or a resumed run uses the recorded list without asking the server again.
// Each call of one of them is a durable step (see [StepTool]) whose
// idempotency key travels in the call's _meta, as "idempotency_key".
type MCPServer struct {
	// Name names the server in errors and in the list step's name
	// (agentkit.mcp:<Name>). Required: letters, digits, '_' or '-'.
	Name string
	// Connect opens a transport to the server: [mcp.CommandTransport]
	// for a server run as a command (stdio), [mcp.StreamableClientTransport]
	// for one served over HTTP ([MCPCommand] and [MCPHTTP] make them).
	// An agent connects once per process, on first use, and again after
	// the connection broke.
	Connect func(ctx context.Context) (mcp.Transport, error)
	// Prefix is put before the names of the server's tools, to keep them
	// apart from other tools'. Defaults to none; a name that two tools of
	// a run share fails the run's list step.
	Prefix string
	// Opts are the options of each call's step (retries, timeout).
	Opts *ToolOpts
}

// MCPCommand is an MCPServer run as the command cmd makes (a new one for
// every connection), talking over its stdin and stdout.
func MCPCommand(name string, cmd func() *exec.Cmd) *MCPServer {
	return &MCPServer{Name: name, Connect: func(context.Context) (mcp.Transport, error) {
		return &mcp.CommandTransport{Command: cmd()}, nil
	}}
}

// MCPHTTP is an MCPServer served over streamable HTTP at url; client nil
// is http.DefaultClient.
func MCPHTTP(name, url string, client *http.Client) *MCPServer {
	return &MCPServer{Name: name, Connect: func(context.Context) (mcp.Transport, error) {
		return &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: client, MaxRetries: -1}, nil
	}}
}

// MCPMetaKey is the _meta entry of an MCP tool call that holds its
// idempotency key ([ToolIdempotencyKey]): a server that deduplicates by
// it acts on a call once, however often the call's step runs.
const MCPMetaKey = "idempotency_key"

// mcpClient is an agent's connection to one MCP server, made on first
// use and again after it broke.
type mcpClient struct {
	srv     *MCPServer
	mu      sync.Mutex
	session *mcp.ClientSession // nil: not connected
}

func (c *mcpClient) connect(ctx context.Context) (*mcp.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session != nil {
		return c.session, nil
	}
	t, err := c.srv.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("agentkit: connect to MCP server %q: %w", c.srv.Name, err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "durable-agentkit", Version: "v1"}, nil)
	s, err := client.Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("agentkit: connect to MCP server %q: %w", c.srv.Name, err)
	}
	c.session = s
	return s, nil
}

// drop forgets session s after a failure, so the next use connects again.
func (c *mcpClient) drop(s *mcp.ClientSession) {
	c.mu.Lock()
	if c.session == s {
		c.session = nil
	}
	c.mu.Unlock()
	_ = s.Close()
}

func (c *mcpClient) close() error {
	c.mu.Lock()
	s := c.session
	c.session = nil
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Close()
}

// list returns the server's tools as specs, their names prefixed.
func (c *mcpClient) list(ctx context.Context) ([]ToolSpec, error) {
	s, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	var specs []ToolSpec
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			c.drop(s)
			return nil, fmt.Errorf("agentkit: list the tools of MCP server %q: %w", c.srv.Name, err)
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || t.InputSchema == nil {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		specs = append(specs, ToolSpec{Name: c.srv.Prefix + t.Name, Description: t.Description, Parameters: schema})
	}
	return specs, nil
}

// call calls the server's tool name with args, under key.
func (c *mcpClient) call(ctx context.Context, name string, args json.RawMessage, key string) (string, error) {
	s, err := c.connect(ctx)
	if err != nil {
		return "", err
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: mcp.Meta{MCPMetaKey: key}})
	if err != nil {
		if ctx.Err() == nil {
			c.drop(s) // the next attempt connects again
		}
		return "", fmt.Errorf("agentkit: MCP server %q tool %q: %w", c.srv.Name, name, err)
	}
	var parts []string
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
			continue
		}
		b, err := json.Marshal(ct)
		if err != nil {
			return "", err
		}
		parts = append(parts, string(b))
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return "", err
		}
		parts = append(parts, string(b))
	}
	text := strings.Join(parts, "\n")
	if res.IsError {
		return "", &ToolError{Message: text}
	}
	return text, nil
}

// mcpTool is the tool of spec served by c: a step tool whose arguments
// go to the server as the model sent them.
func mcpTool(c *mcpClient, spec ToolSpec) *Tool {
	remote := strings.TrimPrefix(spec.Name, c.srv.Prefix)
	return StepTool(spec.Name, spec.Description, spec.Parameters, func(ctx context.Context, args json.RawMessage) (string, error) {
		return c.call(ctx, remote, args, ToolIdempotencyKey(ctx))
	}, c.srv.Opts)
}

// checkMCP checks the MCP servers of an agent's config.
func checkMCP(servers []*MCPServer) error {
	names := map[string]bool{}
	for i, s := range servers {
		switch {
		case s == nil:
			return fmt.Errorf("AgentConfig.MCP[%d] is nil", i)
		case !toolNameRE.MatchString(s.Name):
			return fmt.Errorf("MCP server name %q must be 1 to 64 letters, digits, '_' or '-'", s.Name)
		case names[s.Name]:
			return fmt.Errorf("two MCP servers are named %q", s.Name)
		case s.Connect == nil:
			return fmt.Errorf("MCP server %q has no Connect", s.Name)
		}
		if s.Opts != nil {
			if err := s.Opts.check(s.Name); err != nil {
				return fmt.Errorf("MCP server %q: Opts: %w", s.Name, err)
			}
		}
		names[s.Name] = true
	}
	return nil
}

// listMCP lists the tools of the agent's MCP servers for run rs, each
// server's list a recorded step, and adds them to the run's tools.
func (rs *runState) listMCP() error {
	a := rs.a
	if len(a.mcp) == 0 {
		rs.tools, rs.specs = a.tools, a.specs
		return nil
	}
	rs.tools = make(map[string]*Tool, len(a.tools))
	for n, t := range a.tools {
		rs.tools[n] = t
	}
	rs.specs = append([]ToolSpec(nil), a.specs...)
	for _, c := range a.mcp {
		specs, err := durable.Step(rs.wctx, "agentkit.mcp:"+c.srv.Name, c.list, nil)
		if err != nil {
			return err
		}
		for _, spec := range specs {
			if rs.tools[spec.Name] != nil {
				return fmt.Errorf("agentkit: agent %q: the tool %q of MCP server %q has the name of another tool (set MCPServer.Prefix)",
					a.name, spec.Name, c.srv.Name)
			}
			t := mcpTool(c, spec)
			if t.err != nil { // a name a model API refuses, most likely
				return fmt.Errorf("agentkit: agent %q: MCP server %q: %w", a.name, c.srv.Name, t.err)
			}
			rs.tools[spec.Name] = t
			rs.specs = append(rs.specs, spec)
		}
	}
	return nil
}

// Close closes the agent's connections to its MCP servers (a server run
// as a command is stopped). A later run connects again.
func (a *Agent) Close() error {
	var errs []error
	for _, c := range a.mcp {
		errs = append(errs, c.close())
	}
	return errors.Join(errs...)
}
