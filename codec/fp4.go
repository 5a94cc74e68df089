package codec

import (
	"math"
	"sync"
)

// fp4ToF32 holds the 16 FP4 E2M1 values indexed by nibble, built at init from the
// format definition; fp4x2ToF32 the two values of every packed byte, in element
// order.
var (
	fp4ToF32   [16]float32
	fp4x2ToF32 [256][2]float32
)

func init() {
	for n := range uint8(16) {
		e, m := n>>1&3, float32(n&1)
		v := m * 0.5 // subnormal: m · 2^-1
		if e != 0 {
			v = (1 + m/2) * float32(uint32(1)<<e) / 2 // (1 + m/2) · 2^(e-1)
		}
		if n&8 != 0 {
			v = -v // nibble 8 is −0
		}
		fp4ToF32[n] = v
	}
	for b := range fp4x2ToF32 {
		fp4x2ToF32[b] = [2]float32{fp4ToF32[b&0xF], fp4ToF32[b>>4]}
	}
}

// FP4ToFloat32 returns the value of an FP4 E2M1 element (1 sign, 2 exponent bits
// with bias 1, 1 mantissa bit) held in the low 4 bits of n; the high bits are
// ignored. The values are ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}; there is no NaN or inf.
// Nibble 0x8 is −0, as in torch's reference utility, Hugging Face, gpt-oss,
// compressed-tensors and torchao; ModelOpt NVFP4 and ggml decode it as +0, which
// callers matching them must substitute.
func FP4ToFloat32(n byte) float32 {
	return fp4ToF32[n&0xF]
}

// FP4x2ToFloat32 returns the two FP4 E2M1 values packed in one byte of torch's
// float4_e2m1fn_x2, in element order: the low nibble (bits 3..0) holds the first
// (even-index) element, the high nibble the second. Hugging Face MXFP4,
// compressed-tensors, ModelOpt and vLLM pack the same way; GGUF does not.
func FP4x2ToFloat32(b byte) (first, second float32) {
	return fp4ToF32[b&0xF], fp4ToF32[b>>4]
}

// MXFP4 returns, for every E8M0 scale byte e and FP4 nibble n, the value of an MXFP4
// element, ldexp(fp4(n), e−127), as float32: exact (every FP4 value times a power of two
// is a float32, subnormals included) or ±inf past the float32 range (e = 0xFF with |v| ≥
// 1), as transformers' convert_moe_packed_tensors computes it with torch.ldexp. Scale
// byte 0xFF is used as the power 2^128, not as E8M0's NaN, as that code does.
var MXFP4 = sync.OnceValue(func() *[256][16]float32 {
	t := new([256][16]float32)
	for e := range 256 {
		for n := range 16 {
			t[e][n] = float32(math.Ldexp(float64(fp4ToF32[n]), e-127))
		}
	}
	return t
})

// MXFP4BF16 is MXFP4 as bfloat16 bits: every finite value is a bfloat16 (three
// significant bits at most), so the conversion is exact.
var MXFP4BF16 = sync.OnceValue(func() *[256][16]uint16 {
	t := new([256][16]uint16)
	for e, row := range MXFP4() {
		for n, v := range row {
			t[e][n] = Float32ToBF16(v)
		}
	}
	return t
})
