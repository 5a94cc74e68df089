package megatron

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// copyOf is one rank's copy of a tensor: the tensor and the rank folder it was read from.
type copyOf struct {
	t     *statedict.Tensor
	where string
}

// part is the slice [from, from+n) along the merge dimension of one rank's tensor, and the
// other ranks' copies of it (replicas) that must hold the same bytes.
type part struct {
	copyOf
	replicas []copyOf
	from, n  int64
}

// concat returns the tensor called name whose elements along dim are the parts' slices,
// one after the other, and whose other dimensions are the parts' own: read on demand from
// the ranks' storages, never assembled in memory, and tagged with the first part's device. Reading it also reads every replica of
// every part and fails, naming the tensor and both ranks, where a replica's bytes differ.
func concat(name string, dim int, parts []part) (*statedict.Tensor, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%s: %w: nothing to merge", name, ckpterr.ErrCorrupt)
	}
	first := parts[0].t
	if dim < 0 || dim >= len(first.Shape) {
		return nil, fmt.Errorf("%s: %w: a %d-dimensional tensor has no dimension %d to merge along", name, ckpterr.ErrUnsupported, len(first.Shape), dim)
	}
	shape := slices.Clone(first.Shape)
	shape[dim] = 0
	c := &concatReader{name: name, dim: dim, es: int64(first.DType.Size()), inner: innerOf(first.Shape, dim)}
	for _, p := range parts {
		for _, x := range append([]copyOf{p.copyOf}, p.replicas...) {
			if err := mergeable(name, x, first); err != nil {
				return nil, err
			}
			if !slices.Equal(x.t.Shape, p.t.Shape) {
				return nil, fmt.Errorf("%s: %w: shape %v on %s, %v on %s", name, ckpterr.ErrCorrupt, x.t.Shape, x.where, p.t.Shape, p.where)
			}
		}
		for i, d := range p.t.Shape {
			if i != dim && d != first.Shape[i] {
				return nil, fmt.Errorf("%s: %w: shape %v on %s and %v on %s differ outside dimension %d", name, ckpterr.ErrCorrupt, p.t.Shape, p.where, first.Shape, parts[0].where, dim)
			}
		}
		if p.from < 0 || p.n <= 0 || p.from+p.n > p.t.Shape[dim] {
			return nil, fmt.Errorf("%s: %w: rows [%d, %d) of the %d along dimension %d on %s", name, ckpterr.ErrCorrupt, p.from, p.from+p.n, p.t.Shape[dim], dim, p.where)
		}
		c.starts = append(c.starts, shape[dim]*c.inner*c.es)
		c.parts = append(c.parts, p)
		shape[dim] += p.n
	}
	// Each part is a slice of a tensor its storage holds (mergeable): the sizes add up
	// without overflow.
	c.row = shape[dim] * c.inner * c.es
	size := c.row
	for _, d := range shape[:dim] {
		size *= d
	}
	location, file := "cpu", ""
	if first.Storage != nil { // an empty tensor may have none
		location, file = first.Storage.Location, first.Storage.File
	}
	st := statedict.NewReaderStorage(name, location, first.DType, c, 0, size)
	st.File = file
	return &statedict.Tensor{DType: first.DType, Shape: shape, Strides: statedict.ContiguousStrides(shape), Storage: st}, nil
}

// mergeable checks that x is a dense little-endian tensor of first's dtype and rank, whose
// elements its storage holds.
func mergeable(name string, x copyOf, first *statedict.Tensor) error {
	t := x.t
	switch {
	case t.DType != first.DType:
		return fmt.Errorf("%s: %w: %s on %s, %s elsewhere", name, ckpterr.ErrCorrupt, t.DType, x.where, first.DType)
	case len(t.Shape) != len(first.Shape):
		return fmt.Errorf("%s: %w: shape %v on %s, %v elsewhere", name, ckpterr.ErrCorrupt, t.Shape, x.where, first.Shape)
	case t.Quantizer != nil || t.Conj || t.Neg || t.Foreign != "" || t.DType.ValuesPerByte() > 1:
		return fmt.Errorf("%s: %w: a %s tensor on %s that is not plain data (quantized, packed or lazily conjugated)", name, ckpterr.ErrUnsupported, t.DTypeName(), x.where)
	}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("%s on %s: %w: %w", name, x.where, ckpterr.ErrCorrupt, err)
	}
	if t.NumEl() > 0 && (!t.IsContiguous() || t.Storage.BigEndian) {
		return fmt.Errorf("%s: %w: a strided or big-endian view on %s (Megatron saves contiguous tensors)", name, ckpterr.ErrUnsupported, x.where)
	}
	return nil
}

// concatReader reads a merged tensor's bytes: row by row (the elements before the merge
// dimension), each row the parts' slices in order.
type concatReader struct {
	name   string
	dim    int
	parts  []part
	starts []int64 // byte offset of each part within a row
	row    int64   // bytes per row
	inner  int64   // elements after the merge dimension
	es     int64
}

// ReadAt implements io.ReaderAt.
func (c *concatReader) ReadAt(p []byte, off int64) (int, error) {
	done := 0
	var check []byte
	for done < len(p) {
		at := off + int64(done)
		if c.row == 0 || at < 0 {
			break
		}
		o, in := at/c.row, at%c.row
		i := sort.Search(len(c.starts), func(i int) bool { return c.starts[i] > in }) - 1
		pt := c.parts[i]
		width := pt.n * c.inner * c.es
		within := in - c.starts[i]
		n := min(int64(len(p)-done), width-within)
		dst := p[done : done+int(n)]
		if err := c.read(pt.copyOf, dst, o, pt.from, within); err != nil {
			return done, err
		}
		for _, r := range pt.replicas {
			if int64(cap(check)) < n {
				check = make([]byte, n)
			}
			got := check[:n]
			if err := c.read(r, got, o, pt.from, within); err != nil {
				return done, err
			}
			if !bytes.Equal(got, dst) {
				k := int64(0)
				for k < n && got[k] == dst[k] {
					k++
				}
				return done, fmt.Errorf("%s: %w: replicas differ: the copy on %s and the one on %s disagree at element %d of the merged tensor",
					c.name, ckpterr.ErrCorrupt, r.where, pt.where, (at+k)/c.es)
			}
		}
		done += int(n)
	}
	if done < len(p) {
		return done, io.EOF
	}
	return done, nil
}

// read reads into dst the bytes at within of row o of x's slice that starts at element
// from along the merge dimension.
func (c *concatReader) read(x copyOf, dst []byte, o, from, within int64) error {
	at := (x.t.Offset+(o*x.t.Shape[c.dim]+from)*c.inner)*c.es + within
	n, err := x.t.Storage.ReadAt(dst, at)
	if n == len(dst) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%s on %s: %w", c.name, x.where, err)
}

// innerOf is the number of elements after dimension dim of shape.
func innerOf(shape []int64, dim int) int64 {
	n := int64(1)
	for _, d := range shape[dim+1:] {
		n *= d
	}
	return n
}
