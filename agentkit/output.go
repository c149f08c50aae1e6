package agentkit

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/durable-go/durable"
)

// Output is the shape of an agent's final answer: a JSON schema, sent to
// the model as the response format of every call, and checked on each
// final answer. Make one with [OutputOf].
type Output struct {
	name     string
	schema   json.RawMessage
	resolved *jsonschema.Resolved
}

// OutputOf is the Output of Go type T: its JSON schema is inferred from T
// (exported fields by their JSON names; a field is required unless it is
// omitempty or omitzero; no other properties; a jsonschema tag is the
// field's description). A type the schema cannot describe (a channel, a
// map with non-string keys) is an error wrapping durable.ErrInvalidArgument.
func OutputOf[T any]() (*Output, error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, fmt.Errorf("%w: the answer type %s: %w", durable.ErrInvalidArgument, reflect.TypeFor[T](), err)
	}
	return newOutput(reflect.TypeFor[T]().Name(), s)
}

func newOutput(name string, s *jsonschema.Schema) (*Output, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("%w: the answer schema: %w", durable.ErrInvalidArgument, err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: the answer schema: %w", durable.ErrInvalidArgument, err)
	}
	name = strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, name)
	if name == "" {
		name = "answer"
	}
	return &Output{name: name, schema: b, resolved: rs}, nil
}

// Schema returns the output's JSON schema.
func (o *Output) Schema() json.RawMessage { return o.schema }

// check returns why text is not an answer of o's shape ("" when it is).
func (o *Output) check(text string) string {
	var v any
	if err := json.Unmarshal([]byte(answerJSON(text)), &v); err != nil {
		return "the answer is not JSON: " + strings.TrimPrefix(err.Error(), "json: ")
	}
	if err := o.resolved.Validate(v); err != nil {
		return strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return ""
}

// answerJSON is the JSON of a final answer: its text without surrounding
// space or a Markdown code fence a model may wrap it in.
func answerJSON(text string) string {
	s := strings.TrimSpace(text)
	if rest, ok := strings.CutPrefix(s, "```"); ok {
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[nl+1:]
		}
		s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "```"))
	}
	return s
}

// OutputRepairsDefault is how many times an answer that does not match
// AgentConfig.Output is sent back to the model, when
// AgentConfig.OutputRepairs is 0.
const OutputRepairsDefault = 2

// DecodeOutput decodes res.Output, the answer of an agent with
// AgentConfig.Output, into T. A run that ended without a valid answer
// (res.Outcome other than OutcomeCompleted) has none: an error.
func DecodeOutput[T any](res Result) (T, error) {
	var v T
	if len(res.Output) == 0 {
		return v, fmt.Errorf("agentkit: run %q has no answer of the output type (outcome %s)", res.RunID, res.Outcome)
	}
	if err := json.Unmarshal(res.Output, &v); err != nil {
		return v, fmt.Errorf("agentkit: decode the answer of run %q: %w", res.RunID, err)
	}
	return v, nil
}

// repairMessage asks the model for another answer after problem.
func repairMessage(problem string) Message {
	return UserMessage("Your answer does not match the required JSON schema: " + problem +
		". Answer again with only a JSON value that matches the schema.")
}

// checkOutput checks the run's final answer text of turn against the
// agent's Output, as a recorded step (agentkit.output:<turn>), so a
// replay takes the same path whatever the schema is by then. done: the
// run ends with res (valid, or out of repairs); else the model is asked
// again, told what was wrong.
func (rs *runState) checkOutput(turn int, text string) (done bool, res Result, err error) {
	out := rs.a.cfg.Output
	problem, err := durable.Step(rs.wctx, fmt.Sprintf("agentkit.output:%d", turn), func(context.Context) (string, error) {
		return out.check(text), nil
	}, noRetry)
	if err != nil {
		return true, Result{}, err
	}
	if problem == "" {
		rs.output = json.RawMessage(answerJSON(text))
		return true, rs.finish(OutcomeCompleted, text, nil), nil
	}
	if rs.repairs >= max(rs.a.cfg.OutputRepairs, 0) {
		return true, rs.finish(OutcomeOutputInvalid, text, nil), nil
	}
	rs.repairs++
	rs.add(repairMessage(problem))
	return false, Result{}, nil
}
