package zero

import (
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// span is n elements of the flat tensor t from its element off.
type span struct {
	t      *statedict.Tensor
	off, n int64
}

// cut returns the spans covering elements [from, from+n) of the spans' concatenation
// (shorter when the spans end first; callers check the total).
func cut(spans []span, from, n int64) []span {
	var out []span
	var at int64
	for _, s := range spans {
		if n <= 0 {
			break
		}
		if from < at+s.n {
			skip := max(from-at, 0)
			take := min(s.n-skip, n)
			out = append(out, span{s.t, s.off + skip, take})
			n -= take
			from += take
		}
		at += s.n
	}
	return out
}

// gathered returns the contiguous tensor of dtype dt and shape whose elements are those of
// the spans, in order: read on demand from the partitions, never assembled in memory.
func gathered(name string, dt statedict.DType, shape []int64, spans []span) (*statedict.Tensor, error) {
	es := int64(dt.Size())
	g := &gather{es: es}
	var total int64
	for _, s := range spans {
		t := s.t
		if t.DType != dt {
			return nil, fmt.Errorf("%s: %w: a partition is %s, the parameter %s", name, ckpterr.ErrCorrupt, t.DType, dt)
		}
		if len(t.Shape) != 1 || t.Storage == nil || (t.Shape[0] > 1 && t.Strides[0] != 1) {
			return nil, fmt.Errorf("%s: %w: a partition is not a flat contiguous tensor (shape %v)", name, ckpterr.ErrCorrupt, t.Shape)
		}
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if s.off < 0 || s.n < 0 || s.off+s.n > t.NumEl() {
			return nil, fmt.Errorf("%s: %w: elements [%d, %d) of a %d-element partition", name, ckpterr.ErrCorrupt, s.off, s.off+s.n, t.NumEl())
		}
		g.starts = append(g.starts, total*es)
		g.spans = append(g.spans, s)
		total += s.n
	}
	if want := numel(shape); total != want {
		return nil, fmt.Errorf("%s: %w: the partitions hold %d of its %d elements", name, errLayout, total, want)
	}
	st := statedict.NewReaderStorage(name, "cpu", dt, g, 0, total*es)
	if len(spans) > 0 {
		st.File = spans[0].t.Storage.File
	}
	return &statedict.Tensor{DType: dt, Shape: slices.Clone(shape), Strides: statedict.ContiguousStrides(shape), Storage: st}, nil
}

// gather reads the bytes of a parameter from the spans holding it.
type gather struct {
	spans  []span
	starts []int64 // byte offset of each span in the parameter
	es     int64
}

// ReadAt implements io.ReaderAt.
func (g *gather) ReadAt(p []byte, off int64) (int, error) {
	i := sort.Search(len(g.starts), func(i int) bool { return g.starts[i] > off }) - 1
	done := 0
	for ; i >= 0 && i < len(g.spans) && done < len(p); i++ {
		s := g.spans[i]
		within := off + int64(done) - g.starts[i]
		size := s.n * g.es
		if within >= size {
			continue
		}
		n := min(int64(len(p)-done), size-within)
		at := (s.t.Offset+s.off)*g.es + within
		if _, err := s.t.Storage.ReadAt(p[done:done+int(n)], at); err != nil && err != io.EOF {
			return done, err
		}
		done += int(n)
	}
	if done < len(p) {
		return done, io.EOF
	}
	return done, nil
}
