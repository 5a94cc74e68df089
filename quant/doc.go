// Package quant understands the quantized checkpoints of the Hugging Face ecosystem and
// dequantizes them bit-exactly as their reference implementations do. The element codecs
// it builds on (FP8, FP4, bfloat16, float16) are package codec's.
//
// [LoadConfig] reads a Hugging Face folder's quantization config (config.json
// quantization_config, ModelOpt's hf_quant_config.json) and [Detect] finds the
// quantized groups — codes plus scales — of DeepSeek-style block FP8 and
// transformers' fine-grained FP8, fbgemm_fp8, compressed-tensors FP8 and NVFP4,
// ModelOpt FP8 and NVFP4, and gpt-oss MXFP4, with the names and shapes transformers
// gives the tensors after loading. [Group.Dequantize] returns a group's logical
// tensor as a lazy storage that computes bytes on demand, bit for bit as the
// reference dequantizer of its producer does (quant.md §4: the exact order of float32
// products, divisions and roundings, partial edge blocks as DeepSeek's kernel masks
// them, FP4 nibble 8 as −0 or, for ModelOpt NVFP4, +0).
//
// NaN codes (float8 0x7F/0xFF, e5m2 NaNs, e8m0 0xFF) make NaN bits depend on the
// torch kernel path. The policy, checked against the references in torch 2.14:
//
//   - A product or quotient propagates the NaN of its first operand (the code before
//     the scale, the scale before the global scale), quieted, else the other's: x86's
//     rule, which torch's vectorized kernels follow.
//   - A bfloat16 result rounded from float32 is 0xFFFF, as torch's vectorized loops
//     write it. torch's scalar loop, which takes the trailing elements of a run too
//     short for a vector, writes 0x7FC0 there and keeps the second operand's NaN; ckpt
//     follows the vectorized kernel everywhere (testdata/quantized/gen.py evaluates
//     the references so that every element takes it).
//   - compressed-tensors NVFP4 with a 0-dim global scale computes in bfloat16 on
//     16-value groups, which torch always runs in its scalar loop: 0x7FC0.
//   - A float16 result cast to bfloat16 (compressed-tensors float16 scales, bfloat16
//     output) goes through torch's scalar conversion: 0x7FC0.
//   - MXFP4 has no NaN: transformers applies scale byte 0xFF with an exact ldexp by
//     2^128 (±inf, or ±2^127 for ±0.5). Scales stored as float8_e8m0fnu rather than
//     gpt-oss's uint8 are read as exponent bytes too.
package quant
