// Package forward runs the forward pass of a decoder-only language model in Go, straight
// from a checkpoint in any format ckpt reads: it takes config.json and the weights of a
// checkpoint opened with formats.Open and produces float32 logits [T, vocab] for a sequence
// of token ids, following transformers 5.12's modeling code (eager attention) for Llama
// (with linear, dynamic, YaRN, LongRoPE and llama3 RoPE scaling), Mistral, Mixtral, Qwen2,
// Qwen3, Qwen3-MoE, gpt-oss (attention sinks, sliding windows, MXFP4 experts), Gemma 1, 2
// and 3 text models (soft-capping, sandwich norms, local and global RoPE), Phi-3 (fused
// qkv_proj and gate_up_proj, partial rotary, LongRoPE), OLMo 2 (post-norms, q/k norms over
// all heads), Granite (embedding, attention, residual and logit multipliers), StarCoder2
// (LayerNorm with biases, an ungated MLP), StableLM (partial rotary, per-head q/k LayerNorms,
// parallel residual), Qwen2-MoE (a sigmoid-gated shared expert) and DeepSeek-V3 (multi-head
// latent attention, group-limited sigmoid routing with shared experts). The
// families are rows of a table (config.go); what differs in computation is a flag of the
// row. It is what `ckpt forward` and the verification forward of `ckpt verify --forward`
// run.
//
// Two precisions: [Float32] widens every weight exactly and computes in float32, matching
// transformers' float32 forward to about 1e-6 on the test models; [TPU] rounds the inputs of
// every matrix product to bfloat16 and accumulates in float32, as a TPU's matrix unit does
// at default precision.
//
// Weights are never copied into a float32 model: bfloat16 and float32 matrices are used in
// place in the checkpoint's memory mapping, anything else (float16, strided views, FP8
// dequantized lazily by package quant, MXFP4 blocks) is decoded a tile of rows at a time
// into a small scratch buffer. Each matrix product splits its output features across
// GOMAXPROCS goroutines, running the SIMD kernels of package kernel. Layers run one after
// another and release the mapped pages they touched, so resident memory stays near one
// layer's weights plus the activations.
package forward
