//go:build unix

package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/examples/internal/demo"
	"github.com/durable-go/durable/examples/internal/demotest"
)

// TestResearchFixture records one research run (the scripted model, the
// MCP tool, the report, the typed answer), exports it as a fixture file,
// and replays the agent's code against it with the model taken out: the
// same answer, and the model never asked.
func TestResearchFixture(t *testing.T) {
	demotest.NeedDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := demo.Connect(ctx, "research")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const schema = "research_fixture"
	if err := setup(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	srv := agentkittest.NewServer(researchScript())
	defer srv.Close()
	model, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: srv.URL, Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	mcpURL, err := serveMarketMCP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := newEngine(pool, schema, "fixture")
	if err != nil {
		t.Fatal(err)
	}
	var fx *agentkit.Fixture
	recorded, err := defineAgent(eng, agentName, model, schema, mcpURL, func(string) {}, 1)
	if err != nil {
		t.Fatal(err)
	}
	replay, err := defineAgent(eng, agentName+"-replay", replayModel{&fx}, schema, mcpURL, func(string) {}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = recorded.Close(); _ = replay.Close() }()
	if err := eng.Launch(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = eng.Shutdown(context.Background()) }()

	h, err := recorded.Start(ctx, agentkit.Input{Prompt: "Research the market as of 2026-12-01T00:00:00Z"}, &durable.StartOpts{ID: "recorded"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := h.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exported, err := agentkit.ExportFixture(ctx, recorded, "recorded")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "research.fixture.json")
	if err := exported.WriteFile(file); err != nil {
		t.Fatal(err)
	}
	if fx, err = agentkit.ReadFixture(file); err != nil {
		t.Fatal(err)
	}
	asked := len(srv.Requests())
	got, err := fx.Replay(ctx, replay, "replayed")
	if err != nil {
		t.Fatal(err)
	}
	if got.Final != want.Final || string(got.Output) != string(want.Output) {
		t.Fatalf("replay answered %s, the recording %s", got.Output, want.Output)
	}
	if n := len(srv.Requests()); n != asked {
		t.Fatalf("the replay asked the model %d times", n-asked)
	}
	f, err := agentkit.DecodeOutput[findings](got)
	if err != nil || f.Competitors != 3 {
		t.Fatalf("findings %+v, %v", f, err)
	}
}

// replayModel answers from the fixture read after the agents are defined.
type replayModel struct{ f **agentkit.Fixture }

func (m replayModel) Generate(ctx context.Context, req *agentkit.Request) (*agentkit.Response, error) {
	return (*m.f).Model().Generate(ctx, req)
}
