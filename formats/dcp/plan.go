package dcp

import (
	"fmt"
	"slices"

	"github.com/ckpt-dev/ckpt/statedict"
)

// savePlan is what torch.distributed.checkpoint's DefaultSavePlanner decides for a state
// dict saved by every rank of a job: each rank's local plan lists, in the flattened state
// dict's order, its own piece of every tensor (a DTensor's local shard; a plain tensor
// whole) and every non-tensor value as a bytes item; dedup_save_plans then keeps each
// piece held by several ranks (replicated tensors, bytes items) on one of them, and the
// writer of rank R stores what its plan kept in __R_0.distcp.
type savePlan struct {
	leaves []leaf
	ranks  int
	// items are the deduplicated items in the order torch first meets them (rank 0's plan,
	// then what rank 1 adds, …); byRank[r] are the indices of the items rank r writes, in
	// its plan's order.
	items  []*planItem
	byRank [][]int
}

// planItem is one write item: a bytes item, or a piece of a tensor.
type planItem struct {
	leaf   int // index into savePlan.leaves
	tensor *statedict.Tensor
	piece  statedict.Piece // for tensors
	writer int             // the rank that writes it
}

func (it *planItem) key(fqn string) storageKey {
	if it.tensor == nil {
		return keyOf(fqn, nil)
	}
	return keyOf(fqn, it.piece.Offsets)
}

// newSavePlan plans the save of leaves by the ranks of sh (nil: one rank holding
// everything whole).
func newSavePlan(leaves []leaf, sh *statedict.Sharding) (*savePlan, error) {
	if sh == nil {
		sh = &statedict.Sharding{Ranks: 1}
	}
	if sh.Ranks < 1 {
		return nil, fmt.Errorf("a sharding over %d ranks", sh.Ranks)
	}
	p := &savePlan{leaves: leaves, ranks: sh.Ranks, byRank: make([][]int, sh.Ranks)}
	all := make([]int, sh.Ranks)
	for r := range all {
		all[r] = r
	}
	// Every rank's plan, as indices into cands, and each candidate's holders and size.
	type cand struct {
		item    planItem
		holders []int
		size    int64
	}
	var cands []cand
	local := make([][]int, sh.Ranks)
	for i, l := range leaves {
		t, ok := l.val.(*statedict.Tensor)
		if !ok {
			// A bytes item: tensor_storage_size() is None, counted as 1.
			for r := range local {
				local[r] = append(local[r], len(cands))
			}
			cands = append(cands, cand{planItem{leaf: i}, all, 1})
			continue
		}
		if t.DType.Kind() == statedict.KindQuantized {
			return nil, fmt.Errorf("%s: %w: torch.distributed.checkpoint cannot load quantized %s tensors (its loader copies into torch.empty)", l.fqn, statedict.ErrUnsupported, t.DType)
		}
		ts := sh.Of(t)
		if err := ts.Check(t, sh.Ranks); err != nil {
			return nil, fmt.Errorf("%s: sharding: %w", l.fqn, err)
		}
		// tensor_storage_size() counts the whole tensor's bytes for every piece of it (its
		// TensorWriteData.size is the global size); 0 counts as 1.
		size := max(t.NumEl()*int64(t.DType.Size()), 1)
		at := map[string]int{}
		for _, pc := range ts.Pieces {
			k := fmt.Sprint(pc.Offsets)
			if j, dup := at[k]; dup {
				// DCP identifies a piece by its offsets: two pieces there can only be empty.
				if !slices.Equal(cands[j].item.piece.Sizes, pc.Sizes) {
					return nil, fmt.Errorf("%s: pieces %v and %v start at the same offsets %v, which DCP cannot tell apart", l.fqn, cands[j].item.piece.Sizes, pc.Sizes, pc.Offsets)
				}
				cands[j].holders = append(cands[j].holders, pc.Ranks...)
				slices.Sort(cands[j].holders)
				for _, r := range pc.Ranks {
					local[r] = append(local[r], j)
				}
				continue
			}
			at[k] = len(cands)
			for _, r := range pc.Ranks {
				local[r] = append(local[r], len(cands))
			}
			cands = append(cands, cand{planItem{leaf: i, tensor: t, piece: pc}, slices.Clone(pc.Ranks), size})
		}
	}
	// dedup_save_plans: items in order of first appearance over the ranks' plans; each goes
	// to the holder whose plan is smallest so far, ties to the first in Python's iteration
	// order of the set of holders.
	planned := make([]int64, sh.Ranks)
	idx := make([]int, len(cands)) // candidate → item index
	for i := range idx {
		idx[i] = -1
	}
	for r := range local {
		for _, c := range local[r] {
			if idx[c] >= 0 {
				continue
			}
			w := -1
			for _, h := range pySetOrder(cands[c].holders) {
				if w < 0 || planned[h] < planned[w] {
					w = h
				}
			}
			planned[w] += cands[c].size
			it := cands[c].item
			it.writer = w
			idx[c] = len(p.items)
			p.items = append(p.items, &it)
		}
	}
	for r := range local {
		for _, c := range local[r] {
			if p.items[idx[c]].writer == r {
				p.byRank[r] = append(p.byRank[r], idx[c])
			}
		}
	}
	return p, nil
}

// pySetOrder is the order in which CPython 3 iterates a set of the non-negative ints vals,
// added in increasing order (as dedup_save_plans builds its sets of plan indices): an int
// hashes to itself, and the set's open-addressing table (8 slots at first, linear probes
// of 9 then perturbed jumps, resized past 4× the entries when 3/5 full) is walked slot by
// slot. Small sets of small ints come out sorted; others need not.
func pySetOrder(vals []int) []int {
	const linearProbes, perturbShift = 9, 5
	table := make([]int, 8)
	for i := range table {
		table[i] = -1
	}
	insert := func(table []int, v int) {
		mask := len(table) - 1
		perturb := uint64(v)
		i := v & mask
		for {
			probes := 0
			if i+linearProbes <= mask {
				probes = linearProbes
			}
			for j := i; j <= i+probes; j++ {
				if table[j] < 0 {
					table[j] = v
					return
				}
			}
			perturb >>= perturbShift
			i = int((uint64(i)*5 + 1 + perturb) & uint64(mask))
		}
	}
	used := 0
	for _, v := range vals {
		insert(table, v)
		used++
		if mask := len(table) - 1; used*5 >= mask*3 {
			size, minUsed := 8, used*4
			if used > 50000 {
				minUsed = used * 2
			}
			for size <= minUsed {
				size <<= 1
			}
			bigger := make([]int, size)
			for i := range bigger {
				bigger[i] = -1
			}
			for _, x := range table {
				if x >= 0 {
					insert(bigger, x)
				}
			}
			table = bigger
		}
	}
	out := make([]int, 0, len(vals))
	for _, x := range table {
		if x >= 0 {
			out = append(out, x)
		}
	}
	return out
}
