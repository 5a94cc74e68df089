package dcp

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/ckpt-dev/ckpt/statedict"
)

// maxBytes bounds a tensor's size so that byte offsets never overflow int64.
const maxBytes = math.MaxInt64 / 16

// numel returns the element count of shape, or false if a dimension is negative or the
// count (times elemSize bytes) would exceed maxBytes.
func numel(shape []int64, elemSize int) (int64, bool) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > maxBytes {
			return 0, false
		}
		n = lo
	}
	if hi, lo := bits.Mul64(n, uint64(elemSize)); hi != 0 || lo > maxBytes {
		return 0, false
	}
	return int64(n), true
}

// maxGapSearch bounds the candidate points tried when naming an element no chunk covers.
const maxGapSearch = 1 << 12

// checkTiling checks that chunks tile a tensor of the given shape exactly, as torch's
// save planner validates them: every chunk lies inside the tensor, no two chunks share an
// element, and together they cover every element (total volume equals the element count).
// On failure it returns the index of the offending chunk (-1 when the problem is a gap or
// the tensor itself) and the reason.
func checkTiling(dtype statedict.DType, shape []int64, chunks []ChunkMeta) (int, error) {
	if dtype.Size() == 0 {
		return -1, fmt.Errorf("tensor has no valid dtype")
	}
	total, ok := numel(shape, dtype.Size())
	if !ok {
		return -1, fmt.Errorf("tensor shape %v is invalid or too large", shape)
	}
	seen := make(map[storageKey]int, len(chunks))
	var volume uint64
	for i, c := range chunks {
		if len(c.Offsets) != len(shape) || len(c.Sizes) != len(shape) {
			return i, fmt.Errorf("chunk offsets %v and sizes %v do not match the %d dims of the tensor", c.Offsets, c.Sizes, len(shape))
		}
		for d, o := range c.Offsets {
			s := c.Sizes[d]
			if o < 0 || s < 0 || o > shape[d] || s > shape[d]-o {
				return i, fmt.Errorf("chunk (sizes %v) reaches outside the tensor of shape %v in dim %d", c.Sizes, shape, d)
			}
		}
		k := keyOf("", c.Offsets)
		if j, dup := seen[k]; dup {
			return i, fmt.Errorf("two chunks at the same offsets (chunks %d and %d)", j, i)
		}
		seen[k] = i
		v, _ := numel(c.Sizes, 1) // inside the tensor, so no overflow
		volume += uint64(v)
	}
	if i, j, ok := overlap(shape, chunks); ok {
		return j, fmt.Errorf("chunk (sizes %v) overlaps the chunk at offsets %v (sizes %v)", chunks[j].Sizes, chunks[i].Offsets, chunks[i].Sizes)
	}
	if volume != uint64(total) {
		msg := fmt.Sprintf("chunks cover %d of the %d elements", volume, total)
		if at, ok := gap(shape, chunks); ok {
			msg += fmt.Sprintf("; no chunk holds the element at %v", at)
		}
		return -1, fmt.Errorf("%s", msg)
	}
	return -1, nil
}

// boxesOverlap reports whether two chunks share an element.
func boxesOverlap(a, b ChunkMeta) bool {
	for d := range a.Offsets {
		if a.Offsets[d] >= b.Offsets[d]+b.Sizes[d] || b.Offsets[d] >= a.Offsets[d]+a.Sizes[d] {
			return false
		}
	}
	return true
}

func empty(c ChunkMeta) bool { return slices.Contains(c.Sizes, 0) }

// overlap finds two non-empty chunks sharing an element, sweeping along the dimension with
// the most distinct chunk offsets so that grid shardings compare each chunk with only its
// neighbours. It returns the earlier chunk first.
func overlap(shape []int64, chunks []ChunkMeta) (int, int, bool) {
	if len(shape) == 0 {
		return 0, 0, false // one 0-dim chunk at most: duplicates are rejected before
	}
	sweep, most := 0, 0
	for d := range shape {
		distinct := map[int64]bool{}
		for _, c := range chunks {
			distinct[c.Offsets[d]] = true
		}
		if len(distinct) > most {
			sweep, most = d, len(distinct)
		}
	}
	order := make([]int, 0, len(chunks))
	for i, c := range chunks {
		if !empty(c) {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(chunks[a].Offsets[sweep], chunks[b].Offsets[sweep])
	})
	for x, i := range order {
		end := chunks[i].Offsets[sweep] + chunks[i].Sizes[sweep]
		for _, j := range order[x+1:] {
			if chunks[j].Offsets[sweep] >= end {
				break
			}
			if boxesOverlap(chunks[i], chunks[j]) {
				return min(i, j), max(i, j), true
			}
		}
	}
	return 0, 0, false
}

// gap names an element that no chunk covers, trying the corners of the grid the chunk
// boundaries draw (an uncovered region always has a corner there) up to maxGapSearch points.
func gap(shape []int64, chunks []ChunkMeta) ([]int64, bool) {
	cands := make([][]int64, len(shape))
	points := 1
	for d := range shape {
		set := map[int64]bool{0: true}
		for _, c := range chunks {
			if e := c.Offsets[d] + c.Sizes[d]; e < shape[d] {
				set[e] = true
			}
		}
		for v := range set {
			cands[d] = append(cands[d], v)
		}
		slices.Sort(cands[d])
		points *= len(cands[d])
		if points > maxGapSearch {
			return nil, false
		}
	}
	at := make([]int64, len(shape))
	idx := make([]int, len(shape))
	for range points {
		for d := range at {
			at[d] = cands[d][idx[d]]
		}
		covered := false
		for _, c := range chunks {
			if contains(c, at) {
				covered = true
				break
			}
		}
		if !covered {
			return at, true
		}
		for d := len(idx) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < len(cands[d]) {
				break
			}
			idx[d] = 0
		}
	}
	return nil, false
}

// contains reports whether the chunk holds the element at the given index.
func contains(c ChunkMeta, at []int64) bool {
	for d, x := range at {
		if x < c.Offsets[d] || x >= c.Offsets[d]+c.Sizes[d] {
			return false
		}
	}
	return true
}
