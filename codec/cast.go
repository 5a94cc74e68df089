package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ckpt-dev/ckpt/statedict"
)

// CastStorage returns a storage holding src's elements (of dtype from) converted to dtype to
// the way torch's Tensor.to(dtype) converts them. Its bytes are computed on demand from the
// source range being read, so casting streams like copying does.
func CastStorage(src *statedict.Storage, from, to statedict.DType) (*statedict.Storage, error) {
	conv, err := converter(from, to)
	if err != nil {
		return nil, err
	}
	fs, ts := int64(from.Size()), int64(to.Size())
	if src.Size%fs != 0 {
		return nil, fmt.Errorf("storage %q of %d bytes is not a whole number of %s elements", src.Key, src.Size, from)
	}
	n := src.Size / fs
	r := &castReader{src: src, conv: conv, fs: fs, ts: ts, swap: src.BigEndian}
	if from == statedict.Float64 && to == statedict.BFloat16 {
		r.scalarFrom = n - n%vectorBlock
	} else {
		r.scalarFrom = n
	}
	st := statedict.NewReaderStorage(src.Key, src.Location, to, r, 0, n*ts)
	st.File = src.File
	return st, nil
}

// castReader produces converted bytes for any byte range of the cast storage.
type castReader struct {
	src    *statedict.Storage
	conv   func(dst, src []byte)
	fs, ts int64
	swap   bool
	// scalarFrom is the first element torch converts with its scalar code (float64 →
	// bfloat16 only), whose NaNs become 0x7FC0 instead of the vectorized 0xFFFF.
	scalarFrom int64
}

// vectorBlock is how many float64 elements torch's vectorized float64 → bfloat16 loop
// converts at a time on the AVX-512 CPUs it reports here (8 on AVX2 CPUs); the remainder of
// a tensor is converted by its scalar code.
const vectorBlock = 16

// ReadAt converts the source elements covering [off, off+len(p)) of the cast storage. The
// source elements are read straight from the mapping when the source is memory-resident, and
// large reads are converted on every core. Safe for concurrent calls, as io.ReaderAt requires.
func (c *castReader) ReadAt(p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	first := off / c.ts
	last := (off + int64(len(p)) - 1) / c.ts
	n := last - first + 1
	var in []byte
	if d, ok := c.src.Mapped(); ok && !c.swap && (last+1)*c.fs <= int64(len(d)) {
		in = d[first*c.fs : (last+1)*c.fs]
	} else {
		in = make([]byte, n*c.fs)
		if _, err := c.src.ReadAt(in, first*c.fs); err != nil {
			return 0, err
		}
		if c.swap {
			for i := int64(0); i < int64(len(in)); i += c.fs {
				e := in[i : i+c.fs]
				for a, z := 0, len(e)-1; a < z; a, z = a+1, z-1 {
					e[a], e[z] = e[z], e[a]
				}
			}
		}
	}
	out := p
	aligned := off%c.ts == 0 && int64(len(p)) == n*c.ts
	if !aligned {
		out = make([]byte, n*c.ts)
	}
	c.convParallel(out, in, n)
	for i := max(first, c.scalarFrom); i <= last; i++ {
		j := i - first
		if v := math.Float64frombits(binary.LittleEndian.Uint64(in[j*8:])); v != v {
			binary.LittleEndian.PutUint16(out[j*2:], 0x7FC0)
		}
	}
	if !aligned {
		copy(p, out[off-first*c.ts:])
	}
	return len(p), nil
}

// minParallelCast is the fewest elements worth splitting a conversion over goroutines.
const minParallelCast = 1 << 16

// convParallel converts n elements from in to out, split over up to GOMAXPROCS goroutines
// (the caller takes a share).
func (c *castReader) convParallel(out, in []byte, n int64) {
	workers := min(int64(runtime.GOMAXPROCS(0)), n/minParallelCast)
	if workers <= 1 {
		c.conv(out, in)
		return
	}
	var wg sync.WaitGroup
	for i := int64(1); i < workers; i++ {
		a, b := n*i/workers, n*(i+1)/workers
		wg.Go(func() { c.conv(out[a*c.ts:b*c.ts], in[a*c.fs:b*c.fs]) })
	}
	b := n / workers
	c.conv(out[:b*c.ts], in[:b*c.fs])
	wg.Wait()
}

// The casts are torch 2.14's, bit for bit, as testdata/cast/expected.json records them (every
// 16-bit source value, thousands of float32 and float64 specials). Between the 16- and 32-bit
// types each cast has a kernel of its own below. A NaN's fate depends on torch's path: its
// vectorized float → bfloat16 rounding gives 0xFFFF (also for float64 sources, which it
// narrows to float first), its scalar one 0x7FC0 (float16 → bfloat16 always takes it);
// float16 → float32 quiets signalling NaNs, bfloat16 → float32 keeps the bits.
//
// torch runs float64 → bfloat16 vectorized in blocks (16 elements with AVX-512, 8 with AVX2)
// and the last partial block scalar, so a NaN there becomes 0x7FC0 (castReader.scalarFrom).
// ckpt reproduces that for a tensor converted by one thread with AVX-512, as torch does here;
// torch splits tensors of more than 32 768 elements over its threads, each with its own
// partial block, which depends on the machine: there ckpt's NaNs may differ from a given
// torch's.

// castDecoders read one little-endian element as float64 (exact for all four types), for casts
// from and to float64.
var castDecoders = map[statedict.DType]func([]byte) float64{
	statedict.Float16:  func(b []byte) float64 { return float64(F16ToFloat32(binary.LittleEndian.Uint16(b))) },
	statedict.BFloat16: func(b []byte) float64 { return float64(BF16ToFloat32(binary.LittleEndian.Uint16(b))) },
	statedict.Float32:  func(b []byte) float64 { return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))) },
	statedict.Float64:  func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) },
}

// castEncoders write one element. Narrowing from float64 goes through float32 first, as torch
// does (double → float → half rounds twice, and so must we to be bit-identical).
var castEncoders = map[statedict.DType]func([]byte, float64){
	statedict.Float16:  func(b []byte, v float64) { binary.LittleEndian.PutUint16(b, Float32ToF16(float32(v))) },
	statedict.BFloat16: func(b []byte, v float64) { binary.LittleEndian.PutUint16(b, Float32ToBF16(float32(v))) },
	statedict.Float32:  func(b []byte, v float64) { binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v))) },
	statedict.Float64:  func(b []byte, v float64) { binary.LittleEndian.PutUint64(b, math.Float64bits(v)) },
}

// kernels are the casts between float16, bfloat16 and float32.
var kernels = map[[2]statedict.DType]func(dst, src []byte){
	{statedict.Float32, statedict.BFloat16}: float32ToBF16,
	{statedict.BFloat16, statedict.Float32}: func(dst, src []byte) {
		s, d := pair[[2]byte, [4]byte](dst, src)
		for i := range s {
			binary.LittleEndian.PutUint32(d[i][:], uint32(binary.LittleEndian.Uint16(s[i][:]))<<16)
		}
	},
	{statedict.Float16, statedict.Float32}: func(dst, src []byte) {
		s, d := pair[[2]byte, [4]byte](dst, src)
		for i := range s {
			binary.LittleEndian.PutUint32(d[i][:], math.Float32bits(F16ToFloat32(binary.LittleEndian.Uint16(s[i][:]))))
		}
	},
	{statedict.Float32, statedict.Float16}: func(dst, src []byte) {
		s, d := pair[[4]byte, [2]byte](dst, src)
		for i := range s {
			binary.LittleEndian.PutUint16(d[i][:], Float32ToF16(math.Float32frombits(binary.LittleEndian.Uint32(s[i][:]))))
		}
	},
	{statedict.BFloat16, statedict.Float16}: func(dst, src []byte) {
		s, d := pair[[2]byte, [2]byte](dst, src)
		for i := range s {
			binary.LittleEndian.PutUint16(d[i][:], Float32ToF16(BF16ToFloat32(binary.LittleEndian.Uint16(s[i][:]))))
		}
	},
	{statedict.Float16, statedict.BFloat16}: func(dst, src []byte) {
		s, d := pair[[2]byte, [2]byte](dst, src)
		for i := range s {
			h := binary.LittleEndian.Uint16(s[i][:])
			out := uint16(0x7FC0) // torch's scalar NaN
			if h&0x7C00 != 0x7C00 || h&0x03FF == 0 {
				out = Float32ToBF16(F16ToFloat32(h))
			}
			binary.LittleEndian.PutUint16(d[i][:], out)
		}
	},
}

// Integer and bool tensors converted to float32 (Tensor.float(), as DeepSpeed's
// zero_to_fp32 does to every buffer): one rounding, straight from the integer, as C++'s
// static_cast<float> does.
func init() {
	ints := map[statedict.DType]func([]byte) float32{
		statedict.Int64: func(b []byte) float32 { return float32(int64(binary.LittleEndian.Uint64(b))) },
		statedict.Int32: func(b []byte) float32 { return float32(int32(binary.LittleEndian.Uint32(b))) },
		statedict.Int16: func(b []byte) float32 { return float32(int16(binary.LittleEndian.Uint16(b))) },
		statedict.Int8:  func(b []byte) float32 { return float32(int8(b[0])) },
		statedict.Uint8: func(b []byte) float32 { return float32(b[0]) },
		statedict.Bool: func(b []byte) float32 {
			if b[0] != 0 {
				return 1
			}
			return 0
		},
	}
	for from, dec := range ints {
		fs := from.Size()
		kernels[[2]statedict.DType{from, statedict.Float32}] = func(dst, src []byte) {
			for i, j := 0, 0; i+fs <= len(src); i, j = i+fs, j+4 {
				binary.LittleEndian.PutUint32(dst[j:], math.Float32bits(dec(src[i:i+fs])))
			}
		}
	}
}

// pair views src as elements of type S and dst as as many elements of type D (byte arrays:
// no alignment needed), so that kernels index both without bounds checks per element.
func pair[S, D any](dst, src []byte) ([]S, []D) {
	n := len(src) / int(unsafe.Sizeof(*new(S)))
	if n == 0 {
		return nil, nil
	}
	s := unsafe.Slice((*S)(unsafe.Pointer(unsafe.SliceData(src))), n)
	d := unsafe.Slice((*D)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst)/int(unsafe.Sizeof(*new(D))))
	return s, d[:n]
}

// converter returns a function converting a buffer of from-elements into to-elements.
func converter(from, to statedict.DType) (func(dst, src []byte), error) {
	if k, ok := kernels[[2]statedict.DType{from, to}]; ok {
		return k, nil
	}
	dec, ok1 := castDecoders[from]
	enc, ok2 := castEncoders[to]
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("no cast from %s to %s", from, to)
	}
	fs, ts := from.Size(), to.Size()
	return func(dst, src []byte) {
		for i, j := 0, 0; i+fs <= len(src); i, j = i+fs, j+ts {
			enc(dst[j:j+ts], dec(src[i:i+fs]))
		}
	}, nil
}

// float32ToBF16Go converts little-endian float32 elements to bfloat16 one at a time, the
// portable kernel (and the tail of the vector one).
func float32ToBF16Go(dst, src []byte) {
	s, d := pair[[4]byte, [2]byte](dst, src)
	for i := range s {
		binary.LittleEndian.PutUint16(d[i][:], Float32ToBF16(math.Float32frombits(binary.LittleEndian.Uint32(s[i][:]))))
	}
}
