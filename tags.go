package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/durable-go/durable/internal/sysdb"
)

// MaxTags bounds the tags of one run: those it is started with
// (StartOpts.Tags and the other options' Tags) and those its code sets
// ([SetTag]). A key and a value are at most 255 bytes each.
const MaxTags = 32

// encodeTags checks tags, the field what of a start's options, and
// encodes them as the JSON object the run stores; nil when there are
// none.
func encodeTags(what string, tags map[string]string) (json.RawMessage, error) {
	if err := checkTags(what, tags); err != nil || len(tags) == 0 {
		return nil, err
	}
	return json.Marshal(tags)
}

// checkTags checks tags, the field what: at most MaxTags, keys and values
// non-empty, at most 255 bytes of valid UTF-8 without NUL. A bad one is an
// [ErrInvalidArgument] naming it.
func checkTags(what string, tags map[string]string) error {
	if len(tags) > MaxTags {
		return fmt.Errorf("%w: %s has %d tags, over the limit of %d (MaxTags)", ErrInvalidArgument, what, len(tags), MaxTags)
	}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same error for the same tags
	for _, k := range keys {
		if err := checkTag(what, k, tags[k]); err != nil {
			return err
		}
	}
	return nil
}

// checkTag checks one tag of what ("StartOpts.Tags", "SetTag").
func checkTag(what, key, value string) error {
	if err := checkName(what+" key", key); err != nil {
		return err
	}
	return checkName(fmt.Sprintf("%s value of key %q", what, key), value)
}

// SetTag sets the calling run's tag key to value, replacing the value it
// had; an empty value removes the tag. Tags are what [Engine.ListWorkflows]
// finds runs by (ListParams.Tags), and what listings show: a customer, a
// stage the run reached, an outcome worth searching for. The change is a
// recorded step: it is written once, together with its record and fenced
// like a checkpoint (a run that lost its owner writes nothing), and a
// replay passes it without writing. The run keeps its tags when it
// finishes. A tag that would take the run over [MaxTags] tags is not set:
// SetTag returns an [ErrInvalidArgument], and replays return it again.
func SetTag(wctx Context, key, value string) error {
	if err := checkName("SetTag key", key); err != nil {
		return err
	}
	if value != "" {
		if err := checkTag("SetTag", key, value); err != nil {
			return err
		}
	}
	r := wctx.workflowRun()
	name := "durable.tag:" + key
	pos, rec, err := r.begin(name)
	if err != nil {
		return err
	}
	if rec != nil {
		return recordedTag(r, key, rec.output)
	}
	started := r.e.clock.now()
	var res sysdb.SetTagRow
	err = r.retryDB("set tag", func(ctx context.Context) error {
		var err error
		res, err = r.e.tgq.SetTag(ctx, r.e.pool, sysdb.SetTagParams{WorkflowID: r.id, Epoch: r.epoch, Pos: pos, Name: name,
			Key: key, Value: value, StartedAt: started, MaxTags: MaxTags})
		return err
	})
	switch {
	case err != nil:
		if h := r.halted(); h != nil {
			return h
		}
		return r.halt(err)
	case res.Written:
		return tagRefused(key, res.Fits)
	}
	// Fenced, or recorded by an earlier try whose answer was lost.
	if err := r.diagnose(pos, name, false); err != nil {
		return err
	}
	out, err := recordedOutput(r, pos)
	if err != nil {
		return err
	}
	return recordedTag(r, key, out)
}

// recordedTag is what SetTag of key returns for the output its step
// recorded: whether the tag fit in the run's MaxTags.
func recordedTag(r *run, key string, output []byte) error {
	var fits bool
	if err := json.Unmarshal(output, &fits); err != nil {
		return r.halt(&DecodeError{WorkflowID: r.id, What: fmt.Sprintf("SetTag %q", key), Err: err})
	}
	return tagRefused(key, fits)
}

// tagRefused is the error of a SetTag of key that did not fit, else nil.
func tagRefused(key string, fits bool) error {
	if fits {
		return nil
	}
	return fmt.Errorf("%w: SetTag %q: the run has %d tags already (MaxTags)", ErrInvalidArgument, key, MaxTags)
}
