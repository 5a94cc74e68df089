package quant

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/statedict"
)

// fp8Kernel dequantizes FP8 codes [batch, rows, cols] with one scale per bh×bw
// tile of each matrix (partial at the bottom and right edges, as DeepSeek's
// weight_dequant_kernel masks them): tensor, channel, column and block schemes
// alike. The scale grid is ceil(rows/bh) × ceil(cols/bw) per matrix, or one grid
// shared by every matrix.
//
// Where a scale covers enough elements, the kernel tabulates the output of all
// 256 codes for that scale with the recipe's exact scalar arithmetic, then
// dequantizes by table lookup: the same bits, an order of magnitude faster. The
// tables of a row block are built once and shared by the goroutines and reads that
// need them; a few recent row blocks are kept.
type fp8Kernel struct {
	codes                     *codes
	f                         codec.Format
	batch, rows, cols, bh, bw int64
	scale                     *statedict.Tensor
	scaleName                 string
	recipe                    recipe
	out                       statedict.DType

	// Set by prepare.
	gr, gc int64     // scale grid
	shared bool      // one grid for every matrix of the batch
	s      []float32 // scales as the recipe multiplies by them
	lut    bool      // dequantize through per-scale tables

	mu     sync.Mutex
	tables map[int64]*fp8Tables // by matrix·gr + row block
	recent []int64              // keys of tables, oldest first
}

// fp8Tables holds the output of every code for each column block of one row block.
type fp8Tables struct {
	once sync.Once
	t16  [][256]uint16 // 2-byte outputs
	t32  [][256]uint32 // 4-byte outputs
}

func (k *fp8Kernel) prepare() error {
	s, err := scaleValues(k.scaleName, k.scale)
	if err != nil {
		return err
	}
	k.gr, k.gc = ceilDiv(k.rows, k.bh), ceilDiv(k.cols, k.bw)
	if n := int64(len(s)); n != k.gr*k.gc && n != k.gr*k.gc*k.batch {
		return fmt.Errorf("%s: %w: %d scales for a %d×%d grid of %d matrices", k.scaleName, ckpterr.ErrCorrupt, n, k.gr, k.gc, k.batch)
	}
	k.shared = int64(len(s)) == k.gr*k.gc
	if k.recipe == recipeInTarget {
		for i := range s {
			s[i] = roundTo(s[i], k.out)
		}
	}
	k.s = s
	// A table costs 256 evaluations; it pays off when a scale covers many codes of
	// a row segment.
	k.lut = k.bw >= 16 && k.bw*k.bh >= 1024
	k.tables = map[int64]*fp8Tables{}
	return nil
}

// rowTables returns the tables of matrix b's row block holding row r, building them
// on first use.
func (k *fp8Kernel) rowTables(b, r int64) *fp8Tables {
	key := b*k.gr + r/k.bh
	k.mu.Lock()
	t := k.tables[key]
	if t == nil {
		t = &fp8Tables{}
		k.tables[key] = t
		k.recent = append(k.recent, key)
		if len(k.recent) > 2*runtime.GOMAXPROCS(0)+2 {
			delete(k.tables, k.recent[0])
			k.recent = k.recent[1:]
		}
	}
	k.mu.Unlock()
	t.once.Do(func() {
		if k.out.Size() == 2 {
			t.t16 = make([][256]uint16, k.gc)
		} else {
			t.t32 = make([][256]uint32, k.gc)
		}
		var bits [256]uint32
		for cb := range k.gc {
			s := k.scaleAt(b, r, cb*k.bw)
			if k.recipe == recipeF32 { // the common recipe, without bits' dispatch
				for code, v := range k.f.Table() {
					bits[code] = outBits(mul32(v, s), k.out)
				}
			} else {
				for code := range bits {
					bits[code] = k.bits(byte(code), s)
				}
			}
			if t.t16 != nil {
				for code, v := range bits {
					t.t16[cb][code] = uint16(v)
				}
			} else {
				t.t32[cb] = bits
			}
		}
	})
	return t
}

func (k *fp8Kernel) grain() int64 { return k.cols }

// scaleAt returns the scale of element (r, c) of matrix b.
func (k *fp8Kernel) scaleAt(b, r, c int64) float32 {
	i := (r/k.bh)*k.gc + c/k.bw
	if !k.shared {
		i += b * k.gr * k.gc
	}
	return k.s[i]
}

// bits is the recipe's output for one code and its scale.
func (k *fp8Kernel) bits(code byte, s float32) uint32 {
	v := k.f.Decode(code)
	switch k.recipe {
	case recipeInScale: // S(S(v)·s) in the scale's dtype, then cast to T
		d := k.scale.DType
		y := roundTo(mul32(roundTo(v, d), s), d)
		if d == statedict.Float16 && k.out == statedict.BFloat16 {
			return uint32(codec.BF16Scalar(y)) // torch casts float16 → bfloat16 with the scalar conversion
		}
		return outBits(y, k.out)
	case recipeInTarget: // T(T(v)·T(s)), s already rounded to T
		return outBits(roundTo(mul32(roundTo(v, k.out), s), k.out), k.out)
	}
	return outBits(mul32(v, s), k.out)
}

func (k *fp8Kernel) fill(dst []byte, e0, e1 int64) error {
	es := int64(k.out.Size())
	var buf []byte
	for e := e0; e < e1; {
		row := e / k.cols
		c0 := e - row*k.cols
		c1 := min(k.cols, c0+e1-e)
		b, r := row/k.rows, row%k.rows
		src, err := k.codes.read(row*k.cols+c0, c1-c0, &buf)
		if err != nil {
			return err
		}
		out := dst[(e-e0)*es : (e-e0+c1-c0)*es]
		if !k.lut {
			for i, code := range src {
				v := k.bits(code, k.scaleAt(b, r, c0+int64(i)))
				if es == 2 {
					binary.LittleEndian.PutUint16(out[2*i:], uint16(v))
				} else {
					binary.LittleEndian.PutUint32(out[4*i:], v)
				}
			}
			e += c1 - c0
			continue
		}
		tabs := k.rowTables(b, r)
		for c := c0; c < c1; {
			cb := c / k.bw
			ce := min(c1, (cb+1)*k.bw)
			seg, o := src[c-c0:ce-c0], out[(c-c0)*es:(ce-c0)*es]
			if es == 2 {
				lut16(o, seg, &tabs.t16[cb])
			} else {
				lut32(o, seg, &tabs.t32[cb])
			}
			c = ce
		}
		e += c1 - c0
	}
	return nil
}

// lut16 maps every code of src through t into 16-bit little-endian dst.
func lut16(dst, src []byte, t *[256]uint16) {
	for len(src) >= 8 && len(dst) >= 16 {
		v := binary.LittleEndian.Uint64(src)
		binary.LittleEndian.PutUint64(dst, uint64(t[byte(v)])|uint64(t[byte(v>>8)])<<16|
			uint64(t[byte(v>>16)])<<32|uint64(t[byte(v>>24)])<<48)
		binary.LittleEndian.PutUint64(dst[8:], uint64(t[byte(v>>32)])|uint64(t[byte(v>>40)])<<16|
			uint64(t[byte(v>>48)])<<32|uint64(t[byte(v>>56)])<<48)
		src, dst = src[8:], dst[16:]
	}
	for i, c := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], t[c])
	}
}

// lut32 maps every code of src through t into 32-bit little-endian dst.
func lut32(dst, src []byte, t *[256]uint32) {
	for len(src) >= 8 && len(dst) >= 32 {
		v := binary.LittleEndian.Uint64(src)
		binary.LittleEndian.PutUint64(dst, uint64(t[byte(v)])|uint64(t[byte(v>>8)])<<32)
		binary.LittleEndian.PutUint64(dst[8:], uint64(t[byte(v>>16)])|uint64(t[byte(v>>24)])<<32)
		binary.LittleEndian.PutUint64(dst[16:], uint64(t[byte(v>>32)])|uint64(t[byte(v>>40)])<<32)
		binary.LittleEndian.PutUint64(dst[24:], uint64(t[byte(v>>48)])|uint64(t[byte(v>>56)])<<32)
		src, dst = src[8:], dst[32:]
	}
	for i, c := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], t[c])
	}
}
