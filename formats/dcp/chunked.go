package dcp

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Chunk is one stored piece of a sharded tensor: where it starts in the whole tensor and
// the tensor holding its elements (whose shape is the piece's extent).
type Chunk struct {
	Offsets []int64           // index of the chunk's first element in the whole tensor
	Tensor  *statedict.Tensor // the chunk's elements, any strided view
}

// Chunked is a tensor stored as chunks that tile it (the shards of a DTensor or
// ShardedTensor saved by several ranks), read as the whole tensor's contiguous row-major
// bytes without ever holding the whole tensor in memory: ReadAt fetches just the requested
// range from the chunks that hold it. It is an io.ReaderAt, so a statedict.Storage can be
// backed by it (see Tensor) and every consumer of statedict tensors reads sharded tensors
// unchanged, in bounded memory.
type Chunked struct {
	dtype  statedict.DType
	shape  []int64 // the tensor's shape
	dims   []int64 // the shape walked: shape, or [1] for a 0-dim tensor
	size   int64   // bytes
	split  int     // every chunk spans the whole tensor in the dims after split
	inner  int64   // elements per step along split: the product of shape[split+1:]
	slab   int64   // elements per index of the dims before split: shape[split] * inner
	chunks []piece // non-empty chunks, sorted by their offset along split
	// last is the index of the chunk that served the previous run; ReadAt may be called
	// concurrently, so it is atomic.
	last atomic.Int64
}

// piece is a non-empty chunk prepared for reading.
type piece struct {
	off, size []int64
	rows      rows
}

// NewChunked checks that chunks tile a tensor of the given dtype and shape exactly (inside
// it, disjoint, covering it) and that each chunk's tensor has that dtype and the chunk's
// shape, and returns the lazy assembly.
func NewChunked(dtype statedict.DType, shape []int64, chunks []Chunk) (*Chunked, error) {
	if dtype.ValuesPerByte() > 1 {
		return nil, fmt.Errorf("%w: chunked %s tensors (packed values have no element boundaries)", ckpterr.ErrUnsupported, dtype)
	}
	metas := make([]ChunkMeta, len(chunks))
	for i, c := range chunks {
		if c.Tensor == nil {
			return nil, fmt.Errorf("chunk at offsets %v has no tensor", c.Offsets)
		}
		if c.Tensor.DType != dtype {
			return nil, fmt.Errorf("chunk at offsets %v is %s, the tensor %s", c.Offsets, c.Tensor.DType, dtype)
		}
		if err := c.Tensor.Validate(); err != nil {
			return nil, fmt.Errorf("chunk at offsets %v: %w", c.Offsets, err)
		}
		metas[i] = ChunkMeta{Offsets: c.Offsets, Sizes: c.Tensor.Shape}
	}
	if bad, err := checkTiling(dtype, shape, metas); err != nil {
		if bad >= 0 {
			return nil, fmt.Errorf("chunk at offsets %v: %w", metas[bad].Offsets, err)
		}
		return nil, err
	}
	n, _ := numel(shape, dtype.Size())
	c := &Chunked{dtype: dtype, shape: slices.Clone(shape), dims: slices.Clone(shape), size: n * int64(dtype.Size())}
	if len(shape) == 0 {
		// A 0-dim tensor: its one chunk is the whole.
		c.dims, c.inner, c.slab = []int64{1}, 1, 1
		c.chunks = []piece{{off: []int64{0}, size: []int64{1}, rows: newRows(chunks[0].Tensor)}}
		return c, nil
	}
	for i, m := range metas {
		if empty(m) {
			continue
		}
		for d := range shape {
			if m.Sizes[d] != shape[d] {
				c.split = max(c.split, d)
			}
		}
		c.chunks = append(c.chunks, piece{off: m.Offsets, size: m.Sizes, rows: newRows(chunks[i].Tensor)})
	}
	c.inner = 1
	for _, d := range shape[c.split+1:] {
		c.inner *= d
	}
	c.slab = shape[c.split] * c.inner
	slices.SortStableFunc(c.chunks, func(a, b piece) int { return cmp.Compare(a.off[c.split], b.off[c.split]) })
	return c, nil
}

// Size is the tensor's length in bytes.
func (c *Chunked) Size() int64 { return c.size }

// Tensor returns a contiguous tensor backed by the assembly: a statedict.Storage named key
// with location "cpu" that reads through c.
func (c *Chunked) Tensor(key string) *statedict.Tensor {
	st := statedict.NewReaderStorage(key, "cpu", c.dtype, c, 0, c.size)
	shape := slices.Clone(c.shape)
	return &statedict.Tensor{DType: c.dtype, Shape: shape, Strides: statedict.ContiguousStrides(shape), Storage: st}
}

// ReadAt reads len(p) bytes of the tensor's contiguous little-endian value starting at byte
// off, as io.ReaderAt specifies.
func (c *Chunked) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("dcp: read at negative offset %d", off)
	}
	if off >= c.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := min(int64(len(p)), c.size-off)
	es := int64(c.dtype.Size())
	var err error
	if off%es == 0 && n%es == 0 {
		err = c.read(p[:n], off/es)
	} else {
		// Unaligned: read the whole elements around the range.
		first, end := off/es, (off+n+es-1)/es
		buf := make([]byte, (end-first)*es)
		if err = c.read(buf, first); err == nil {
			copy(p[:n], buf[off-first*es:])
		}
	}
	if err != nil {
		return 0, err
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// read fills dst with whole elements of the tensor starting at element e, walking the
// tensor in row-major order: each index of the dims before split is a slab, made of runs
// along split that each come from one chunk and are contiguous in that chunk's own
// row-major order.
func (c *Chunked) read(dst []byte, e int64) error {
	es := int64(c.dtype.Size())
	outer := c.dims[:c.split]
	idx := make([]int64, len(outer))
	for len(dst) > 0 {
		s, r := e/c.slab, e%c.slab
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d] = s % outer[d]
			s /= outer[d]
		}
		pos := r / c.inner // index along split
		k := c.find(idx, pos)
		if k < 0 {
			return errors.New("dcp: chunks do not cover the tensor") // excluded by NewChunked
		}
		ch := &c.chunks[k]
		// The element's position in the chunk's own row-major order.
		var local int64
		for d := range outer {
			local = local*ch.size[d] + idx[d] - ch.off[d]
		}
		local = (local*ch.size[c.split]+pos-ch.off[c.split])*c.inner + r%c.inner
		m := min(int64(len(dst))/es, (ch.off[c.split]+ch.size[c.split])*c.inner-r)
		if err := ch.rows.read(dst[:m*es], local, m); err != nil {
			return err
		}
		dst = dst[m*es:]
		e += m
	}
	return nil
}

// find returns the chunk holding the element whose indices before split are idx and whose
// index along split is pos, trying first the chunk of the previous run and the one after
// it (the next run of a row usually comes from the next chunk in offset order).
func (c *Chunked) find(idx []int64, pos int64) int {
	holds := func(k int) bool {
		ch := &c.chunks[k]
		if pos < ch.off[c.split] || pos >= ch.off[c.split]+ch.size[c.split] {
			return false
		}
		for d, x := range idx {
			if x < ch.off[d] || x >= ch.off[d]+ch.size[d] {
				return false
			}
		}
		return true
	}
	last := int(c.last.Load())
	for _, k := range []int{last, last + 1} {
		if k < len(c.chunks) && holds(k) {
			c.last.Store(int64(k))
			return k
		}
	}
	for k := range c.chunks {
		if holds(k) {
			c.last.Store(int64(k))
			return k
		}
	}
	return -1
}

// rows reads element ranges of a strided tensor in row-major order. Its dims are merged
// where they can be (size-1 dims dropped, trailing dims folded into one while evenly
// strided), so a contiguous tensor is a single dim and any range of it costs one WriteTo;
// otherwise a range is cut into at most two boxes per dim, each read with one WriteTo.
type rows struct {
	t             *statedict.Tensor
	shape, stride []int64 // merged dims
}

func newRows(t *statedict.Tensor) rows {
	var shape, strides []int64
	for d, n := range t.Shape {
		if n != 1 {
			shape, strides = append(shape, n), append(strides, t.Strides[d])
		}
	}
	if len(shape) == 0 {
		return rows{t: t, shape: []int64{1}, stride: []int64{1}}
	}
	// Fold dim i into the run after it while stride[i] == size × stride of that run.
	i := len(shape) - 1
	run, rstride := shape[i], strides[i]
	for i--; i >= 0 && strides[i] == run*rstride; i-- {
		run *= shape[i]
	}
	return rows{t: t, shape: append(shape[:i+1:i+1], run), stride: append(strides[:i+1:i+1], rstride)}
}

// read writes elements [first, first+n) of the tensor, in row-major order, into dst. Each
// step takes the largest box starting at the current element: whole inner dims times as
// many steps along the outermost dim at which the position is aligned as fit.
func (r *rows) read(dst []byte, first, n int64) error {
	es := int64(r.t.DType.Size())
	nd := len(r.shape)
	idx := make([]int64, nd)
	for n > 0 {
		rem := first
		for d := nd - 1; d >= 0; d-- {
			idx[d] = rem % r.shape[d]
			rem /= r.shape[d]
		}
		// block is the element count of one step along dim j (the product of the dims after it).
		j, block := nd-1, int64(1)
		for j > 0 && idx[j] == 0 && block*r.shape[j] <= n {
			block *= r.shape[j]
			j--
		}
		count := min(r.shape[j]-idx[j], n/block)
		off := r.t.Offset
		for d, x := range idx {
			off += x * r.stride[d]
		}
		shape := append([]int64{count}, r.shape[j+1:]...)
		sub := &statedict.Tensor{DType: r.t.DType, Shape: shape, Strides: r.stride[j:],
			Offset: off, Storage: r.t.Storage, Conj: r.t.Conj, Neg: r.t.Neg}
		m := count * block
		w := sliceWriter{dst[:m*es]}
		if _, err := sub.WriteTo(&w); err != nil {
			return err
		}
		if len(w.b) != 0 {
			return fmt.Errorf("dcp: chunk view wrote %d bytes short", len(w.b))
		}
		dst = dst[m*es:]
		first += m
		n -= m
	}
	return nil
}

// sliceWriter writes into a fixed slice.
type sliceWriter struct{ b []byte }

// Write appends p.
func (w *sliceWriter) Write(p []byte) (int, error) {
	if len(p) > len(w.b) {
		return 0, io.ErrShortBuffer
	}
	copy(w.b, p)
	w.b = w.b[len(p):]
	return len(p), nil
}
