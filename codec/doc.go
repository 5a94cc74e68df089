// Package codec converts the element formats of quantized PyTorch checkpoints
// bit-exactly as torch 2.14 does: the five 8-bit float formats (float8_e4m3fn,
// float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu), packed FP4 E2M1
// (float4_e2m1fn_x2), bfloat16 and float16.
//
// Decoding widens to float32 exactly, including torch's NaN bit patterns; encoding
// rounds to nearest, ties to even, with each format's overflow rule as torch's
// CPU casts apply it (see [Format.Encode]). Scalar functions convert one element;
// the Decode*/Encode* slice kernels convert whole buffers of little-endian bytes
// without allocating and are the inner loops of dequantization.
//
// Ground truth is torch itself: testdata/quant holds tables written by
// testdata/quant/gen.py in the oracle chroot, and the tests compare every entry
// (and CRCs of all 2^32 float32 inputs per encoder) bit for bit.
//
// [CastStorage] is torch's Tensor.to(dtype) between float16, bfloat16, float32 and
// float64 as a lazy storage: bytes are converted on demand, on every core, with an AVX2
// kernel for float32 → bfloat16 where the CPU has it (bit-identical to torch's, NaNs
// included, as testdata/cast/expected.json records it).
//
// Package quant (Hugging Face quantization layouts and their dequantizers), remap
// (--dtype casts) and the Go forward pass behind `ckpt forward` and `ckpt verify
// --forward` (verify/forward: bfloat16 weights widened, MXFP4 experts decoded, TPU
// rounding) all build on these codecs.
package codec
