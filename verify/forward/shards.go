package forward

import (
	"fmt"
	"slices"

	"github.com/ckpt-dev/ckpt/statedict"
)

// part is one device's piece of a weight W [rows, cols] of a per-device checkpoint
// (Options.Shards): rows [r0, r0+m.rows) and columns [c0, c0+m.cols) of W, as the file of
// rank ranks[0] stores them, also held by the other ranks listed (replicas).
type part struct {
	r0, c0 int
	ranks  []int
	m      *matrix
}

// Sharded tells which pieces of a per-device checkpoint a model computes from
// (Options.Shards): the ranks holding them and how many distinct pieces there are. Zero
// when the model runs from whole tensors.
type Sharded struct {
	// Ranks are the ranks holding the pieces used, every holder of a replicated piece
	// counted (a replicated piece is computed once, from its first holder's copy).
	Ranks int `json:"ranks"`
	// Pieces counts the distinct non-empty pieces the products were computed from.
	Pieces int `json:"pieces"`
	// Tensors counts the weights used piece by piece.
	Tensors int `json:"tensors"`
}

// Sharded reports which pieces the model computes from.
func (m *Model) Sharded() Sharded { return m.sharded }

// shardUse collects what Sharded reports while the weights are found.
type shardUse struct {
	ranks   map[int]bool
	tensors map[*statedict.Tensor]bool
	pieces  int
}

func (u *shardUse) add(t *statedict.Tensor, shards []statedict.Shard) {
	if u.tensors[t] {
		return
	}
	u.tensors[t] = true
	for _, s := range shards {
		if s.Empty() {
			continue
		}
		u.pieces++
		for _, r := range s.Ranks {
			u.ranks[r] = true
		}
	}
}

// partsOf builds the parts of the matrix whose whole tensor t is stored as shards: each
// non-empty shard whose box meets the matrix (for a stacked expert weight, the shards
// holding expert e) becomes a part whose matrix reads the shard's local tensor in place.
// at maps a shard to the view of the matrix's part inside its local tensor and the part's
// first row and column in the matrix; ok false when the shard holds none of it.
func (ws *weights) partsOf(name string, t *statedict.Tensor, round bool, at func(s statedict.Shard) (v view, r0, c0 int, ok bool)) ([]part, error) {
	shards := ws.shards[t]
	ws.use.add(t, shards)
	var parts []part
	for _, s := range shards {
		if s.Empty() || s.Local == nil {
			continue
		}
		if len(s.Offsets) != len(t.Shape) || !slices.Equal(s.Local.Shape, s.Sizes) {
			return nil, fmt.Errorf("%s: piece at %v of %v is stored as %v", name, s.Offsets, s.Sizes, s.Local.Shape)
		}
		if err := s.Local.Validate(); err != nil {
			return nil, fmt.Errorf("%s: rank %d's piece at %v: %w", name, s.Ranks[0], s.Offsets, err)
		}
		v, r0, c0, ok := at(s)
		if !ok {
			continue
		}
		v.name = fmt.Sprintf("%s (rank %d's piece at %v)", name, s.Ranks[0], s.Offsets)
		pm, err := matrixOf(v, round)
		if err != nil {
			return nil, err
		}
		parts = append(parts, part{r0: r0, c0: c0, ranks: s.Ranks, m: pm})
	}
	return parts, nil
}

// shardedMat gives m the parts of the 2-D weight t when it is stored as shards (t holding
// m transposed when transposed).
func (ws *weights) shardedMat(m *matrix, name string, t *statedict.Tensor, transposed, round bool) error {
	if _, ok := ws.shards[t]; !ok {
		return nil
	}
	parts, err := ws.partsOf(name, t, round, func(s statedict.Shard) (view, int, int, bool) {
		l := s.Local
		if transposed {
			return view{t: l, base: l.Offset, rs: l.Strides[1], cs: l.Strides[0], rows: int(s.Sizes[1]), cols: int(s.Sizes[0])},
				int(s.Offsets[1]), int(s.Offsets[0]), true
		}
		return view{t: l, base: l.Offset, rs: l.Strides[0], cs: l.Strides[1], rows: int(s.Sizes[0]), cols: int(s.Sizes[1])},
			int(s.Offsets[0]), int(s.Offsets[1]), true
	})
	if err != nil {
		return err
	}
	m.parts = parts
	return tiles(name, m.rows, m.cols, parts)
}

// tiles checks that parts cover the rows × cols matrix exactly once: each inside it, no
// two overlapping, their areas adding up to the whole. A per-device checkpoint missing a
// piece (a rank's file lost, an index naming fewer chunks) or holding one twice would
// otherwise compute with zeros or doubled partial sums and could still be compared.
func tiles(name string, rows, cols int, parts []part) error {
	var area int64
	for i, p := range parts {
		if p.r0 < 0 || p.c0 < 0 || p.r0+p.m.rows > rows || p.c0+p.m.cols > cols {
			return fmt.Errorf("%s: rank %d's piece [%d:%d, %d:%d] lies outside the %d×%d weight", name, p.ranks[0], p.r0, p.r0+p.m.rows, p.c0, p.c0+p.m.cols, rows, cols)
		}
		for _, q := range parts[:i] {
			if p.r0 < q.r0+q.m.rows && q.r0 < p.r0+p.m.rows && p.c0 < q.c0+q.m.cols && q.c0 < p.c0+p.m.cols {
				return fmt.Errorf("%s: the pieces of ranks %d and %d overlap at [%d, %d]", name, q.ranks[0], p.ranks[0], max(p.r0, q.r0), max(p.c0, q.c0))
			}
		}
		area += int64(p.m.rows) * int64(p.m.cols)
	}
	if want := int64(rows) * int64(cols); area != want {
		return fmt.Errorf("%s: the stored pieces hold %d of the weight's %d elements (%d×%d): a piece is missing", name, area, want, rows, cols)
	}
	return nil
}

// shardedExpert gives m, expert e's matrix of the stacked weight t ([E, rows, cols], or
// [E, cols, rows] when transposed), the parts of it the shards holding expert e store.
func (ws *weights) shardedExpert(m *matrix, name string, t *statedict.Tensor, e int, transposed, round bool) error {
	if _, ok := ws.shards[t]; !ok {
		return nil
	}
	parts, err := ws.partsOf(name, t, round, func(s statedict.Shard) (view, int, int, bool) {
		if int64(e) < s.Offsets[0] || int64(e) >= s.Offsets[0]+s.Sizes[0] {
			return view{}, 0, 0, false
		}
		l := s.Local
		v := view{t: l, base: l.Offset + (int64(e)-s.Offsets[0])*l.Strides[0], rs: l.Strides[1], cs: l.Strides[2],
			rows: int(s.Sizes[1]), cols: int(s.Sizes[2])}
		r0, c0 := int(s.Offsets[1]), int(s.Offsets[2])
		if transposed {
			v.rs, v.cs, v.rows, v.cols = l.Strides[2], l.Strides[1], int(s.Sizes[2]), int(s.Sizes[1])
			r0, c0 = c0, r0
		}
		return v, r0, c0, true
	})
	if err != nil {
		return err
	}
	m.parts = parts
	return tiles(name, m.rows, m.cols, parts)
}

// linearParts computes linear's product device by device, as tensor-parallel devices do:
// each part multiplies its local piece by the slice of x its columns take and gives partial
// outputs for its rows. Parts with disjoint rows produce disjoint output slices (the
// all-gather of column-parallel layers, FSDP's row shards); parts sharing rows produce
// partial sums over the input dimension, added in float32 in rank order (the all-reduce of
// row-parallel layers). The bias is added once, after.
func linearParts(dst, x []float32, T int, w *matrix, bias []float32, tpu bool) error {
	n, k := w.rows, w.cols
	if tpu {
		x = roundedBF16(x[:T*k]) // rounded once; each part's rounding of its slice is exact
	}
	out := dst[:T*n]
	clear(out)
	for _, p := range w.parts {
		rows, cols := p.m.rows, p.m.cols
		xs := make([]float32, T*cols)
		for t := range T {
			copy(xs[t*cols:(t+1)*cols], x[t*k+p.c0:t*k+p.c0+cols])
		}
		y := make([]float32, T*rows)
		if err := linear(y, xs, T, p.m, nil, tpu); err != nil {
			return err
		}
		for t := range T {
			o := out[t*n+p.r0 : t*n+p.r0+rows]
			for j, v := range y[t*rows : (t+1)*rows] {
				o[j] += v
			}
		}
	}
	if bias != nil {
		for t := range T {
			row := out[t*n : (t+1)*n]
			for j, b := range bias {
				row[j] += b
			}
		}
	}
	return nil
}

// rowF32 is row r of the matrix widened to float32 (an embedding lookup). From parts, it is
// gathered as a vocabulary-parallel embedding's devices give it: each part holding row r
// contributes its columns of it.
func (m *matrix) rowF32(r int) ([]float32, error) {
	if m.parts == nil {
		return m.rowsF32(r, r+1)
	}
	out := make([]float32, m.cols)
	for _, p := range m.parts {
		if r < p.r0 || r >= p.r0+p.m.rows {
			continue
		}
		v, err := p.m.rowsF32(r-p.r0, r-p.r0+1)
		if err != nil {
			return nil, err
		}
		copy(out[p.c0:], v)
	}
	return out, nil
}

// sliceParts is the parts of rows [r0, r1) of a matrix made of parts, in the slice's rows.
func sliceParts(parts []part, r0, r1 int) []part {
	var out []part
	for _, p := range parts {
		lo, hi := max(r0, p.r0), min(r1, p.r0+p.m.rows)
		if lo >= hi {
			continue
		}
		out = append(out, part{r0: lo - r0, c0: p.c0, ranks: p.ranks, m: p.m.slice(lo-p.r0, hi-p.r0)})
	}
	return out
}
