package statedict

import (
	"fmt"
	"io"
	"slices"
)

// Sharding says how the tensors of a checkpoint are split across the ranks of a distributed
// job — one process per device, as DTensor places them — for the writers of per-rank
// layouts (a DCP folder whose file __R_0.distcp holds rank R's chunks, one safetensors file
// per device). It is data: the TPU target (package runtime) decides it, convert carries it,
// the writers lay it out.
type Sharding struct {
	// Ranks is the number of ranks (the world size).
	Ranks int
	// Mesh is the device mesh the placements refer to, outermost axis first; recorded by
	// layouts that describe their sharding.
	Mesh []MeshAxis
	// Tensors gives the layout of the tensors of the tree being written (keyed by the
	// tree's *Tensor); a tensor without an entry is a plain tensor every rank holds whole.
	Tensors map[*Tensor]*TensorSharding
}

// MeshAxis is one named dimension of a device mesh.
type MeshAxis struct {
	Name string `json:"name"`
	Size int    `json:"size"`
}

// TensorSharding is one tensor's layout on the ranks.
type TensorSharding struct {
	// Placements are the DTensor placements, one per mesh axis, as torch prints them
	// ("Shard(dim=0)", "Replicate()", "_StridedShard(dim=0, split_factor=2)").
	Placements []string `json:"placements"`
	// Pieces are the distinct boxes of the tensor the ranks hold — disjoint, together the
	// whole tensor, empty ones included as DTensor reports them — each with its holders.
	Pieces []Piece `json:"pieces"`
}

// Piece is a box of a tensor and the ranks that hold it.
type Piece struct {
	// Offsets and Sizes are the box's first element and extent per dimension, as
	// DTensor's compute_local_shape_and_global_offset reports them (an empty box sits at
	// the dimension's size).
	Offsets []int64 `json:"offsets"`
	Sizes   []int64 `json:"sizes"`
	// Ranks hold the piece, in increasing order.
	Ranks []int `json:"ranks"`
}

// Shard is a stored piece of a tensor of a per-device checkpoint: its box in the whole
// tensor with the ranks that hold it (in increasing order; for a layout that stores a piece
// once, as DCP does, the rank whose file stores it) and Local, its elements as stored in
// the file of Ranks[0] — the copy the reassembled tensor reads — shaped as the box.
type Shard struct {
	Piece
	Local *Tensor
}

// Empty reports whether the piece holds no element.
func (p Piece) Empty() bool { return slices.Contains(p.Sizes, 0) }

// Run says whether the piece is one run of its tensor's row-major elements (the tensor
// whole, or a piece spanning every dimension after its first cut one, with size 1 before
// it), and which: its first element and length. An empty piece is an empty run.
func (p Piece) Run(shape []int64) (start, n int64, ok bool) {
	if p.Empty() {
		return 0, 0, true
	}
	k := -1 // the last dimension the piece does not span whole
	for d := range shape {
		if p.Sizes[d] != shape[d] {
			k = d
		}
	}
	for d := 0; d < k; d++ {
		if p.Sizes[d] != 1 {
			return 0, 0, false
		}
	}
	n = 1
	for d := range shape {
		n *= p.Sizes[d]
	}
	strides := ContiguousStrides(shape)
	for d := range shape {
		start += p.Offsets[d] * strides[d]
	}
	return start, n, true
}

// Of returns the layout of t: its entry, or one piece — the whole tensor — on every rank.
func (s *Sharding) Of(t *Tensor) *TensorSharding {
	if ts, ok := s.Tensors[t]; ok {
		return ts
	}
	ranks := make([]int, s.Ranks)
	for i := range ranks {
		ranks[i] = i
	}
	return &TensorSharding{Pieces: []Piece{{Offsets: make([]int64, len(t.Shape)), Sizes: slices.Clone(t.Shape), Ranks: ranks}}}
}

// Check validates the sharding of t: pieces of t's rank inside t, disjoint, covering it,
// holders valid ranks, every rank holding exactly one piece.
func (ts *TensorSharding) Check(t *Tensor, ranks int) error {
	held := make([]int, ranks)
	var numel int64
	for i, p := range ts.Pieces {
		if len(p.Offsets) != len(t.Shape) || len(p.Sizes) != len(t.Shape) {
			return fmt.Errorf("piece %d has %d offsets and %d sizes for a %d-dimensional tensor", i, len(p.Offsets), len(p.Sizes), len(t.Shape))
		}
		n := int64(1)
		for d := range t.Shape {
			o, s := p.Offsets[d], p.Sizes[d]
			if o < 0 || s < 0 || o+s > t.Shape[d] {
				return fmt.Errorf("piece at %v of size %v lies outside the tensor's shape %v", p.Offsets, p.Sizes, t.Shape)
			}
			n *= s
		}
		numel += n
		for _, r := range p.Ranks {
			if r < 0 || r >= ranks {
				return fmt.Errorf("piece at %v: rank %d is not one of the %d ranks", p.Offsets, r, ranks)
			}
			held[r]++
		}
		for _, q := range ts.Pieces[:i] {
			if !p.Empty() && !q.Empty() && overlap(p, q) {
				return fmt.Errorf("pieces at %v and %v overlap", q.Offsets, p.Offsets)
			}
		}
	}
	if want := t.NumEl(); numel != want {
		return fmt.Errorf("pieces hold %d elements, the tensor %d", numel, want)
	}
	for r, n := range held {
		if n != 1 {
			return fmt.Errorf("rank %d holds %d pieces (want 1)", r, n)
		}
	}
	return nil
}

func overlap(p, q Piece) bool {
	for d := range p.Offsets {
		if p.Offsets[d] >= q.Offsets[d]+q.Sizes[d] || q.Offsets[d] >= p.Offsets[d]+p.Sizes[d] {
			return false
		}
	}
	return true
}

// Box returns the view of t's sub-box at offsets with extent sizes — t[o0:o0+s0, …] in
// torch — sharing t's storage, so its bytes are read only when the view is. An empty box
// is an empty view. Packed dtypes (quint4x2) have no element boundaries and cannot be cut.
func (t *Tensor) Box(offsets, sizes []int64) (*Tensor, error) {
	if len(offsets) != len(t.Shape) || len(sizes) != len(t.Shape) {
		return nil, fmt.Errorf("box of %d offsets and %d sizes in a %d-dimensional tensor", len(offsets), len(sizes), len(t.Shape))
	}
	empty := false
	for d := range t.Shape {
		if offsets[d] < 0 || sizes[d] < 0 || offsets[d]+sizes[d] > t.Shape[d] {
			return nil, fmt.Errorf("box at %v of size %v lies outside the shape %v", offsets, sizes, t.Shape)
		}
		empty = empty || sizes[d] == 0
	}
	v := *t
	v.Shape = slices.Clone(sizes)
	v.Strides = slices.Clone(t.Strides)
	if slices.Equal(sizes, t.Shape) {
		return &v, nil
	}
	if t.DType.ValuesPerByte() > 1 {
		return nil, fmt.Errorf("%s tensors cannot be cut: packed values have no element boundaries", t.DType)
	}
	if !empty {
		for d, o := range offsets {
			v.Offset += o * t.Strides[d]
		}
	}
	return &v, nil
}

// Contiguous returns t itself when its view is row-major dense and its stored bytes are its
// value (little-endian, no lazy conj or neg), else a contiguous tensor whose storage gathers
// t's logical value on demand, a range at a time: a writer that stores the tensor as a
// storage of its own (a torch.save archive) streams it in bounded memory however large it
// is.
func (t *Tensor) Contiguous() (*Tensor, error) {
	if t.DType.ValuesPerByte() > 1 {
		return nil, fmt.Errorf("%s tensors cannot be gathered: packed values have no element boundaries", t.DType)
	}
	if t.IsContiguous() && (t.Storage == nil || t.fixup() == nil) {
		return t, nil
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	nb := t.NBytes()
	if nb == 0 {
		v := *t
		v.Strides = ContiguousStrides(t.Shape)
		v.Offset = 0
		v.Storage = NewMappedStorage(t.storageKey(), "", t.DType, []byte{})
		if t.Storage != nil {
			v.Storage.Location = t.Storage.Location
		}
		return &v, nil
	}
	st := NewReaderStorage(t.Storage.Key, t.Storage.Location, t.DType, &gatherer{t: t, fix: t.fixup()}, 0, nb)
	st.File = t.Storage.File
	return &Tensor{DType: t.DType, Shape: slices.Clone(t.Shape), Strides: ContiguousStrides(t.Shape), Storage: st,
		RequiresGrad: t.RequiresGrad, Parameter: t.Parameter, Class: t.Class, Attrs: t.Attrs, Quantizer: t.Quantizer}, nil
}

// gatherer reads a strided view's elements as contiguous row-major bytes at any offset.
type gatherer struct {
	t   *Tensor
	fix func([]byte)
}

// ReadAt fills p with the contiguous bytes [off, off+len(p)) of the view.
func (g *gatherer) ReadAt(p []byte, off int64) (int, error) {
	t := g.t
	es := int64(t.DType.Size())
	total := t.NBytes()
	if off < 0 || off > total {
		return 0, fmt.Errorf("read at %d outside a %d-byte view", off, total)
	}
	n := min(int64(len(p)), total-off)
	// Whole elements covering the range; a range not on element boundaries goes through
	// a small scratch buffer.
	first, end := off/es, (off+n+es-1)/es
	dst := p[:n]
	if off%es != 0 || n%es != 0 {
		dst = make([]byte, (end-first)*es)
	}
	if err := g.elements(dst, first, end); err != nil {
		return 0, err
	}
	if off%es != 0 || n%es != 0 {
		copy(p[:n], dst[off-first*es:])
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// elements writes elements [first, end) of the view, in row-major order, into dst.
func (g *gatherer) elements(dst []byte, first, end int64) error {
	t := g.t
	es := int64(t.DType.Size())
	nd := len(t.Shape)
	// The innermost dims that are contiguous with each other form runs of run elements.
	run, inner := int64(1), nd
	for inner > 0 {
		i := inner - 1
		if t.Shape[i] != 1 && t.Strides[i] != run {
			break
		}
		run *= t.Shape[i]
		inner--
	}
	outer := t.Shape[:inner]
	idx := make([]int64, inner)
	r := first / run
	for d := inner - 1; d >= 0; d-- {
		idx[d] = r % outer[d]
		r /= outer[d]
	}
	within := first % run
	mapped, isMapped := t.Storage.Mapped()
	pos := int64(0)
	for e := first; e < end; {
		src := t.Offset
		for d, v := range idx {
			src += v * t.Strides[d]
		}
		k := min(run-within, end-e)
		b, l := (src+within)*es, k*es
		if isMapped {
			copy(dst[pos:pos+l], mapped[b:b+l])
		} else if _, err := t.Storage.ReadAt(dst[pos:pos+l], b); err != nil {
			return err
		}
		pos += l
		e += k
		within = 0
		for d := inner - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < outer[d] {
				break
			}
			idx[d] = 0
		}
	}
	if g.fix != nil {
		g.fix(dst)
	}
	return nil
}
