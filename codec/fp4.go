package codec

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
