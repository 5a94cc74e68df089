package codec

import (
	"fmt"
	"math"
)

// Format is one of torch's 8-bit floating-point element formats. The zero value is
// E4M3FN. Use it to decode or encode single elements ([Format.Decode],
// [Format.Encode]) or whole buffers ([DecodeFP8], [EncodeFP8], [DecodeFP8ToBF16]).
// Only the constants below are valid; the conversions panic on other values.
type Format uint8

// The 8-bit formats, named after torch's dtypes. The variant must come from the
// stored dtype (safetensors F8_E4M3 vs F8_E4M3FNUZ, …), never be guessed from the
// data: the same byte means different values in different formats.
const (
	// E4M3FN is torch.float8_e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa
	// bits; no infinities, 0x7F/0xFF are NaN, max 448, −0 exists.
	E4M3FN Format = iota
	// E5M2 is torch.float8_e5m2: the top byte of an IEEE binary16 (bias 15);
	// ±inf and NaNs as in IEEE, max 57344.
	E5M2
	// E4M3FNUZ is torch.float8_e4m3fnuz: like E4M3FN with bias 8; 0x80 is the only
	// NaN, no −0, no infinities, max 240.
	E4M3FNUZ
	// E5M2FNUZ is torch.float8_e5m2fnuz: like E5M2 with bias 16; 0x80 is the only
	// NaN, no −0, no infinities, max 57344.
	E5M2FNUZ
	// E8M0FNU is torch.float8_e8m0fnu, the OCP MX scale format: an unsigned
	// biased exponent (bias 127), value 2^(b−127); 0xFF is NaN, no zero.
	E8M0FNU
	numFormats
)

// layout is the definition of an 8-bit format from which its tables and its
// encoder are derived.
type layout struct {
	name  string
	mbits uint   // mantissa bits
	bias  int    // exponent bias
	kind  fpKind // how the format spends its special codes

	// Derived by init for the encoder (not used for E8M0FNU).
	minNormal uint32 // float32 bits of the smallest normal, 2^(1−bias)
	magic     uint32 // float32 bits of 2^k whose ulp is the smallest subnormal
	rebias    uint32 // subtracted from float32 bits to move to the format's bias
	shift     uint32 // float32 mantissa bits dropped
	maxCode   uint32 // largest magnitude code kept as rounded
	overflow  uint32 // magnitude code for results beyond maxCode
}

// fpKind says how a format uses its special codes.
type fpKind uint8

const (
	kindFN   fpKind = iota // all-ones magnitude (0x7F) is NaN; the rest of the top binade is finite
	kindIEEE               // all-ones exponent: infinity (mantissa 0) or NaN
	kindFNUZ               // 0x80 (negative zero's code) is the only NaN; no −0, no inf
	kindE8M0               // unsigned exponent only; 0xFF is NaN
)

var layouts = [numFormats]layout{
	E4M3FN:   {name: "float8_e4m3fn", mbits: 3, bias: 7, kind: kindFN},
	E5M2:     {name: "float8_e5m2", mbits: 2, bias: 15, kind: kindIEEE},
	E4M3FNUZ: {name: "float8_e4m3fnuz", mbits: 3, bias: 8, kind: kindFNUZ},
	E5M2FNUZ: {name: "float8_e5m2fnuz", mbits: 2, bias: 16, kind: kindFNUZ},
	E8M0FNU:  {name: "float8_e8m0fnu", mbits: 0, bias: 127, kind: kindE8M0},
}

// fnuzNaN is the float32 torch returns for the NaN code of the fnuz formats and of
// E8M0FNU (a signalling NaN with payload 1).
const fnuzNaN = 0x7F800001

// String returns torch's dtype name without the "torch." prefix, e.g.
// "float8_e4m3fn".
func (f Format) String() string {
	if f < numFormats {
		return layouts[f].name
	}
	return fmt.Sprintf("codec.Format(%d)", uint8(f))
}

// Lookup tables built once from layouts: fp8ToF32 is what torch's
// u8.view(dtype).float() gives, fp8ToBF16 what u8.view(dtype).to(torch.bfloat16)
// gives.
var (
	fp8ToF32  [numFormats][256]float32
	fp8ToBF16 [numFormats][256]uint16
)

func init() {
	for f := range numFormats {
		l := &layouts[f]
		l.minNormal = uint32(128-l.bias) << 23
		l.magic = uint32(127+24-l.bias-int(l.mbits)) << 23
		l.rebias = uint32(127-l.bias) << 23
		l.shift = 23 - uint32(l.mbits)
		switch l.kind {
		case kindFN: // saturate at 0x7E (448)
			l.maxCode, l.overflow = 0x7E, 0x7E
		case kindIEEE: // 0x7C is inf
			l.maxCode, l.overflow = 0x7C, 0x7C
		case kindFNUZ: // beyond 0x7F: the NaN code
			l.maxCode, l.overflow = 0x7F, 0x80
		}
		for b := range 256 {
			v := l.decode(uint8(b))
			fp8ToF32[f][b] = v
			fp8ToBF16[f][b] = BF16Scalar(v)
		}
	}
}

// decode computes the float32 value of code b from the format definition. Every
// finite value is exact in float32. NaN bits follow torch: the IEEE-like formats
// widen the NaN code like any other (sign and mantissa shifted into place) and set
// the float32 quiet bit; the fnuz formats and E8M0 return fnuzNaN.
func (l *layout) decode(b uint8) float32 {
	if l.kind == kindE8M0 {
		if b == 0xFF {
			return math.Float32frombits(fnuzNaN)
		}
		return float32(math.Ldexp(1, int(b)-l.bias))
	}
	ebits := 7 - l.mbits
	sign := uint32(b>>7) << 31
	e := int(b>>l.mbits) & (1<<ebits - 1)
	m := uint32(b) & (1<<l.mbits - 1)
	topExp := e == 1<<ebits-1
	switch {
	case l.kind == kindFNUZ && b == 0x80:
		return math.Float32frombits(fnuzNaN)
	case l.kind == kindIEEE && topExp && m == 0:
		return math.Float32frombits(sign | 0x7F800000)
	case l.kind == kindIEEE && topExp, l.kind == kindFN && b&0x7F == 0x7F:
		return math.Float32frombits(sign | 0x7FC00000 | m<<(23-l.mbits))
	}
	var v float64
	if e == 0 {
		v = math.Ldexp(float64(m), 1-l.bias-int(l.mbits))
	} else {
		v = math.Ldexp(float64(1<<l.mbits|m), e-l.bias-int(l.mbits))
	}
	return math.Float32frombits(sign | math.Float32bits(float32(v)))
}

// Decode returns the float32 value of the code b, exactly as torch's
// u8.view(dtype).float() gives it, NaN bits included: E4M3FN and E5M2 shift the
// code's sign and mantissa into a quiet float32 NaN (0x7F → 0x7FF00000, 0x7D →
// 0x7FE00000), the fnuz formats and E8M0FNU give 0x7F800001.
func (f Format) Decode(b byte) float32 {
	return fp8ToF32[f][b]
}

// DecodeBF16 returns the bfloat16 bits of the code b as torch's u8.view(dtype).to(bfloat16)
// gives them.
func (f Format) DecodeBF16(b byte) uint16 {
	return fp8ToBF16[f][b]
}

// Table is Decode for all 256 codes, for kernels that build tables from it.
func (f Format) Table() *[256]float32 { return &fp8ToF32[f] }

// Encode rounds x to the nearest code of the format, ties to even, as torch
// 2.14's CPU cast float32 → dtype does (Tensor.to and torch.tensor(…, dtype=)).
// Out-of-range inputs follow torch, which differs per format:
//
//   - E4M3FN saturates: |x| ≥ 464 (which would round past 448) and ±inf give
//     ±448 (0x7E/0xFE); NaN gives 0x7F, or 0xFF when its sign bit is set.
//   - E5M2 overflows to infinity: |x| ≥ 61440 (rounds past 57344) and ±inf give
//     ±inf (0x7C/0xFC); NaN gives 0x7F/0xFF by sign.
//   - E4M3FNUZ and E5M2FNUZ have no infinity: |x| ≥ 248 resp. ≥ 61440, ±inf and
//     NaN all give the NaN code 0x80; results that round to zero give 0x00
//     (there is no −0).
//   - E8M0FNU ignores the sign and applies torch's guard/round/sticky rounding
//     to the float32 bits: a normal |x| goes to the nearest power of two, an
//     exact tie 1.5·2^k rounding up; float32 subnormals and ±0 give 0x00
//     (2^-127) or 0x01 (above 2^-127 only); ±inf, NaN and |x| rounding past
//     2^127 give 0xFF (NaN).
//
// torch's producers clamp to the format's finite range before casting, so stored
// checkpoints do not depend on these rules; re-quantization does.
func (f Format) Encode(x float32) byte {
	if f == E8M0FNU {
		return encodeE8M0(math.Float32bits(x))
	}
	return layouts[f].encode(math.Float32bits(x))
}

// encode rounds the float32 bits u to a code of a signed format (not E8M0FNU).
func (l *layout) encode(u uint32) byte {
	sign := uint8(u>>24) & 0x80
	a := u & 0x7FFFFFFF
	if a > 0x7F800000 { // NaN
		if l.kind == kindFNUZ {
			return 0x80
		}
		return sign | 0x7F
	}
	var c uint32 // the rounded magnitude code
	if a < l.minNormal {
		// Below the format's normals: adding 2^k, whose float32 ulp is the format's
		// smallest subnormal, rounds |x| to a multiple of it (float32 addition is
		// RNE); the low bits are then the code. A carry yields the smallest normal.
		c = math.Float32bits(math.Float32frombits(a)+math.Float32frombits(l.magic)) - l.magic
	} else {
		// Rebias the exponent, then round the mantissa at the format's width; a
		// carry propagates into the exponent as it should.
		a -= l.rebias
		c = (a + 1<<(l.shift-1) - 1 + (a>>l.shift)&1) >> l.shift
	}
	if c > l.maxCode {
		c = l.overflow
	}
	if l.kind == kindFNUZ && (c == 0 || c == 0x80) {
		return uint8(c) // no −0; the NaN code has no sign
	}
	return sign | uint8(c)
}

// encodeE8M0 is torch's fp8e8m0fnu_from_fp32_value: keep the float32 biased
// exponent and add one when the guard bit (bit 22) is set and either a lower bit
// is set or the implicit leading bit is 1 (a normal input). Branch-free: the guard
// bit is random in real data.
func encodeE8M0(u uint32) byte {
	exp := u >> 23 & 0xFF
	guard := u >> 22 & 1
	lower := (u&0x3FFFFF + 0x3FFFFF) >> 22 // 1 iff any of bits 21..0 is set
	normal := (exp + 0xFF) >> 8            // 1 iff exp > 0
	r := exp + guard&(lower|normal)
	if r > 0xFF { // inf/NaN in, or 2^127 rounded up: NaN, as torch
		r = 0xFF
	}
	return byte(r)
}
