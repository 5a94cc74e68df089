package quant

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Both FP4 schemes give every element as a pure function of two bytes: its
// block's scale code and its own nibble. The kernels tabulate that function once
// (256 × 16 outputs, computed with the recipe's exact scalar arithmetic) and
// dequantize by lookup.
type fp4Table = [256][16]uint32

// mxfp4Tables holds, per output dtype, T(ldexp(v, e−127)) for every E8M0 byte e
// and nibble v: transformers' convert_moe_packed_tensors looks v up in a table of
// dtype T and applies torch.ldexp, which in torch 2.14 is exact — one rounding of
// v·2^(e−127) to T, so 0xFF gives 2^128·v (±inf, or 2^127 for ±0.5) and 0x00
// gives subnormals (P5). The product is exact in float64 and in float32 (or
// overflows to inf in both), so rounding the float32 to T rounds once.
var mxfp4Tables = map[statedict.DType]func() *fp4Table{
	statedict.BFloat16: sync.OnceValue(func() *fp4Table { return buildMXFP4(statedict.BFloat16) }),
	statedict.Float16:  sync.OnceValue(func() *fp4Table { return buildMXFP4(statedict.Float16) }),
	statedict.Float32:  sync.OnceValue(func() *fp4Table { return buildMXFP4(statedict.Float32) }),
}

func mxfp4Table(out statedict.DType) *fp4Table { return mxfp4Tables[out]() }

func buildMXFP4(out statedict.DType) *fp4Table {
	t := new(fp4Table)
	for e, row := range codec.MXFP4() {
		for n, v := range row {
			t[e][n] = outBits(v, out)
		}
	}
	return t
}

// mxfp4Kernel dequantizes gpt-oss MXFP4 experts: blocks [E, out, G, 16] bytes
// (element 2j of a block in the low nibble of byte j) and scales [E, out, G]
// become [E, in = G·32, out], transposed as transformers' convert_moe_packed_tensors
// returns them.
type mxfp4Kernel struct {
	blocks, scales *codes
	in, outF, es   int64
	tab16          *[256][16]uint16 // the table narrowed, for 2-byte outputs
	tab32          *fp4Table
}

func (k *mxfp4Kernel) prepare() error {
	if k.es == 2 {
		k.tab16 = new([256][16]uint16)
		for e := range k.tab32 {
			for n, v := range k.tab32[e] {
				k.tab16[e][n] = uint16(v)
			}
		}
	}
	return nil
}

// grain is one 32-row tile of an expert: the rows one byte column of the blocks
// feeds.
func (k *mxfp4Kernel) grain() int64 { return 32 * k.outF }

func (k *mxfp4Kernel) fill(dst []byte, e0, e1 int64) error {
	for e := e0; e < e1; {
		row := e / k.outF // expert·in + i
		o0 := e - row*k.outF
		var rows, o1 int64
		if o0 != 0 || e1-e < k.outF {
			rows, o1 = 1, min(k.outF, o0+e1-e)
		} else {
			rows, o1 = min((e1-e)/k.outF, (row/k.in+1)*k.in-row), k.outF
		}
		var err error
		if k.es == 2 {
			err = mxfp4Rect(k, k.tab16, dst[(e-e0)*k.es:], row, rows, o0, o1)
		} else {
			err = mxfp4Rect(k, k.tab32, dst[(e-e0)*k.es:], row, rows, o0, o1)
		}
		if err != nil {
			return err
		}
		e += (rows-1)*k.outF + o1 - o0
	}
	return nil
}

// The transpose goes through a column-major tile of tileRows × tileCols output
// elements: each output column (one output feature, 32 rows per block of the
// stored row) is decoded into it contiguously, then the tile's rows are written to
// the destination contiguously. Both passes stream; only the tile, which stays in
// the L1 cache, is accessed across.
const (
	tileRows = 32
	tileCols = 128
)

// mxfp4Rect writes output rows [row, row+rows) of one expert, columns [o0, o1), into
// dst (row length o1−o0), with tab giving each element's output bits.
func mxfp4Rect[T uint16 | uint32](k *mxfp4Kernel, tab *[256][16]T, dst []byte, row, rows, o0, o1 int64) error {
	ex, i0 := row/k.in, row%k.in
	w := o1 - o0
	groups := k.in / 32
	var bbuf, sbuf []byte
	var tile [tileCols * tileRows]T
	for a := i0; a < i0+rows; a += tileRows {
		b := min(a+tileRows, i0+rows)
		g0, g1 := a/32, (b-1)/32+1
		for oc := o0; oc < o1; oc += tileCols {
			n := min(oc+tileCols, o1) - oc
			for c := range n {
				base := (ex*k.outF + oc + c) * groups
				bs, err := k.blocks.read((base+g0)*16, (g1-g0)*16, &bbuf)
				if err != nil {
					return err
				}
				ss, err := k.scales.read(base+g0, g1-g0, &sbuf)
				if err != nil {
					return err
				}
				decodeColumn(tile[c*tileRows:(c+1)*tileRows], bs, ss, a-g0*32, b-g0*32, tab)
			}
			for r := range b - a {
				writeRow(dst[((a-i0+r)*w+oc-o0)*k.es:][:n*k.es], tile[r:], k.es)
			}
		}
	}
	return nil
}

// writeRow writes row r of a column-major tile (col[c·tileRows] is column c's
// element; the tile starts at the row) as len(out)/es little-endian elements, eight
// bytes per store.
func writeRow[T uint16 | uint32](out []byte, col []T, es int64) {
	n := int64(len(out)) / es
	c := int64(0)
	if es == 2 {
		for ; c+4 <= n; c += 4 {
			binary.LittleEndian.PutUint64(out[2*c:], uint64(col[c*tileRows])|uint64(col[(c+1)*tileRows])<<16|
				uint64(col[(c+2)*tileRows])<<32|uint64(col[(c+3)*tileRows])<<48)
		}
		for ; c < n; c++ {
			binary.LittleEndian.PutUint16(out[2*c:], uint16(col[c*tileRows]))
		}
		return
	}
	for ; c+2 <= n; c += 2 {
		binary.LittleEndian.PutUint64(out[4*c:], uint64(col[c*tileRows])|uint64(col[(c+1)*tileRows])<<32)
	}
	if c < n {
		binary.LittleEndian.PutUint32(out[4*c:], uint32(col[c*tileRows]))
	}
}

// decodeColumn writes elements [i, end) of the blocks bs (scales ss) into col: a
// byte's two nibbles are consecutive elements, low first.
func decodeColumn[T uint16 | uint32](col []T, bs, ss []byte, i, end int64, tab *[256][16]T) {
	r := 0
	if i&1 == 1 {
		col[r] = tab[ss[i>>5]][bs[i>>1]>>4]
		r++
		i++
	}
	for ; i+1 < end; i += 2 {
		c, t := bs[i>>1], &tab[ss[i>>5]]
		col[r], col[r+1] = t[c&15], t[c>>4]
		r += 2
	}
	if i < end {
		col[r] = tab[ss[i>>5]][bs[i>>1]&15]
	}
}

// nvfp4Kernel dequantizes NVFP4 codes [.., rows, cols/2] (element 2j in the low
// nibble of byte j) with float8_e4m3fn scales [.., rows, cols/16] and a float32
// global scale, row-major in and out.
type nvfp4Kernel struct {
	codes, scales *codes
	global        *statedict.Tensor
	globalName    string
	cols          int64
	recipe        recipe
	out           statedict.DType

	tab *fp4Table // set by prepare: output bits by scale code and nibble
}

// prepare reads the global scale and tabulates the recipe:
//
//	ModelOpt (R12):      p = f32(f32(s)·ws2),        y = T(f32(v·p)), nibble 8 = +0
//	compressed-tensors:  q = f32(bf16(s)/g),         y = T(f32(v·q)), nibble 8 = −0
//	  with 0-dim g (P7): q = bf16(bf16(s)/g),        y = T(bf16(v·q))
//
// bf16(s) is torch's scalar float8 → bfloat16 conversion (NaN → 0x7FC0). With a
// 0-dim g, torch multiplies each 16-value group by its broadcast scale in its
// scalar loop (groups are shorter than a vector), so NaN results are 0x7FC0 too.
func (k *nvfp4Kernel) prepare() error {
	g, err := scaleValues(k.globalName, k.global)
	if err != nil {
		return err
	}
	if len(g) != 1 {
		return fmt.Errorf("%s: %w: %d global scales", k.globalName, ckpterr.ErrCorrupt, len(g))
	}
	k.tab = new(fp4Table)
	for s := range 256 {
		var p float32
		switch k.recipe {
		case recipeNVFP4ModelOpt:
			p = mul32(codec.E4M3FN.Decode(byte(s)), g[0])
		case recipeNVFP4CT:
			p = div32(codec.BF16ToFloat32(codec.E4M3FN.DecodeBF16(byte(s))), g[0])
		case recipeNVFP4CTScalar:
			p = codec.BF16ToFloat32(codec.BF16Scalar(div32(codec.BF16ToFloat32(codec.E4M3FN.DecodeBF16(byte(s))), g[0])))
		}
		for n := range 16 {
			v := codec.FP4ToFloat32(byte(n))
			switch k.recipe {
			case recipeNVFP4ModelOpt:
				if n == 8 {
					v = 0 // ModelOpt's e2m1 table holds +0 at index 8
				}
				k.tab[s][n] = outBits(mul32(v, p), k.out)
			case recipeNVFP4CT:
				k.tab[s][n] = outBits(mul32(v, p), k.out)
			case recipeNVFP4CTScalar:
				y := codec.BF16Scalar(mul32(v, p)) // a bfloat16 result: T = bfloat16 keeps its bits
				k.tab[s][n] = uint32(y)
				if k.out != statedict.BFloat16 {
					k.tab[s][n] = outBits(codec.BF16ToFloat32(y), k.out)
				}
			}
		}
	}
	return nil
}

func (k *nvfp4Kernel) grain() int64 { return k.cols }

func (k *nvfp4Kernel) fill(dst []byte, e0, e1 int64) error {
	es := int64(k.out.Size())
	var bbuf, sbuf []byte
	for e := e0; e < e1; {
		row := e / k.cols
		c1 := min(k.cols, e-row*k.cols+e1-e)
		end := row*k.cols + c1 // elements [e, end) of this row
		bs, err := k.codes.read(e/2, (end+1)/2-e/2, &bbuf)
		if err != nil {
			return err
		}
		ss, err := k.scales.read(e/16, (end+15)/16-e/16, &sbuf)
		if err != nil {
			return err
		}
		out := dst[(e-e0)*es : (end-e0)*es]
		b0, s0 := e/2, e/16
		i := e
		// Whole groups of 16 elements go 8 bytes at a time.
		for ; i < end && (i%16 != 0 || end-i < 16); i++ {
			k.put(out[(i-e)*es:], k.tab[ss[i/16-s0]][bs[i/2-b0]>>((i&1)*4)&15], es)
		}
		for ; end-i >= 16; i += 16 {
			t := &k.tab[ss[i/16-s0]]
			grp := bs[i/2-b0 : i/2-b0+8]
			o := out[(i-e)*es:]
			for j, c := range grp {
				k.put(o[int64(2*j)*es:], t[c&15], es)
				k.put(o[int64(2*j+1)*es:], t[c>>4], es)
			}
		}
		for ; i < end; i++ {
			k.put(out[(i-e)*es:], k.tab[ss[i/16-s0]][bs[i/2-b0]>>((i&1)*4)&15], es)
		}
		e = end
	}
	return nil
}

// put stores one output element of es bytes.
func (k *nvfp4Kernel) put(dst []byte, v uint32, es int64) {
	if es == 2 {
		binary.LittleEndian.PutUint16(dst, uint16(v))
	} else {
		binary.LittleEndian.PutUint32(dst, v)
	}
}
