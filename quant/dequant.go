package quant

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Dequantize returns the group's logical tensor in dtype out (bfloat16, float16 or
// float32), bit for bit as the group's reference dequantizer computes it (see the
// recipes of [Scheme]s in quant.md §4, and the package documentation for NaN bits).
//
// The tensor is lazy: its storage computes bytes on demand from the byte range
// asked for, reading only the codes and scales that range needs, so writing it
// streams with memory bounded by the read size, as copying does. A large read (as
// [statedict.Tensor.WriteTo] makes) is split over GOMAXPROCS goroutines. The
// storage keeps the codes' device tag; nothing is read until the bytes are.
func (g *Group) Dequantize(out statedict.DType) (*statedict.Tensor, error) {
	if out != statedict.BFloat16 && out != statedict.Float16 && out != statedict.Float32 {
		return nil, fmt.Errorf("%s: cannot dequantize to %s (bfloat16, float16 or float32)", g.Name, out)
	}
	w, err := newCodes(g.Weight, g.weight)
	if err != nil {
		return nil, err
	}
	var k kernel
	switch g.recipe {
	case recipeMXFP4:
		s, err := newCodes(g.Scales[0], g.scales[0])
		if err != nil {
			return nil, err
		}
		k = &mxfp4Kernel{blocks: w, scales: s, in: g.Shape[1], outF: g.Shape[2], tab32: mxfp4Table(out), es: int64(out.Size())}
	case recipeNVFP4ModelOpt, recipeNVFP4CT, recipeNVFP4CTScalar:
		s, err := newCodes(g.Scales[0], g.scales[0])
		if err != nil {
			return nil, err
		}
		_, cols := lastTwo(g.Shape)
		k = &nvfp4Kernel{codes: w, scales: s, global: g.scales[1], globalName: g.Scales[1], cols: cols, recipe: g.recipe, out: out}
	default:
		rows, cols := lastTwo(g.Shape)
		k = &fp8Kernel{codes: w, f: g.format, batch: numel(g.Shape) / (rows * cols), rows: rows, cols: cols,
			bh: g.Block[0], bw: g.Block[1], scale: g.scales[0], scaleName: g.Scales[0], recipe: g.recipe, out: out}
	}
	n := numel(g.Shape)
	es := int64(out.Size())
	r := &lazyReader{k: k, es: es}
	st := statedict.NewReaderStorage(g.Name, g.weight.Storage.Location, out, r, 0, n*es)
	st.File = g.weight.Storage.File
	return &statedict.Tensor{DType: out, Shape: g.Shape, Strides: statedict.ContiguousStrides(g.Shape), Storage: st}, nil
}

// kernel computes a range of a dequantized tensor's elements.
type kernel interface {
	// prepare reads what every range needs (small scale tensors); called once,
	// before the first fill.
	prepare() error
	// fill writes elements [e0, e1), in row-major logical order, into dst as
	// little-endian output elements. Safe for concurrent calls.
	fill(dst []byte, e0, e1 int64) error
	// grain is the number of elements parallel work is split at multiples of: a
	// row, or a tile of rows that share source bytes.
	grain() int64
}

// minParallel is the fewest elements worth a goroutine of their own.
const minParallel = 1 << 16

// lazyReader is the io.ReaderAt behind a dequantized storage.
type lazyReader struct {
	k       kernel
	es      int64 // output element size
	once    sync.Once
	prepErr error
}

// ReadAt fills p with the dequantized bytes at off; reads past the end were
// clipped by the storage.
func (l *lazyReader) ReadAt(p []byte, off int64) (int, error) {
	l.once.Do(func() { l.prepErr = l.k.prepare() })
	if l.prepErr != nil {
		return 0, l.prepErr
	}
	if len(p) == 0 {
		return 0, nil
	}
	e0, e1 := off/l.es, (off+int64(len(p))+l.es-1)/l.es
	if off%l.es == 0 && int64(len(p))%l.es == 0 {
		if err := l.fillParallel(p, e0, e1); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	// A read that splits elements: compute the whole elements, copy the bytes.
	tmp := make([]byte, (e1-e0)*l.es)
	if err := l.fillParallel(tmp, e0, e1); err != nil {
		return 0, err
	}
	return copy(p, tmp[off-e0*l.es:]), nil
}

// fillParallel splits [e0, e1) at multiples of the kernel's grain over up to
// GOMAXPROCS goroutines.
func (l *lazyReader) fillParallel(dst []byte, e0, e1 int64) error {
	grain := l.k.grain()
	workers := min(int64(runtime.GOMAXPROCS(0)), (e1-e0)/max(minParallel, grain))
	if workers <= 1 {
		return l.k.fill(dst, e0, e1)
	}
	cuts := []int64{e0}
	for i := int64(1); i < workers; i++ {
		c := (e0 + (e1-e0)*i/workers) / grain * grain
		if c > cuts[len(cuts)-1] && c < e1 {
			cuts = append(cuts, c)
		}
	}
	cuts = append(cuts, e1)
	errs := make([]error, len(cuts)-1)
	part := func(i int) {
		a, b := cuts[i], cuts[i+1]
		errs[i] = l.k.fill(dst[(a-e0)*l.es:(b-e0)*l.es], a, b)
	}
	var wg sync.WaitGroup
	for i := 1; i < len(errs); i++ {
		wg.Go(func() { part(i) })
	}
	part(0) // the calling goroutine takes a share too
	wg.Wait()
	return errors.Join(errs...)
}

// codes gives byte-range access to the contiguous bytes of a stored tensor of
// one-byte elements, without copying when its storage is memory-resident.
type codes struct {
	name   string
	t      *statedict.Tensor
	base   int64  // byte offset of the tensor in its storage
	mapped []byte // the tensor's bytes when memory-resident
}

func newCodes(name string, t *statedict.Tensor) (*codes, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if t.DType.Size() != 1 || !t.IsContiguous() || t.Neg || t.Conj {
		return nil, fmt.Errorf("%s: %w: %s view with strides %v: dequantization reads dense byte tensors", name, ckpterr.ErrUnsupported, t.DType, t.Strides)
	}
	c := &codes{name: name, t: t, base: t.Offset}
	if d, ok := t.Storage.Mapped(); ok {
		c.mapped = d[c.base : c.base+t.NBytes()]
	}
	return c, nil
}

// read returns the n bytes at off: a slice of the mapping, or buf (grown as
// needed) filled from the storage.
func (c *codes) read(off, n int64, buf *[]byte) ([]byte, error) {
	if c.mapped != nil {
		return c.mapped[off : off+n], nil
	}
	if int64(cap(*buf)) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	if _, err := c.t.Storage.ReadAt(b, c.base+off); err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	return b, nil
}

// readAll returns a small tensor's contiguous little-endian bytes.
func readAll(name string, t *statedict.Tensor) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := t.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return buf.Bytes(), nil
}

// scaleValues decodes a scale tensor to float32, exactly: float formats widen,
// float8_e8m0fnu decodes as torch does (0xFF → NaN), and uint8 exponents become
// exp2(b − 127) as transformers' Fp8Dequantize computes them (255 → +inf).
func scaleValues(name string, t *statedict.Tensor) ([]float32, error) {
	b, err := readAll(name, t)
	if err != nil {
		return nil, err
	}
	out := make([]float32, t.NumEl())
	switch t.DType {
	case statedict.Float32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case statedict.BFloat16:
		codec.DecodeBF16(out, b)
	case statedict.Float16:
		codec.DecodeF16(out, b)
	case statedict.Float8E8M0FNU:
		codec.DecodeFP8(out, b, codec.E8M0FNU)
	case statedict.Uint8:
		for i, e := range b {
			out[i] = float32(math.Ldexp(1, int(e)-127)) // 2^128 overflows float32 to +inf, as exp2 does
		}
	default:
		return nil, fmt.Errorf("%s: %w: %s scales", name, ckpterr.ErrUnsupported, t.DType)
	}
	return out, nil
}

// mul32 is x·y as torch's CPU kernels compute it on x86, NaN bits included: a
// NaN operand propagates quieted, the first one's when both are (Go does not
// promise which operand of a product comes first in the instruction).
func mul32(x, y float32) float32 {
	if x != x {
		return quiet(x)
	}
	if y != y {
		return quiet(y)
	}
	return x * y
}

// div32 is x/y with mul32's NaN rule.
func div32(x, y float32) float32 {
	if x != x {
		return quiet(x)
	}
	if y != y {
		return quiet(y)
	}
	return x / y
}

func quiet(x float32) float32 { return math.Float32frombits(math.Float32bits(x) | 0x00400000) }

// roundTo rounds x to dtype d and widens it back: the value a torch tensor of
// dtype d holds after an operation computed in float32 by a vectorized kernel
// (bfloat16 NaN becomes 0xFFFF, float16 NaN keeps its payload).
func roundTo(x float32, d statedict.DType) float32 {
	switch d {
	case statedict.BFloat16:
		return codec.BF16ToFloat32(codec.Float32ToBF16(x))
	case statedict.Float16:
		return codec.F16ToFloat32(codec.Float32ToF16(x))
	}
	return x
}

// outBits is the bits of y cast to the output dtype d with torch's vectorized casts.
func outBits(y float32, d statedict.DType) uint32 {
	switch d {
	case statedict.BFloat16:
		return uint32(codec.Float32ToBF16(y))
	case statedict.Float16:
		return uint32(codec.Float32ToF16(y))
	}
	return math.Float32bits(y)
}
