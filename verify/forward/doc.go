// Package forward runs the forward pass of a decoder-only language model in Go, straight
// from a checkpoint in any format ckpt reads: it takes config.json and the weights of a
// checkpoint opened with formats.Open and produces float32 logits [T, vocab] for a sequence
// of token ids, following transformers 5.12's modeling code (eager attention). It is what
// the user-facing `ckpt forward` and the verification forward of `ckpt verify --forward`
// run.
//
// A model is described as data: a Config (arch.go) composes the variants the transformers
// families differ by — norms and their placement, the residual topology, how attention
// projects, positions, masks and scales, the feed-forward block, how a mixture of experts
// routes, or a selective state-space mixer (Mamba) in place of attention — and names every
// weight. A family (families.go, family_*.go) builds the Config of its model_type from
// config.json, with its config class's defaults as transformers declares them
// (defaults.json, generated from transformers); the loader (load.go) and the forward pass
// (forward.go, attention.go, mlp.go, ssm.go) interpret any Config and know no family by
// name. Supported lists the model types; docs/verify.md has the table of families and their
// error against transformers.
//
// Two precisions: [Float32] widens every weight exactly and computes in float32, matching
// transformers' float32 forward to about 1e-6 on the test models; [TPU] rounds the inputs of
// every matrix product to bfloat16 and accumulates in float32, as a TPU's matrix unit does
// at default precision. The element codecs (bfloat16, float16, FP8 via package quant, the
// MXFP4 table) are package codec's.
//
// Weights are never copied into a float32 model: bfloat16 and float32 matrices are used in
// place in the checkpoint's memory mapping, anything else (float16, strided or transposed
// views, FP8 dequantized lazily by package quant, MXFP4 blocks) is decoded a tile of rows
// at a time into a small scratch buffer. Each matrix product splits its output features
// across GOMAXPROCS goroutines, running the SIMD kernels of package kernel. Layers run one
// after another and release the mapped pages they touched, so resident memory stays near
// one layer's weights plus the activations.
//
// Work is bounded for long sequences: attention runs a block of queries against a block of
// keys at a time (exact eager softmax within one block of keys, an online softmax across
// blocks), feed-forward blocks, projections and state-space mixers a block of positions at
// a time (a mixer carries its convolution inputs and state from one block to the next), and
// logits are computed a block of positions at a time from the final hidden states (Run, States);
// what a run must hold per position is estimated first and a sequence beyond
// Options.MemoryLimit is refused before anything is allocated.
package forward
