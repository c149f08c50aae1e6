package hooks

import "sync"

// AgentKnobs are the test knobs of one agentkit agent, kept out of the
// public agentkit.AgentConfig the same way: a test attaches them to the
// engine and agent name before agentkit.Define, which takes them.
//
//	hooks.SetAgent(eng, "support", hooks.AgentKnobs{AfterModel: f})
//	a := agentkit.Define(eng, "support", cfg)
type AgentKnobs struct {
	// AfterModel is called in workflow code after each turn's model step;
	// live tells whether the call was made now (false: replayed). Defaults
	// to nil: nothing is called.
	AfterModel func(runID string, turn int, live bool)
	// InReserve is called inside the transaction of each reservation of
	// a run with Limits.Reserve, once its budget rows are locked and read
	// and before it decides. Defaults to nil: nothing is called.
	InReserve func(runID string)
}

// agentKey names one agent: its engine (a *durable.Engine) and its name.
type agentKey struct {
	engine any
	name   string
}

var agentsAttached sync.Map // agentKey -> AgentKnobs

// SetAgent attaches k to the agent name of engine e, a *durable.Engine,
// for the agentkit.Define of that agent.
func SetAgent(e any, name string, k AgentKnobs) { agentsAttached.Store(agentKey{e, name}, k) }

// TakeAgent returns the knobs attached to the agent name of engine e and
// detaches them; the zero AgentKnobs when there are none.
func TakeAgent(e any, name string) AgentKnobs {
	k, _ := agentsAttached.LoadAndDelete(agentKey{e, name})
	out, _ := k.(AgentKnobs)
	return out
}
