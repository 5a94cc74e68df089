// Package verify proves that a converted checkpoint is what it should be. It is a sink: it
// reads outputs through formats and is never imported by the packages that convert.
//
//   - Check compares an output with the manifest its conversion wrote (every tensor present,
//     with its dtype, shape, size and xxhash64): is this copy intact?
//   - Parity compares an output with the checkpoint it was converted from, tensor by tensor:
//     every source tensor paired with its counterpart through the conversion's renames,
//     prefix stripping and tie de-duplication, its dtype and shape checked, its value
//     compared bit for bit with the source's or with exactly what the conversion's cast
//     (codec.CastStorage, torch's rounding) or dequantization (quant.Group.Dequantize, the
//     reference dequantizers) gives — and non-tensor values where the output holds a tree.
//     The conversion's options come from the output's manifest (its recorded command line);
//     without one, casts and dequantization are inferred from the output. Any two formats
//     compare: a sharded output is read as the tensors its reader reassembles.
//   - Forward runs the source model in float32 and the converted one as a TPU computes (see
//     package forward) on the same tokens and compares the logits of every position (max and
//     mean absolute error, cosine similarity, KL divergence, top-1 agreement) against
//     thresholds measured on correct and deliberately broken conversions, a block of
//     positions at a time. For a model whose family package forward lacks it returns a
//     NoFamilyError.
//   - EmitTorch writes a self-contained Python check with the reference logits, to run the
//     converted checkpoint on the TPU itself with torch_tpu and transformers — or, for a model
//     package forward lacks, a check that computes both sides with transformers.
//
// Every failed verification's error matches ErrFailed (`ckpt` exits 5).
package verify
