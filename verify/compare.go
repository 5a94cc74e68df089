package verify

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"

	"github.com/ckpt-dev/ckpt/statedict"
)

// comparison is one pair of tensors compared element by element: stream is read through
// statedict.ReadTensors (bounded, on every core), other at the same offsets by random
// access. Both hold contiguous little-endian values of one dtype and shape.
type comparison struct {
	stream, other *statedict.Tensor
	es            int // element size in bytes (1 for packed dtypes)

	// Results: how many elements differ, the first one's flat index and both its bytes
	// (stream's, other's), and the largest absolute difference of float elements.
	differ      int64
	first       int64
	firstStream []byte
	firstOther  []byte
	maxAbs      float64
	read        int64
}

// randomAccess reports whether t's logical bytes can be read at any offset without the
// byte-order, negation or conjugation fix-ups WriteTo applies.
func randomAccess(t *statedict.Tensor) bool {
	es := t.DType.Size()
	return t.Storage != nil && !(t.Storage.BigEndian && es > 1) && !t.Neg && !(t.Conj && t.DType.IsComplex()) &&
		(t.DType.ValuesPerByte() <= 1 || t.IsContiguous())
}

// compareAll runs the comparisons, reading every stream tensor once through
// statedict.ReadTensors and the other tensors at the same offsets. release drops the
// mapped pages of both checkpoints; it is called every 32 MiB read through a mapping.
func compareAll(ctx context.Context, cs []*comparison, release func()) error {
	if len(cs) == 0 {
		return nil
	}
	files := &fileCache{files: map[string]*os.File{}}
	defer files.close()
	var mapped atomic.Int64
	account := func(n int64) {
		if mapped.Add(n) >= 32<<20 {
			mapped.Store(0)
			release()
		}
	}
	ts := make([]statedict.NamedTensor, len(cs))
	for i, c := range cs {
		ts[i] = statedict.NamedTensor{Name: fmt.Sprint(i), Tensor: c.stream}
		c.first = -1
	}
	err := statedict.ReadTensors(ctx, ts, func(i int) io.Writer {
		return &comparer{c: cs[i], r: &randomReader{t: cs[i].other, files: files, account: account}}
	}, statedict.ReadOptions{Release: release})
	if err != nil {
		return err
	}
	for _, c := range cs {
		if want := c.stream.NBytes(); c.read != want {
			return fmt.Errorf("read %d of the %d bytes of a tensor", c.read, want)
		}
	}
	return nil
}

// comparer is the sink of one comparison: it compares whole elements of the stream with
// the other tensor's bytes at the same offset, carrying a partial element to the next write.
type comparer struct {
	c     *comparison
	r     *randomReader
	carry []byte
	buf   []byte
}

func (w *comparer) Write(p []byte) (int, error) {
	n := len(p)
	es := w.c.es
	if len(w.carry) > 0 {
		k := min(es-len(w.carry), len(p))
		w.carry = append(w.carry, p[:k]...)
		p = p[k:]
		if len(w.carry) < es {
			return n, nil
		}
		if err := w.compare(w.carry); err != nil {
			return 0, err
		}
		w.carry = w.carry[:0]
	}
	whole := len(p) / es * es
	for len(p[:whole]) > 0 {
		k := min(whole, 1<<20)
		if err := w.compare(p[:k]); err != nil {
			return 0, err
		}
		p, whole = p[k:], whole-k
	}
	w.carry = append(w.carry, p...)
	return n, nil
}

// compare compares whole elements b of the stream, at offset c.read, with the other side.
func (w *comparer) compare(b []byte) error {
	c := w.c
	if cap(w.buf) < len(b) {
		w.buf = make([]byte, len(b))
	}
	o := w.buf[:len(b)]
	if err := w.r.ReadAt(o, c.read); err != nil {
		return err
	}
	if !bytes.Equal(b, o) {
		es := c.es
		for j := 0; j < len(b); j += es {
			x, y := b[j:j+es], o[j:j+es]
			if bytes.Equal(x, y) {
				continue
			}
			if c.differ == 0 {
				c.first = (c.read + int64(j)) / int64(es)
				c.firstStream, c.firstOther = bytes.Clone(x), bytes.Clone(y)
			}
			c.differ++
			if d := absDiff(c.stream.DType, x, y); d > c.maxAbs || math.IsNaN(d) && !math.IsNaN(c.maxAbs) {
				c.maxAbs = d
			}
		}
	}
	c.read += int64(len(b))
	return nil
}

// randomReader reads a tensor's contiguous logical bytes at any element-aligned offset:
// from the file with pread when they lie there as stored, else from the storage (mapped or
// computed), following the view's strides.
type randomReader struct {
	t       *statedict.Tensor
	files   *fileCache
	account func(int64)
}

// ReadAt fills p with the logical bytes at off; off and len(p) are whole elements.
func (r *randomReader) ReadAt(p []byte, off int64) error {
	t := r.t
	es := int64(t.DType.Size())
	if t.DType.ValuesPerByte() > 1 || t.IsContiguous() {
		return r.storageAt(p, t.Offset*es+off)
	}
	// A strided view: walk the elements of [off, off+len(p)) in row-major order, reading
	// runs along the last dimension when it is contiguous.
	e0, n := off/es, int64(len(p))/es
	nd := len(t.Shape)
	idx := make([]int64, nd)
	rem := e0
	for i := nd - 1; i >= 0; i-- {
		idx[i] = rem % t.Shape[i]
		rem /= t.Shape[i]
	}
	var done int64
	for done < n {
		at := t.Offset
		for i, v := range idx {
			at += v * t.Strides[i]
		}
		run := int64(1)
		if t.Strides[nd-1] == 1 {
			run = min(t.Shape[nd-1]-idx[nd-1], n-done)
		}
		if err := r.storageAt(p[done*es:(done+run)*es], at*es); err != nil {
			return err
		}
		done += run
		idx[nd-1] += run - 1
		for d := nd - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < t.Shape[d] || d == 0 {
				break
			}
			idx[d] = 0
		}
	}
	return nil
}

// storageAt reads the storage's bytes at off.
func (r *randomReader) storageAt(p []byte, off int64) error {
	st := r.t.Storage
	if file, at, ok := st.LocalFile(); ok {
		f, err := r.files.open(file)
		if err != nil {
			return err
		}
		if _, err := f.ReadAt(p, at+off); err != nil {
			return fmt.Errorf("reading %s at byte %d: %w", file, at+off, err)
		}
		return nil
	}
	if _, err := st.ReadAt(p, off); err != nil && err != io.EOF {
		return err
	}
	r.account(int64(len(p)))
	return nil
}

// fileCache holds the files pread from, open once each.
type fileCache struct {
	mu    sync.Mutex
	files map[string]*os.File
}

func (c *fileCache) open(path string) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.files[path]; ok {
		return f, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	c.files[path] = f
	return f, nil
}

func (c *fileCache) close() {
	for _, f := range c.files {
		f.Close()
	}
}
