package dcp

import (
	"fmt"
	"math"
	"slices"

	"github.com/ckpt-dev/ckpt/ckpterr"
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

// planItem is one write item: a bytes item, or a piece of a tensor. A checkpoint may hold
// hundreds of thousands of them, so an item is small and a tensor saved whole (every
// tensor of an unsharded save) costs no piece of its own.
type planItem struct {
	leaf   int32 // index into savePlan.leaves
	tensor *statedict.Tensor
	// piece is the tensor's piece in its layout (statedict.Sharding); nil for the tensor
	// whole.
	piece  *statedict.Piece
	writer int32 // the rank that writes it
}

// box is the item's piece of its tensor: the piece of its layout, or the tensor whole (its
// offsets zeros shared by every item: not to be modified).
func (it *planItem) box() statedict.Piece {
	if it.piece != nil {
		return *it.piece
	}
	return statedict.Piece{Offsets: zeros(len(it.tensor.Shape)), Sizes: it.tensor.Shape}
}

// zeroOffsets backs the offsets of whole tensors of up to its length of dimensions.
var zeroOffsets [64]int64

// zeros is n zero offsets, shared when n is small enough.
func zeros(n int) []int64 {
	if n <= len(zeroOffsets) {
		return zeroOffsets[:n:n]
	}
	return make([]int64, n)
}

func (it *planItem) key(fqn string) storageKey {
	if it.tensor == nil {
		return keyOf(fqn, nil)
	}
	return keyOf(fqn, it.box().Offsets)
}

// newSavePlan plans the save of leaves by the ranks of sh (nil: one rank holding
// everything whole).
func newSavePlan(leaves []leaf, sh *statedict.Sharding) (*savePlan, error) {
	if sh == nil {
		sh = &statedict.Sharding{Ranks: 1}
	}
	if sh.Ranks < 1 || sh.Ranks > math.MaxInt32 {
		return nil, fmt.Errorf("a sharding over %d ranks", sh.Ranks)
	}
	if len(leaves) > math.MaxInt32 {
		return nil, fmt.Errorf("%d entries: more than a save plan indexes", len(leaves))
	}
	p := &savePlan{leaves: leaves, ranks: sh.Ranks, byRank: make([][]int, sh.Ranks)}
	if sh.Ranks == 1 && len(sh.Tensors) == 0 {
		return p, p.whole()
	}
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
	cands := make([]cand, 0, len(leaves))
	local := make([][]int, sh.Ranks)
	if sh.Ranks == 1 {
		local[0] = make([]int, 0, len(leaves))
	}
	for i, l := range leaves {
		t, ok := l.val.(*statedict.Tensor)
		if !ok {
			// A bytes item: tensor_storage_size() is None, counted as 1.
			for r := range local {
				local[r] = append(local[r], len(cands))
			}
			cands = append(cands, cand{planItem{leaf: int32(i)}, all, 1})
			continue
		}
		if err := saveable(l.fqn, t); err != nil {
			return nil, err
		}
		// tensor_storage_size() counts the whole tensor's bytes for every piece of it (its
		// TensorWriteData.size is the global size); 0 counts as 1.
		size := max(t.NumEl()*int64(t.DType.Size()), 1)
		ts, sharded := sh.Tensors[t]
		if !sharded {
			// Whole on every rank (statedict.Sharding.Of), as one item.
			for r := range local {
				local[r] = append(local[r], len(cands))
			}
			cands = append(cands, cand{planItem{leaf: int32(i), tensor: t}, all, size})
			continue
		}
		if err := ts.Check(t, sh.Ranks); err != nil {
			return nil, fmt.Errorf("%s: sharding: %w", l.fqn, err)
		}
		at := map[string]int{}
		for pi := range ts.Pieces {
			pc := &ts.Pieces[pi]
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
			cands = append(cands, cand{planItem{leaf: int32(i), tensor: t, piece: pc}, slices.Clone(pc.Ranks), size})
		}
	}
	// dedup_save_plans: items in order of first appearance over the ranks' plans; each goes
	// to the holder whose plan is smallest so far, ties to the first in Python's iteration
	// order of the set of holders.
	planned := make([]int64, sh.Ranks)
	slab := make([]planItem, 0, len(cands)) // the items, one allocation
	p.items = make([]*planItem, 0, len(cands))
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
			slab = append(slab, cands[c].item)
			it := &slab[len(slab)-1]
			it.writer = int32(w)
			idx[c] = len(p.items)
			p.items = append(p.items, it)
		}
	}
	for r := range local {
		for _, c := range local[r] {
			if int(p.items[idx[c]].writer) == r {
				p.byRank[r] = append(p.byRank[r], idx[c])
			}
		}
	}
	return p, nil
}

// whole plans what one process saves, every tensor whole: an item per leaf, in order, all
// written by rank 0 — what the general plan comes to, without its per-item bookkeeping.
func (p *savePlan) whole() error {
	slab := make([]planItem, len(p.leaves))
	p.items = make([]*planItem, len(p.leaves))
	p.byRank[0] = make([]int, len(p.leaves))
	for i, l := range p.leaves {
		slab[i].leaf = int32(i)
		if t, ok := l.val.(*statedict.Tensor); ok {
			if err := saveable(l.fqn, t); err != nil {
				return err
			}
			slab[i].tensor = t
		}
		p.items[i], p.byRank[0][i] = &slab[i], i
	}
	return nil
}

// saveable refuses a tensor DCP cannot load.
func saveable(fqn string, t *statedict.Tensor) error {
	if t.DType.Kind() == statedict.KindQuantized {
		return fmt.Errorf("%s: %w: torch.distributed.checkpoint cannot load quantized %s tensors (its loader copies into torch.empty)", fqn, ckpterr.ErrUnsupported, t.DType)
	}
	return nil
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
