package hooks

import "testing"

// TestAgentKnobs: knobs attached to one agent of one engine reach only
// that agent's Define, once.
func TestAgentKnobs(t *testing.T) {
	e1, e2 := new(int), new(int) // stand-ins for two *durable.Engine
	called := 0
	SetAgent(e1, "a", AgentKnobs{AfterModel: func(string, int, bool) { called++ }})
	if k := TakeAgent(e2, "a"); k.AfterModel != nil {
		t.Fatal("another engine's agent got the knobs")
	}
	if k := TakeAgent(e1, "b"); k.AfterModel != nil {
		t.Fatal("another agent of the engine got the knobs")
	}
	k := TakeAgent(e1, "a")
	if k.AfterModel == nil {
		t.Fatal("the agent did not get its knobs")
	}
	k.AfterModel("r", 1, true)
	if called != 1 {
		t.Fatalf("AfterModel called %d times", called)
	}
	if k := TakeAgent(e1, "a"); k.AfterModel != nil {
		t.Fatal("the knobs were not detached")
	}
}
