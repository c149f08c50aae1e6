package dispatch

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/sysdb"
)

// A keyed pass serves a queue whose partition keys matter: one with fair
// sharing, a concurrency or rate limit per key, or limits set for single
// keys. It reads the keys with queued runs (a skip scan: one index probe
// per key, however long each key's backlog), their load and limits, and
// takes each key's first runs, so no key waits behind another's backlog.
//
// With fair sharing the pass gives its slots one at a time to the key
// with the fewest runs holding a slot per unit of weight (a water fill):
// a key with nothing running gets the next free slot, however many runs
// other keys have queued, and a key with weight 3 holds three slots for
// each one of a key with weight 1 when both have work. Without it the
// slots go in priority order (priority, then enqueue time) across the
// keys, each within its limits.
//
// A pass reads at most keysMax keys; when more have work, the queue's
// row keeps where the pass stopped (fair_cursor) and the next pass goes
// on from there, round the key space.

const (
	keysMin = 32   // keys read by a pass, at least
	keysMax = 1024 // and at most
	// keyedRounds bounds the claims of a pass: a round gives the slots
	// left by keys that had fewer ready runs than their share to the
	// others.
	keyedRounds = 4
)

// keyLoad is a partition key during a keyed pass.
type keyLoad struct {
	key     string
	index   int // position in the pass's key order: ties go to the first
	running int // runs holding a slot when the pass began
	weight  int
	room    int // slots the key may still take in this pass (its limits)
	taken   int // claimed in this pass
	quota   int // asked for in this round
	dry     bool
}

// load is the key's share of slots held, per unit of weight, as a
// fraction: the fair pass serves the lowest first.
func (k *keyLoad) less(o *keyLoad) bool {
	a, b := (k.running+k.taken+k.quota)*o.weight, (o.running+o.taken+o.quota)*k.weight
	if a != b {
		return a < b
	}
	return k.index < o.index
}

type keyHeap []*keyLoad

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return h[i].less(h[j]) }
func (h keyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *keyHeap) Push(x any)        { *h = append(*h, x.(*keyLoad)) }
func (h *keyHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	*h = old[:len(old)-1]
	return k
}

// fairQuotas shares slots among the keys that may take more: one at a
// time to the least loaded (keyLoad.less).
func fairQuotas(keys []*keyLoad, slots int) {
	h := keyHeap{}
	for _, k := range keys {
		k.quota = 0
		if !k.dry && k.room > k.taken {
			heap.Push(&h, k)
		}
	}
	for ; slots > 0 && h.Len() > 0; slots-- {
		k := h[0]
		k.quota++
		if k.taken+k.quota >= k.room {
			heap.Pop(&h)
		} else {
			heap.Fix(&h, 0)
		}
	}
}

// priorityQuotas asks each key that may take more for its first runs, up
// to what the pass has left: the choice among them goes by priority.
// A key asks for at most twice its even share, so a pass over many keys
// locks a bounded number of runs; a key that fills its quota may have
// more, for the next round or pass.
func priorityQuotas(keys []*keyLoad, slots int) {
	open := 0
	for _, k := range keys {
		if !k.dry && k.room > k.taken {
			open++
		}
	}
	per := slots
	if open > 0 {
		per = min(slots, max(1, 2*slots/open+1))
	}
	for _, k := range keys {
		k.quota = 0
		if !k.dry && k.room > k.taken {
			k.quota = min(per, k.room-k.taken)
		}
	}
}

// keyedResult is what a keyed pass did.
type keyedResult struct {
	got []sysdb.ClaimedRow
	// more: a key may have more ready runs within its limits, or keys
	// past the ones read have work (the next pass goes on from there).
	more bool
	// rateFree: with a key at its rate limit, when its oldest start
	// leaves the period; 0: none.
	rateFree time.Duration
}

// claimKeyed claims up to n runs of queue q (its row row, locked) by
// partition key.
func (d *Dispatcher) claimKeyed(ctx context.Context, tx pgx.Tx, q string, row sysdb.DispatchRow, n int, rated bool) (keyedResult, error) {
	var res keyedResult
	s := row.Settings
	pq := d.cfg.Partitions
	want := min(max(2*n, keysMin), keysMax)
	keys, err := pq.Keys(ctx, tx, sysdb.PartitionKeysParams{Queue: q, After: row.FairCursor, Limit: want, WithKeyless: true})
	if err != nil {
		return res, err
	}
	named := len(keys)
	if named > 0 && keys[0] == "" {
		named--
	}
	if named < want && row.FairCursor != "" { // round the key space
		upTo := row.FairCursor
		rest, err := pq.Keys(ctx, tx, sysdb.PartitionKeysParams{Queue: q, UpTo: &upTo, Limit: want - named})
		if err != nil {
			return res, err
		}
		keys = append(keys, rest...)
		named += len(rest)
	}
	cursor := ""
	if named == want {
		cursor = keys[len(keys)-1]
	}
	if cursor != row.FairCursor {
		if err := pq.SetCursor(ctx, tx, q, cursor); err != nil {
			return res, err
		}
	}
	if len(keys) == 0 {
		return res, nil
	}
	var period time.Duration
	if s.PartitionRateLimit > 0 {
		period = s.PartitionRatePeriod
	}
	states, err := pq.State(ctx, tx, sysdb.PartitionStateParams{Queue: q, Keys: keys, RatePeriod: period})
	if err != nil {
		return res, err
	}
	loads := make([]*keyLoad, 0, len(states))
	for i, st := range states {
		room := n
		if limit := cmp.Or(st.Concurrency, s.PartitionConcurrency); limit > 0 {
			room = min(room, limit-st.Running)
		}
		if s.PartitionRateLimit > 0 {
			left := s.PartitionRateLimit - st.Recent
			if left <= 0 && st.RateFree != nil {
				free := max(*st.RateFree, time.Millisecond)
				if res.rateFree == 0 || free < res.rateFree {
					res.rateFree = free
				}
			}
			room = min(room, left)
		}
		if room > 0 {
			loads = append(loads, &keyLoad{key: st.Key, index: i, running: st.Running, weight: max(st.Weight, 1), room: room})
		}
	}
	byKey := make(map[string]*keyLoad, len(loads))
	for _, k := range loads {
		byKey[k.key] = k
	}
	left := n
	for round := 0; round < keyedRounds && left > 0; round++ {
		if s.FairShare {
			fairQuotas(loads, left)
		} else {
			priorityQuotas(loads, left)
		}
		p := sysdb.PartitionCandidatesParams{Queue: q, AppVersion: d.cfg.AppVersion, Workflows: d.cfg.Workflows}
		for _, k := range loads {
			if k.quota > 0 {
				p.Keys, p.Quotas = append(p.Keys, k.key), append(p.Quotas, k.quota)
			}
		}
		if len(p.Keys) == 0 {
			break
		}
		cands, err := pq.Candidates(ctx, tx, p)
		if err != nil {
			return res, err
		}
		per := map[string]int{}
		for _, c := range cands {
			per[c.Key]++
		}
		for _, k := range loads {
			if k.quota > 0 && per[k.key] < k.quota {
				k.dry = true // no more ready runs of the key for this executor
			}
		}
		if !s.FairShare { // the first runs by priority, across the keys
			slices.SortFunc(cands, func(a, b sysdb.PartitionCandidateRow) int {
				return cmp.Or(cmp.Compare(a.Priority, b.Priority), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
			})
			cands = cands[:min(len(cands), left)]
		}
		if len(cands) == 0 {
			break
		}
		ids := make([]string, len(cands))
		for i, c := range cands {
			ids[i] = c.ID
		}
		got, err := d.cfg.Queries.ClaimIDs(ctx, tx, sysdb.ClaimIDsParams{IDs: ids, ExecutorID: d.cfg.ExecutorID,
			AppVersion: d.cfg.AppVersion, Rated: rated})
		if err != nil {
			return res, err
		}
		res.got = append(res.got, got...)
		left -= len(got)
		for _, c := range cands {
			byKey[c.Key].taken++
		}
	}
	if len(res.got) > 0 && left > 0 {
		for _, k := range loads {
			if !k.dry && k.taken < k.room {
				res.more = true // a key filled its quota: it may have more
			}
		}
		res.more = res.more || cursor != ""
	}
	return res, nil
}
