package codec

import "math"

// BF16NaN is the bfloat16 that torch's vectorized CPU cast float32 → bfloat16
// (AVX2/AVX512 Tensor.to and copy_, the path of any real tensor) writes for every
// NaN, whatever its sign or payload. torch's scalar conversion (c10::BFloat16,
// used by torch.tensor(nan, dtype=torch.bfloat16), by casts from float8 and under
// ATEN_CPU_CAPABILITY=default) writes 0x7FC0 instead.
const BF16NaN = 0xFFFF

// Float32ToBF16 rounds x to bfloat16 bits as torch's vectorized CPU cast does:
// round to nearest even on the float32 bits (subnormals kept, overflow carries
// into ±inf), every NaN becoming [BF16NaN].
func Float32ToBF16(x float32) uint16 {
	u := math.Float32bits(x)
	nan := (0x7F800000 - u&0x7FFFFFFF) >> 31 // 1 iff NaN; keeps the loop branch-free
	return uint16((u+0x7FFF+(u>>16)&1)>>16 | -nan)
}

// BF16Scalar is torch's scalar c10::BFloat16 rounding: as Float32ToBF16, but NaN
// gives 0x7FC0.
func BF16Scalar(x float32) uint16 {
	if x != x {
		return 0x7FC0
	}
	return Float32ToBF16(x)
}

// BF16ToFloat32 widens bfloat16 bits to float32 exactly, as torch does: the bits
// become the top half of the float32, so NaN payloads (signalling ones too) and
// the sign survive.
func BF16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// Float32ToF16 rounds x to IEEE binary16 bits as torch's CPU cast does (the F16C
// instruction vcvtps2ph on x86): round to nearest even, |x| ≥ 65520 → ±inf,
// subnormal results kept; a NaN keeps its sign and the top 10 payload bits, with
// the quiet bit forced (so 0x7F800001 → 0x7E00, 0x7FBFFFFF → 0x7FFF).
func Float32ToF16(x float32) uint16 {
	u := math.Float32bits(x)
	if f16NormalResult(u) {
		return f16Normal(u)
	}
	return f16Rare(u)
}

// f16NormalResult reports whether float32 bits u round to a normal binary16:
// 2^-14 ≤ |x| < 65520.
func f16NormalResult(u uint32) bool {
	return u&0x7FFFFFFF-0x38800000 < 0x477FF000-0x38800000
}

// f16Normal rounds float32 bits u with a normal binary16 result: rebias the
// exponent and round at bit 13 (a carry moves into the exponent).
func f16Normal(u uint32) uint16 {
	a := u&0x7FFFFFFF - (127-15)<<23
	return uint16(u>>16)&0x8000 | uint16((a+0xFFF+(a>>13)&1)>>13)
}

// f16Rare is Float32ToF16 for NaN, overflow and results below the normals.
func f16Rare(u uint32) uint16 {
	sign := uint16(u>>16) & 0x8000
	switch a := u & 0x7FFFFFFF; {
	case a > 0x7F800000: // NaN
		return sign | 0x7E00 | uint16(a>>13)&0x3FF
	case a >= 0x477FF000: // ≥ 65520 (the tie above 65504) and inf
		return sign | 0x7C00
	default: // subnormal or zero: 0.5 + |x| rounds |x| to a multiple of 2^-24
		return sign | uint16(math.Float32bits(math.Float32frombits(a)+0.5)-0x3F000000)
	}
}

// F16ToFloat32 widens IEEE binary16 bits to float32 exactly, as torch's CPU cast
// does (vcvtph2ps on x86): a NaN keeps its sign and payload and gets the quiet bit
// (0x7C01 → 0x7FC02000).
func F16ToFloat32(h uint16) float32 {
	if f16IsNormal(h) {
		return f16NormalToFloat32(h)
	}
	return f16Special(h)
}

// f16IsNormal reports whether h is a normal binary16 (exponent neither 0 nor 31).
func f16IsNormal(h uint16) bool {
	return h&0x7C00-0x400 < 0x7800
}

// f16NormalToFloat32 widens a normal binary16 by rebiasing its exponent.
func f16NormalToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h&0x8000)<<16 | (uint32(h&0x7FFF)<<13 + (127-15)<<23))
}

// f16Special is F16ToFloat32 for zeros, subnormals, infinities and NaNs.
func f16Special(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	m := uint32(h & 0x3FF)
	if h&0x7C00 == 0 { // zero or subnormal: m · 2^-24, exact
		return math.Float32frombits(sign | math.Float32bits(float32(m)*0x1p-24))
	}
	if m != 0 { // NaN: quiet it
		m |= 0x200
	}
	return math.Float32frombits(sign | 0x7F800000 | m<<13)
}
