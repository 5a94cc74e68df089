package forward

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/statedict"
)

// matrix is a weight used as W in y = x·Wᵀ: rows output features by cols input features,
// read in row tiles. Bytes stay where the checkpoint holds them: a bfloat16 or float32
// matrix stored row-major in a memory-mapped file is used in place (bf16/f32 set); anything
// else — other dtypes, transposed or strided views, lazily dequantized tensors, MXFP4
// blocks — is decoded a tile of rows at a time into a small scratch buffer by fill.
type matrix struct {
	name       string
	rows, cols int

	bf16 []uint16  // the whole matrix in place, row-major, or
	f32  []float32 // the whole matrix in place, row-major, or
	// fill writes rows [r0, r1) into dst (row-major, cols per row): as bfloat16 bits when
	// tileBF16, else as float32.
	fill     func(dst []byte, r0, r1 int) error
	tileBF16 bool
	// round rounds float32 weights to bfloat16 before the product (the TPU precision).
	round bool
	// parts, when set, are the pieces the devices of a per-device checkpoint hold
	// (Options.Shards): products and lookups are computed from them, piece by piece.
	parts []part
}

// view is a 2-D strided view of a tensor's storage: element (r, c) at storage element
// base + r·rs + c·cs.
type view struct {
	name       string
	t          *statedict.Tensor
	base       int64
	rs, cs     int64
	rows, cols int
}

// littleEndian is true on the machines Go runs on except s390x, ppc64 and mips.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// matrixOf returns the matrix for a view, in place when it can be.
func matrixOf(v view, round bool) (*matrix, error) {
	t := v.t
	m := &matrix{name: v.name, rows: v.rows, cols: v.cols, round: round}
	es := int64(t.DType.Size())
	switch t.DType {
	case statedict.BFloat16, statedict.Float32, statedict.Float16, statedict.Float64:
	default:
		return nil, fmt.Errorf("%s: %s weights are not supported by the forward pass (floating point or a quantization config ckpt knows)", v.name, t.DType)
	}
	if t.Conj || t.Neg {
		return nil, fmt.Errorf("%s: lazily negated or conjugated tensors are not supported", v.name)
	}
	data, mapped := t.Storage.Mapped()
	dense := v.cs == 1 && v.rs == int64(v.cols)
	if mapped && dense && littleEndian && !t.Storage.BigEndian {
		start := v.base * es
		end := start + int64(v.rows)*int64(v.cols)*es
		if end > int64(len(data)) {
			return nil, fmt.Errorf("%s: view reaches byte %d of a %d-byte storage", v.name, end, len(data))
		}
		b := data[start:end]
		if len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%uintptr(es) == 0 {
			switch t.DType {
			case statedict.BFloat16:
				m.bf16 = unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
				return m, nil
			case statedict.Float32:
				if !round {
					m.f32 = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
					return m, nil
				}
			}
		}
	}
	m.tileBF16 = t.DType == statedict.BFloat16
	m.fill = func(dst []byte, r0, r1 int) error { return v.read(dst, r0, r1) }
	return m, nil
}

// read writes rows [r0, r1) of the view into dst as bfloat16 bits (bfloat16 tensors) or
// float32 (others), reading the storage run by run.
func (v view) read(dst []byte, r0, r1 int) error {
	t := v.t
	es := int64(t.DType.Size())
	st := t.Storage
	bigEndian := st.BigEndian != !littleEndian
	outES := int64(4)
	if t.DType == statedict.BFloat16 {
		outES = 2
	}
	put := func(out []byte, raw []byte) {
		n := len(raw) / int(es)
		for i := range n {
			e := raw[i*int(es) : (i+1)*int(es)]
			var bits uint64
			if bigEndian {
				for _, b := range e {
					bits = bits<<8 | uint64(b)
				}
			} else {
				for j := len(e) - 1; j >= 0; j-- {
					bits = bits<<8 | uint64(e[j])
				}
			}
			switch t.DType {
			case statedict.BFloat16:
				binary.NativeEndian.PutUint16(out[2*i:], uint16(bits))
			case statedict.Float32:
				binary.NativeEndian.PutUint32(out[4*i:], uint32(bits))
			case statedict.Float16:
				binary.NativeEndian.PutUint32(out[4*i:], math.Float32bits(codec.F16ToFloat32(uint16(bits))))
			case statedict.Float64:
				binary.NativeEndian.PutUint32(out[4*i:], math.Float32bits(float32(math.Float64frombits(bits))))
			}
		}
	}
	mapped, isMapped := st.Mapped()
	readRun := func(buf []byte, elem int64) error {
		off := elem * es
		if off < 0 || off+int64(len(buf)) > st.Size {
			return fmt.Errorf("%s: element %d outside its %d-byte storage %q (%s)", v.name, elem, st.Size, st.Key, st.File)
		}
		if isMapped {
			copy(buf, mapped[off:])
			return nil
		}
		_, err := st.ReadAt(buf, off)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		return nil
	}
	cols := int64(v.cols)
	switch {
	case v.cs == 1: // rows are contiguous runs
		raw := make([]byte, cols*es)
		for r := r0; r < r1; r++ {
			if err := readRun(raw, v.base+int64(r)*v.rs); err != nil {
				return err
			}
			put(dst[int64(r-r0)*cols*outES:], raw)
		}
	case v.rs == 1: // columns are contiguous runs (a transposed matrix)
		n := int64(r1 - r0)
		raw := make([]byte, n*es)
		col := make([]byte, n*outES)
		for c := range cols {
			if err := readRun(raw, v.base+int64(r0)+c*v.cs); err != nil {
				return err
			}
			put(col, raw)
			for r := range n {
				copy(dst[(r*cols+c)*outES:(r*cols+c+1)*outES], col[r*outES:])
			}
		}
	default:
		raw := make([]byte, es)
		for r := r0; r < r1; r++ {
			for c := range cols {
				if err := readRun(raw, v.base+int64(r)*v.rs+c*v.cs); err != nil {
					return err
				}
				put(dst[(int64(r-r0)*cols+c)*outES:], raw)
			}
		}
	}
	return nil
}

// mxfp4 is one expert's weight of a gpt-oss MXFP4 group: blocks [E, rows, G, 16] of FP4
// pairs and scales [E, rows, G] of E8M0 exponents, row r holding output feature r over G·32
// inputs. Rows decode to bfloat16 exactly: every FP4 value times a power of two is a
// bfloat16 (transformers' convert_moe_packed_tensors computes the same ldexp).
type mxfp4 struct {
	name           string
	blocks, scales *statedict.Tensor
	expert         int
	rows, groups   int
}

func (q *mxfp4) matrix() *matrix {
	return &matrix{name: q.name, rows: q.rows, cols: q.groups * 32, tileBF16: true, fill: q.fill}
}

func (q *mxfp4) fill(dst []byte, r0, r1 int) error {
	g := int64(q.groups)
	row0 := int64(q.expert)*int64(q.rows) + int64(r0)
	n := int64(r1 - r0)
	bs := make([]byte, n*g*16)
	ss := make([]byte, n*g)
	if err := readContiguous(q.blocks, bs, row0*g*16); err != nil {
		return fmt.Errorf("%s: %w", q.name, err)
	}
	if err := readContiguous(q.scales, ss, row0*g); err != nil {
		return fmt.Errorf("%s: %w", q.name, err)
	}
	out := dst[:n*g*32*2]
	fp4BF16 := codec.MXFP4BF16()
	for i, s := range ss {
		tab := &fp4BF16[s]
		blk := bs[i*16 : i*16+16]
		o := out[i*64 : i*64+64]
		for j, b := range blk {
			binary.NativeEndian.PutUint16(o[4*j:], tab[b&0xF])
			binary.NativeEndian.PutUint16(o[4*j+2:], tab[b>>4])
		}
	}
	return nil
}

// readContiguous reads len(dst) bytes of a dense tensor starting at byte off of its logical
// contents.
func readContiguous(t *statedict.Tensor, dst []byte, off int64) error {
	if !t.IsContiguous() {
		return fmt.Errorf("tensor is not contiguous")
	}
	es := int64(t.DType.Size())
	start := t.Offset*es + off
	if off < 0 || off+int64(len(dst)) > t.NBytes() {
		return fmt.Errorf("read of %d bytes at %d outside the tensor's %d bytes", len(dst), off, t.NBytes())
	}
	if d, ok := t.Storage.Mapped(); ok {
		copy(dst, d[start:])
		return nil
	}
	_, err := t.Storage.ReadAt(dst, start)
	return err
}

// readVector reads a 1-D floating-point tensor (norm weights, biases, sinks) as float32.
func readVector(name string, t *statedict.Tensor, n int) ([]float32, error) {
	if len(t.Shape) != 1 || t.Shape[0] != int64(n) {
		return nil, fmt.Errorf("%s: shape %v, want [%d]", name, t.Shape, n)
	}
	m, err := matrixOf(view{name: name, t: t, base: t.Offset, rs: int64(n) * t.Strides[0], cs: t.Strides[0], rows: 1, cols: n}, false)
	if err != nil {
		return nil, err
	}
	return m.rowsF32(0, 1)
}

// rowsF32 returns rows [r0, r1) widened to float32 (embedding lookups, small tensors).
func (m *matrix) rowsF32(r0, r1 int) ([]float32, error) {
	n := (r1 - r0) * m.cols
	out := make([]float32, n)
	switch {
	case m.bf16 != nil:
		for i, h := range m.bf16[r0*m.cols : r1*m.cols] {
			out[i] = codec.BF16ToFloat32(h)
		}
	case m.f32 != nil:
		copy(out, m.f32[r0*m.cols:r1*m.cols])
	case m.tileBF16:
		buf := make([]byte, 2*n)
		if err := m.fill(buf, r0, r1); err != nil {
			return nil, err
		}
		for i := range out {
			out[i] = codec.BF16ToFloat32(binary.NativeEndian.Uint16(buf[2*i:]))
		}
	default:
		buf := make([]byte, 4*n)
		if err := m.fill(buf, r0, r1); err != nil {
			return nil, err
		}
		for i := range out {
			out[i] = math.Float32frombits(binary.NativeEndian.Uint32(buf[4*i:]))
		}
	}
	return out, nil
}

// slice returns rows [r0, r1) of m as a matrix of its own.
func (m *matrix) slice(r0, r1 int) *matrix {
	s := *m
	s.name = fmt.Sprintf("%s[%d:%d]", m.name, r0, r1)
	s.rows = r1 - r0
	switch {
	case m.bf16 != nil:
		s.bf16 = m.bf16[r0*m.cols : r1*m.cols]
	case m.f32 != nil:
		s.f32 = m.f32[r0*m.cols : r1*m.cols]
	default:
		fill := m.fill
		s.fill = func(dst []byte, a, b int) error { return fill(dst, r0+a, r0+b) }
	}
	if m.parts != nil {
		s.parts = sliceParts(m.parts, r0, r1)
	}
	return &s
}
