"""Tiny random decoder-only models and transformers' float32 logits for them.

Usage (in the oracle chroot): python3 testdata/forward/gen.py OUTDIR [CASE ...]

For every case it builds a model with random weights from a small config of one
architecture, saves it under OUTDIR/CASE (a Hugging Face folder, a torch file, ...),
reloads it with transformers' from_pretrained in float32 with eager attention, runs
TOKENS through it and writes the logits [1, T, vocab] as OUTDIR/CASE.logits.safetensors
(tensor "logits"), those of LONG_TOKENS as OUTDIR/CASE.long.safetensors, and as
OUTDIR/CASE.tpu.safetensors the logits of TOKENS with every matrix product's inputs rounded
to bfloat16 (tpu_matmuls). It prints a JSON list of {"name", "path", "tokens",
"long_tokens", "model_type", "architecture", "generic"} on
stdout; "path" is what to hand to `ckpt forward`, relative to OUTDIR; "generic" marks the
architectures ckpt's Go forward pass does not run (for `ckpt verify --emit-torch`).
"""

import contextlib
import json
import os
import sys

import torch
from safetensors.torch import save_file
import transformers

TOKENS = [1, 5, 9, 2, 7, 3, 11, 4, 8, 6, 10, 12]
# LONG_TOKENS, a few dozen positions, runs every window, chunk and scaled rope well past its
# length; its float32 logits are OUTDIR/CASE.long.safetensors.
LONG_TOKENS = [(37 * i + 13) % 89 + 1 for i in range(40)]

def base(**kw):
    c = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             rms_norm_eps=1e-6, tie_word_embeddings=False)
    c.update(kw)
    return c

# name -> (model_type, config kwargs, save mode)
# save modes: "safetensors" (save_pretrained), "bf16" (save_pretrained in bfloat16),
# "bin" (pytorch_model.bin in the folder), "pt" (a bare torch.save file beside config.json),
# "mxfp4" (gpt-oss experts quantized to MXFP4 blocks/scales as the released checkpoint),
# "fp8" (the decoder's linear weights as float8_e4m3fn codes with float32 16×16 block scales,
# quant_method fp8 as DeepSeek-V3 and Qwen3-FP8 ship them), "state_dict" (the model's own
# state_dict in model.safetensors, transformers 5's in-memory names such as stacked experts,
# rather than the names save_pretrained converts back to).
CASES = {
    "llama_gqa": ("llama", base(), "safetensors"),
    "llama_tied_bias_llama3": ("llama", base(
        tie_word_embeddings=True, attention_bias=True, mlp_bias=True, num_key_value_heads=4,
        rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=16)), "safetensors"),
    "llama_linear_bin": ("llama", base(
        rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0)), "bin"),
    "llama_dynamic_pt": ("llama", base(
        max_position_embeddings=8, rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)), "pt"),
    "llama_yarn": ("llama", base(
        head_dim=32, rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                          original_max_position_embeddings=16)), "safetensors"),
    "llama_longrope": ("llama", base(
        max_position_embeddings=32, rope_parameters=dict(
            rope_type="longrope", rope_theta=10000.0, original_max_position_embeddings=8,
            short_factor=[1.0 + 0.1 * i for i in range(8)], long_factor=[1.5 + 0.2 * i for i in range(8)])), "safetensors"),
    "mistral_window": ("mistral", base(sliding_window=4, num_hidden_layers=3), "safetensors"),
    "qwen2_window": ("qwen2", base(
        use_sliding_window=True, sliding_window=3, max_window_layers=1, num_hidden_layers=3), "safetensors"),
    "qwen2_tied_bf16": ("qwen2", base(tie_word_embeddings=True), "bf16"),
    "qwen3_headdim": ("qwen3", base(head_dim=32, tie_word_embeddings=True), "safetensors"),
    "qwen3_bf16": ("qwen3", base(head_dim=16, num_key_value_heads=1), "bf16"),
    "qwen3_moe": ("qwen3_moe", base(
        head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
        num_hidden_layers=3, decoder_sparse_step=1, mlp_only_layers=[1]), "safetensors"),
    "qwen3_moe_step": ("qwen3_moe", base(
        head_dim=16, num_experts=6, num_experts_per_tok=3, moe_intermediate_size=16, norm_topk_prob=False,
        decoder_sparse_step=2, tie_word_embeddings=True), "bf16"),
    "llama_fp8": ("llama", base(num_key_value_heads=4), "fp8"),
    "gemma2": ("gemma2", base(
        head_dim=16, num_hidden_layers=3, sliding_window=3, query_pre_attn_scalar=24, tie_word_embeddings=True,
        attn_logit_softcapping=5.0, final_logit_softcapping=3.0), "safetensors"),
    "gemma3": ("gemma3_text", base(
        head_dim=16, num_hidden_layers=4, sliding_window=3, query_pre_attn_scalar=16, tie_word_embeddings=True,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        rope_parameters={"full_attention": dict(rope_type="linear", rope_theta=1000000.0, factor=8.0),
                         "sliding_attention": dict(rope_type="default", rope_theta=10000.0)}), "bf16"),
    "gpt_oss": ("gpt_oss", base(
        head_dim=16, num_local_experts=4, num_experts_per_tok=2, intermediate_size=32, num_hidden_layers=3,
        sliding_window=4, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0,
                             truncate=False, original_max_position_embeddings=16)), "safetensors"),
    "gpt_oss_mxfp4": ("gpt_oss", base(
        head_dim=16, num_local_experts=4, num_experts_per_tok=2, intermediate_size=64, num_hidden_layers=2,
        sliding_window=4, rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0,
                                               beta_slow=1.0, truncate=False, original_max_position_embeddings=16)),
        "mxfp4"),
    "mixtral": ("mixtral", base(
        num_local_experts=4, num_experts_per_tok=2, intermediate_size=32, sliding_window=5, num_hidden_layers=2),
        "safetensors"),
    "mixtral_tied_bf16": ("mixtral", base(
        num_local_experts=6, num_experts_per_tok=3, intermediate_size=16, num_key_value_heads=1,
        tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=10000.0)), "bf16"),
    "mixtral_stacked": ("mixtral", base(
        num_local_experts=4, num_experts_per_tok=1, intermediate_size=32), "state_dict"),
    "gemma": ("gemma", base(head_dim=16, tie_word_embeddings=True), "safetensors"),
    "gemma_gelu_bf16": ("gemma", base(
        head_dim=32, num_key_value_heads=1, hidden_act="gelu", attention_bias=True), "bf16"),
    "phi3": ("phi3", base(pad_token_id=0, bos_token_id=1, eos_token_id=2), "safetensors"),
    "phi3_longrope_partial": ("phi3", base(
        max_position_embeddings=32, original_max_position_embeddings=8, sliding_window=5, pad_token_id=0, bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True, rope_parameters=dict(
            rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.5, original_max_position_embeddings=8,
            short_factor=[1.0 + 0.1 * i for i in range(4)], long_factor=[1.5 + 0.2 * i for i in range(4)])), "bf16"),
    "olmo2": ("olmo2", base(), "safetensors"),
    "olmo2_tied_bias_bf16": ("olmo2", base(
        attention_bias=True, tie_word_embeddings=True, num_key_value_heads=4), "bf16"),
    "granite": ("granite", base(
        embedding_multiplier=3.0, attention_multiplier=0.2, residual_multiplier=0.5, logits_scaling=2.5), "safetensors"),
    "granite_bias_tied_bf16": ("granite", base(
        embedding_multiplier=12.0, attention_multiplier=0.015625, residual_multiplier=0.22, logits_scaling=8.0,
        attention_bias=True, mlp_bias=True, tie_word_embeddings=True), "bf16"),
    "starcoder2": ("starcoder2", base(
        norm_epsilon=1e-5, sliding_window=5, bos_token_id=1, eos_token_id=2), "safetensors"),
    "starcoder2_nobias_bf16": ("starcoder2", base(
        use_bias=False, hidden_act="gelu", tie_word_embeddings=True, num_key_value_heads=1, bos_token_id=1,
        eos_token_id=2), "bf16"),
    "qwen2_moe": ("qwen2_moe", base(
        num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=48,
        norm_topk_prob=False, num_hidden_layers=3, mlp_only_layers=[1]), "safetensors"),
    "qwen2_moe_stacked": ("qwen2_moe", base(
        num_experts=4, num_experts_per_tok=3, moe_intermediate_size=16, shared_expert_intermediate_size=32,
        norm_topk_prob=True, qkv_bias=False, tie_word_embeddings=True, use_sliding_window=True, sliding_window=4,
        max_window_layers=1), "state_dict"),
    "stablelm": ("stablelm", base(layer_norm_eps=1e-5), "safetensors"),
    "stablelm_parallel_qkln_bf16": ("stablelm", base(
        use_qkv_bias=True, qk_layernorm=True, use_parallel_residual=True, partial_rotary_factor=0.5,
        tie_word_embeddings=True), "bf16"),
    "deepseek_v3": ("deepseek_v3", base(
        num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=12,
        n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, moe_intermediate_size=16,
        n_shared_experts=1, first_k_dense_replace=1, num_hidden_layers=3, routed_scaling_factor=2.5), "safetensors"),
    "deepseek_v3_yarn_bf16": ("deepseek_v3", base(
        num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=16, qk_nope_head_dim=8,
        v_head_dim=8, n_routed_experts=6, num_experts_per_tok=3, n_group=1, topk_group=1, moe_intermediate_size=16,
        n_shared_experts=2, first_k_dense_replace=0, norm_topk_prob=False, routed_scaling_factor=1.5,
        rope_interleave=False, attention_bias=True, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16,
                             mscale=1.0, mscale_all_dim=1.0, beta_fast=32.0, beta_slow=1.0)), "bf16"),
}

def gpt(**kw):
    """A GPT-style configuration: heads of hidden/heads features, no grouped keys."""
    c = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)
    c.update(kw)
    return c


# The GPT lineage: learned, rotary or ALiBi positions, LayerNorms, fused or Conv1D
# projections, parallel residuals.
CASES.update({
    "gpt2": ("gpt2", gpt(n_inner=96), "safetensors"),
    "gpt2_scaled_bf16": ("gpt2", gpt(scale_attn_by_inverse_layer_idx=True, reorder_and_upcast_attn=True,
                                     tie_word_embeddings=False, activation_function="gelu"), "bf16"),
    "gpt_sw3": ("gpt-sw3", gpt(n_inner=80), "safetensors"),
    "gpt_bigcode": ("gpt_bigcode", gpt(n_inner=96), "safetensors"),
    "gpt_bigcode_mha_bf16": ("gpt_bigcode", gpt(multi_query=False, tie_word_embeddings=False), "bf16"),
    "gpt_neox": ("gpt_neox", gpt(intermediate_size=96), "safetensors"),
    "gpt_neox_seq_bf16": ("gpt_neox", gpt(intermediate_size=96, use_parallel_residual=False, attention_bias=False,
                                          rope_parameters=dict(rope_type="default", rope_theta=500.0, partial_rotary_factor=0.5),
                                          tie_word_embeddings=True), "bf16"),
    "gpt_neox_japanese": ("gpt_neox_japanese", gpt(intermediate_multiple_size=2, hidden_act="gelu",
                                                   rope_parameters=dict(rope_type="default", rope_theta=500.0)), "safetensors"),
    "gptj": ("gptj", gpt(rotary_dim=8, n_inner=96), "safetensors"),
    "codegen": ("codegen", gpt(rotary_dim=8, n_inner=96, tie_word_embeddings=True), "safetensors"),
    "bloom": ("bloom", gpt(), "safetensors"),
    "bloom_postln_bf16": ("bloom", gpt(hidden_size=96, num_attention_heads=6, apply_residual_connection_post_layernorm=True,
                                       tie_word_embeddings=False), "bf16"),
    "opt": ("opt", gpt(ffn_dim=96), "safetensors"),
    "opt_postln_proj_bf16": ("opt", gpt(ffn_dim=96, do_layer_norm_before=False, word_embed_proj_dim=32,
                                        tie_word_embeddings=False, activation_function="gelu"), "bf16"),
    "mpt": ("mpt", gpt(attn_config=dict(clip_qkv=0.8)), "safetensors"),
    "mpt_6heads_bf16": ("mpt", gpt(hidden_size=96, num_attention_heads=6, attn_config=dict(softmax_scale=0.3, alibi_bias_max=6),
                                   tie_word_embeddings=False), "bf16"),
    "falcon": ("falcon", gpt(), "safetensors"),
    "falcon_new_arch_bf16": ("falcon", gpt(new_decoder_architecture=True, num_kv_heads=2, bias=True, ffn_hidden_size=96,
                                           tie_word_embeddings=False), "bf16"),
    "falcon_alibi_seq": ("falcon", gpt(alibi=True, multi_query=False, parallel_attn=False, bias=True), "safetensors"),
    "falcon_one_ln": ("falcon", gpt(new_decoder_architecture=True, num_kv_heads=4, num_ln_in_parallel_attn=1,
                                    activation="relu"), "safetensors"),
    "gpt_neo": ("gpt_neo", gpt(attention_types=[[["global", "local"], 1]], window_size=5, intermediate_size=96), "safetensors"),
    "openai_gpt": ("openai-gpt", gpt(afn="gelu"), "safetensors"),
    "biogpt": ("biogpt", gpt(intermediate_size=96), "safetensors"),
    "xglm": ("xglm", gpt(ffn_dim=96), "safetensors"),
    "ctrl": ("ctrl", gpt(dff=96, tie_word_embeddings=False), "safetensors"),
    "persimmon": ("persimmon", gpt(intermediate_size=96), "safetensors"),
    "phi": ("phi", gpt(intermediate_size=96), "safetensors"),
    "phi_qkln_bf16": ("phi", gpt(intermediate_size=96, qk_layernorm=True, tie_word_embeddings=True,
                                 rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.75)), "bf16"),
})


# Llama-shaped decoders that differ by norms, rotary style, biases, windows or scaling.
CASES.update({
    "cohere": ("cohere", base(logit_scale=0.5), "safetensors"),
    "cohere_qknorm_bf16": ("cohere", base(use_qk_norm=True, tie_word_embeddings=False, attention_bias=True), "bf16"),
    "cohere2": ("cohere2", base(num_hidden_layers=4, sliding_window=4, logit_scale=0.25), "safetensors"),
    "glm": ("glm", base(attention_bias=True, pad_token_id=0), "safetensors"),
    "glm4": ("glm4", base(attention_bias=True, pad_token_id=0, head_dim=32), "safetensors"),
    "glm4_partial_bf16": ("glm4", base(pad_token_id=0, tie_word_embeddings=True, rope_parameters=dict(
        rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25)), "bf16"),
    "ernie4_5": ("ernie4_5", base(head_dim=16, use_bias=True), "safetensors"),
    "hunyuan_v1_dense": ("hunyuan_v1_dense", base(head_dim=16, attention_bias=True, rope_parameters=dict(
        rope_type="dynamic", rope_theta=10000.0, alpha=1000.0, factor=1.0)), "safetensors"),
    "olmo": ("olmo", base(clip_qkv=0.7, attention_bias=True), "safetensors"),
    "olmo3": ("olmo3", base(num_hidden_layers=4, sliding_window=3), "safetensors"),
    "ministral": ("ministral", base(num_hidden_layers=3, sliding_window=4, head_dim=16,
                                     layer_types=["sliding_attention", "full_attention", "sliding_attention"]), "safetensors"),
    "ministral3": ("ministral3", base(head_dim=16, sliding_window=5, rope_parameters=dict(
        rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=4, beta_fast=32.0, beta_slow=1.0,
        mscale=1.0, mscale_all_dim=1.0, llama_4_scaling_beta=0.3)), "safetensors"),
    "nemotron": ("nemotron", base(norm_eps=1e-5, attention_bias=True, mlp_bias=True), "safetensors"),
    "nemotron_full_rope_bf16": ("nemotron", base(head_dim=32, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                                                   partial_rotary_factor=1.0)), "bf16"),
    "helium": ("helium", base(head_dim=16, attention_bias=True, mlp_bias=True), "safetensors"),
    "arcee": ("arcee", base(mlp_bias=True), "safetensors"),
    "apertus": ("apertus", base(rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                                                     high_freq_factor=4.0, original_max_position_embeddings=16)), "safetensors"),
    "apertus_relu2_bf16": ("apertus", base(hidden_act="relu2", tie_word_embeddings=True), "bf16"),
    "seed_oss": ("seed_oss", base(head_dim=16, attention_bias=True, attention_out_bias=True), "safetensors"),
    "jais2": ("jais2", base(attention_bias=True, mlp_bias=True, hidden_act="relu2", layer_norm_eps=1e-5), "safetensors"),
    "smollm3": ("smollm3", base(num_hidden_layers=4, pad_token_id=0, no_rope_layer_interval=2), "safetensors"),
    "smollm3_window_bf16": ("smollm3", base(num_hidden_layers=4, pad_token_id=0, use_sliding_window=True, sliding_window=3,
                                            no_rope_layers=[1, 0, 1, 0], tie_word_embeddings=True), "bf16"),
    "exaone4": ("exaone4", base(num_hidden_layers=4, sliding_window=3, sliding_window_pattern=2), "safetensors"),
    "cwm": ("cwm", base(num_hidden_layers=4, sliding_window=3, rope_parameters=dict(
        rope_type="llama3", rope_theta=10000.0, factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=16)), "safetensors"),
    "hyperclovax": ("hyperclovax", base(embedding_multiplier=2.0, logits_scaling=0.5, residual_multiplier=0.7,
                                        attention_multiplier=0.2), "safetensors"),
    "nanochat": ("nanochat", base(final_logit_softcapping=4.0, hidden_act="relu2"), "safetensors"),
    "vaultgemma": ("vaultgemma", base(head_dim=16, num_hidden_layers=3, sliding_window=3, query_pre_attn_scalar=24,
                                      attn_logit_softcapping=5.0, final_logit_softcapping=3.0), "safetensors"),
})


# Mixtures of experts: routing by softmax, sigmoid with correction biases, groups, top-k
# logits, sparsemixer; shared experts; mixtures of attention heads.
CASES.update({
    "deepseek_v2": ("deepseek_v2", base(num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8,
                                        qk_nope_head_dim=8, v_head_dim=12, n_routed_experts=8, num_experts_per_tok=2,
                                        moe_intermediate_size=16, n_shared_experts=1, first_k_dense_replace=1,
                                        num_hidden_layers=3, routed_scaling_factor=1.5), "safetensors"),
    "deepseek_v2_noqlora_bf16": ("deepseek_v2", base(num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16,
                                                    qk_rope_head_dim=16, qk_nope_head_dim=8, v_head_dim=8, n_routed_experts=8,
                                                    num_experts_per_tok=3, moe_intermediate_size=16, n_shared_experts=2,
                                                    attention_bias=True, tie_word_embeddings=True), "bf16"),
    "glm4_moe": ("glm4_moe", base(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, n_shared_experts=1,
                                  first_k_dense_replace=1, n_group=2, topk_group=1, routed_scaling_factor=2.0,
                                  attention_bias=True, use_qk_norm=True, num_hidden_layers=3), "safetensors"),
    "ernie4_5_moe": ("ernie4_5_moe", base(moe_num_experts=6, moe_k=2, moe_intermediate_size=16, moe_num_shared_experts=1,
                                          moe_layer_start_index=1, num_hidden_layers=3, use_bias=True, head_dim=16),
                     "safetensors"),
    "hunyuan_v1_moe": ("hunyuan_v1_moe", base(head_dim=16, num_experts=4, moe_topk=2, attention_bias=True,
                                              rope_parameters=dict(rope_type="default", rope_theta=10000.0)), "safetensors"),
    "olmoe": ("olmoe", base(num_experts=6, num_experts_per_tok=2, clip_qkv=0.9, norm_topk_prob=True), "safetensors"),
    "granitemoe": ("granitemoe", base(num_local_experts=4, num_experts_per_tok=2, embedding_multiplier=2.0,
                                      attention_multiplier=0.2, residual_multiplier=0.5, logits_scaling=2.0), "safetensors"),
    "granitemoeshared": ("granitemoeshared", base(num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=48,
                                                  embedding_multiplier=2.0, attention_multiplier=0.2,
                                                  residual_multiplier=0.5, logits_scaling=2.0), "safetensors"),
    "jetmoe": ("jetmoe", gpt(num_key_value_heads=2, kv_channels=16, num_local_experts=4, num_experts_per_tok=2,
                             intermediate_size=32), "safetensors"),
    "minimax_m2": ("minimax_m2", base(head_dim=16, num_local_experts=6, num_experts_per_tok=2, intermediate_size=16,
                                      rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5)),
                   "safetensors"),
    "phimoe": ("phimoe", base(num_local_experts=4, num_experts_per_tok=2, intermediate_size=32, attention_bias=True,
                              lm_head_bias=True), "safetensors"),
    "llama4_text": ("llama4_text", base(head_dim=16, num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=1,
                                        intermediate_size=32, intermediate_size_mlp=48, interleave_moe_layer_step=2,
                                        attention_chunk_size=5, no_rope_layer_interval=2, floor_scale=4, attn_scale=0.2),
                    "safetensors"),
})


# Families held out while the parts were designed, each composed from them: DeepSeek-V3
# routing under other attentions, OLMo 2 norms with OLMoE experts, rope per layer type,
# gated heads, sub-norms, mixed dense/sparse layers by mlp_layer_types.
CASES.update({
    "dots1": ("dots1", base(head_dim=16, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                            n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1, norm_topk_prob=True,
                            routed_scaling_factor=1.5, num_hidden_layers=3, sliding_window=4, max_window_layers=2),
              "safetensors"),
    "exaone_moe": ("exaone_moe", base(head_dim=16, num_hidden_layers=4, num_experts=8, num_experts_per_tok=2,
                                      moe_intermediate_size=16, num_shared_experts=1, first_k_dense_replace=1,
                                      routed_scaling_factor=2.0, sliding_window=3, sliding_window_pattern=2), "safetensors"),
    "flex_olmo": ("flex_olmo", base(num_experts=6, num_experts_per_tok=2, norm_topk_prob=True, pad_token_id=0),
                  "safetensors"),
    "cohere2_moe": ("cohere2_moe", base(head_dim=16, num_hidden_layers=4, num_experts=6, num_experts_per_tok=2,
                                        num_shared_experts=1, first_k_dense_replace=1, prefix_dense_intermediate_size=48,
                                        sliding_window=3, sliding_window_pattern=2, logit_scale=0.5, rms_norm_eps=None,
                                        layer_norm_eps=1e-5, pad_token_id=0), "safetensors"),
    # Four layers: with three, one position's second and third router logits lie 1e-3 apart,
    # less than rounding the matrix inputs to bfloat16 moves them, so its experts under
    # tpu_matmuls depend on the summation order (here the nearest pair is 1.5e-2 apart).
    "cohere2_moe_sigmoid": ("cohere2_moe", base(head_dim=16, num_hidden_layers=4, num_experts=6, num_experts_per_tok=2,
                                                num_shared_experts=1, shared_expert_combination_strategy="sum",
                                                expert_selection_fn="sigmoid", sliding_window=3, pad_token_id=0),
                            "safetensors"),
    "mellum": ("mellum", base(head_dim=16, num_hidden_layers=3, num_experts=6, num_experts_per_tok=2,
                              moe_intermediate_size=16, sliding_window=3,
                              layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                              mlp_layer_types=["dense", "sparse", "sparse"]), "safetensors"),
    "laguna": ("laguna", base(head_dim=16, num_hidden_layers=3, num_experts=6, num_experts_per_tok=2,
                              moe_intermediate_size=16, shared_expert_intermediate_size=24, sliding_window=3,
                              layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                              num_attention_heads_per_layer=[4, 6, 2], moe_routed_scaling_factor=1.5,
                              moe_router_logit_softcapping=2.0), "safetensors"),
    "solar_open": ("solar_open", base(head_dim=16, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                                      n_shared_experts=1, n_group=2, topk_group=1, routed_scaling_factor=2.0,
                                      attention_bias=True), "safetensors"),
    "glm4_moe_lite": ("glm4_moe_lite", base(num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8,
                                            qk_nope_head_dim=8, v_head_dim=12, n_routed_experts=8, num_experts_per_tok=2,
                                            moe_intermediate_size=16, n_shared_experts=1, num_hidden_layers=3,
                                            routed_scaling_factor=1.5), "safetensors"),
    "hy_v3": ("hy_v3", base(head_dim=16, num_hidden_layers=3, num_experts=6, num_experts_per_tok=2,
                            moe_intermediate_size=16, num_shared_experts=1, router_scaling_factor=1.7), "safetensors"),
    "afmoe": ("afmoe", base(head_dim=16, num_hidden_layers=3, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
                            num_shared_experts=1, route_scale=1.5, global_attn_every_n_layers=2, sliding_window=3,
                            mup_enabled=True), "safetensors"),
    "aria_text": ("aria_text", base(moe_num_experts=4, moe_topk=2, moe_num_shared_experts=1, intermediate_size=32),
                  "safetensors"),
    "youtu": ("youtu", base(num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8,
                            qk_nope_head_dim=8, v_head_dim=12), "safetensors"),
    "bitnet": ("bitnet", base(), "safetensors"),
    "diffllama": ("diffllama", base(num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, head_dim=8),
                  "safetensors"),
    "modernbert_decoder": ("modernbert-decoder", base(num_hidden_layers=4, num_attention_heads=4, local_attention=6,
                                                      global_attn_every_n_layers=2, norm_bias=True, attention_bias=True,
                                                      classifier_bias=True, pad_token_id=0), "safetensors"),
})

# State-space decoders (the stretch goal): Mamba's selective scan, Falcon-Mamba's normalized
# B, C and time steps.
CASES.update({
    "mamba": ("mamba", dict(vocab_size=97, hidden_size=64, state_size=8, num_hidden_layers=2, conv_kernel=4, expand=2,
                            tie_word_embeddings=False, use_bias=True), "safetensors"),
    "falcon_mamba": ("falcon_mamba", dict(vocab_size=97, hidden_size=48, state_size=6, num_hidden_layers=3, conv_kernel=3,
                                          expand=2, time_step_rank=5), "safetensors"),
})

# Multimodal models whose language model is one of the decoders above, run on tokens alone:
# their checkpoints nest it (language_model.model.…).
TINY_VISION = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                   patch_size=14)
CASES.update({
    "gemma3_multimodal": ("gemma3", dict(text_config=base(head_dim=16, sliding_window=3, num_hidden_layers=3,
                                                          final_logit_softcapping=5.0),
                                         vision_config=TINY_VISION, mm_tokens_per_image=4), "safetensors"),
    "llama4_multimodal": ("llama4", dict(text_config=base(head_dim=16, num_local_experts=4, num_experts_per_tok=1,
                                                          intermediate_size_mlp=48, interleave_moe_layer_step=2,
                                                          attention_chunk_size=5),
                                         vision_config=dict(TINY_VISION, vision_output_dim=32, projector_input_dim=32,
                                                            projector_output_dim=32),
                                         _class="Llama4ForConditionalGeneration"), "safetensors"),
})

# An architecture ckpt's Go forward pass has no family for (a recurrent block): the cases
# that check `ckpt verify --emit-torch` hands both sides to transformers. Listed "generic"
# in the output.
GENERIC = {"rwkv_generic"}
CASES.update({
    "rwkv_generic": ("rwkv", dict(vocab_size=97, hidden_size=64, attention_hidden_size=64, intermediate_size=96,
                                  num_hidden_layers=2, context_length=64), "safetensors"),
})


@contextlib.contextmanager
def tpu_matmuls():
    """Every matrix product's float32 inputs rounded to bfloat16 (nearest even), products and
    sums in float32: a TPU matrix unit at default precision. Patches F.linear, torch.matmul
    and Tensor.__matmul__, which the eager modeling code calls for every product."""
    def r(t):
        return t.to(torch.bfloat16).to(torch.float32) if t.dtype == torch.float32 else t
    F = torch.nn.functional
    lin, mm, tmm = F.linear, torch.matmul, torch.Tensor.__matmul__
    F.linear = lambda x, w, b=None: lin(r(x), r(w), b)
    torch.matmul = lambda a, b, **kw: mm(r(a), r(b), **kw)
    torch.Tensor.__matmul__ = lambda a, b: tmm(r(a), r(b))
    try:
        yield
    finally:
        F.linear, torch.matmul, torch.Tensor.__matmul__ = lin, mm, tmm


FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def quantize_fp8(w, block=16):
    """w [out, in] -> float8_e4m3fn codes, float32 scales [out/block, in/block] (scale = amax/448
    per block) and the dequantized float32 weight f32(code)·scale."""
    o, i = w.shape
    blocks = w.reshape(o // block, block, i // block, block)
    scales = (blocks.abs().amax(dim=(1, 3)) / 448.0).clamp(min=1e-12).float()
    codes = (blocks / scales[:, None, :, None]).to(torch.float8_e4m3fn).reshape(o, i)
    deq = (codes.float().reshape(o // block, block, i // block, block) * scales[:, None, :, None]).reshape(o, i)
    return codes, scales, deq


def quantize_mxfp4(w):
    """w [E, in, out] (gpt-oss layout) -> blocks uint8 [E, out, in/32, 16], scales uint8 [E, out, in/32]
    with random codes and exponents; returns them and the exact dequantized float32 [E, in, out]."""
    E, n_in, n_out = w.shape
    g = n_in // 32
    codes = torch.randint(0, 16, (E, n_out, g, 32), dtype=torch.uint8)
    scales = torch.randint(124, 130, (E, n_out, g), dtype=torch.uint8)
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).contiguous()
    vals = FP4_VALUES[codes.long()] * torch.pow(2.0, scales.float() - 127)[..., None]
    deq = vals.reshape(E, n_out, n_in).transpose(1, 2).contiguous()
    return blocks, scales, deq


def make(name, outdir):
    model_type, kw, mode = CASES[name]
    kw = dict(kw)
    cls_name = kw.pop("_class", None)  # a class other than AutoModelForCausalLM's
    torch.manual_seed(sum(map(ord, name)))
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    cfg._attn_implementation = "eager"
    if cls_name:
        model = getattr(transformers, cls_name)(cfg).eval()
    else:
        model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    model_cls = type(model)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):  # DeepSeek-V3's router bias, zero at init
                b.normal_(0, 0.3)
    folder = os.path.join(outdir, name)
    path = name
    if mode == "safetensors":
        model.save_pretrained(folder)
    elif mode == "bf16":
        model.to(torch.bfloat16).save_pretrained(folder)
    elif mode in ("bin", "pt"):
        model.save_pretrained(folder)
        sd = {k: v.clone() for k, v in model.state_dict().items()}
        if cfg.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        os.remove(os.path.join(folder, "model.safetensors"))
        if mode == "bin":
            torch.save(sd, os.path.join(folder, "pytorch_model.bin"))
        else:
            torch.save(sd, os.path.join(folder, "weights.pt"))
            path = os.path.join(name, "weights.pt")
    elif mode == "fp8":
        sd = {k: v.clone().contiguous() for k, v in model.state_dict().items()}
        with torch.no_grad():
            for k in list(sd):
                if ".layers." in k and k.endswith("_proj.weight"):
                    codes, scales, deq = quantize_fp8(sd[k])
                    sd[k], sd[k + "_scale_inv"] = codes, scales
                    model.get_parameter(k).copy_(deq)  # the reference runs the dequantized weights
        os.makedirs(folder, exist_ok=True)
        save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        c = cfg.to_dict()
        c["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [16, 16]}
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(c, f, indent=2)
    elif mode == "state_dict":
        sd = {k: v.clone().contiguous() for k, v in model.state_dict().items()}
        if cfg.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        os.makedirs(folder, exist_ok=True)
        save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        cfg.save_pretrained(folder)
    elif mode == "mxfp4":
        sd = {k: v.clone().contiguous() for k, v in model.state_dict().items()}
        for k in list(sd):
            if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
                blocks, scales, deq = quantize_mxfp4(sd.pop(k))
                sd[k + "_blocks"], sd[k + "_scales"] = blocks, scales
        os.makedirs(folder, exist_ok=True)
        save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        c = cfg.to_dict()
        c["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(c, f, indent=2)
    # A model_type its config class shares with another (gpt-sw3 is GPT2Config's) is written
    # as asked, as the released configurations spell it.
    cfg_path = os.path.join(folder, "config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path) as f:
            c = json.load(f)
        if c.get("model_type") != model_type:
            c["model_type"] = model_type
            with open(cfg_path, "w") as f:
                json.dump(c, f, indent=2)
    # The reference: reload what was saved, as a user would, in float32 with eager attention.
    if mode in ("fp8", "state_dict"):
        # transformers' fp8 integration needs an accelerator; the model in memory holds the
        # dequantized weights (f32(code)·scale, DeepSeek's weight_dequant), which is what
        # loading with dequantization computes.
        ref = model
    elif mode == "mxfp4":
        ref = transformers.GptOssForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager",
            quantization_config=transformers.Mxfp4Config(dequantize=True))
        # transformers dequantizes the experts to bfloat16 (exactly: every MXFP4 value is a
        # bfloat16) and would run them in bfloat16; widen them to run the reference in float32.
        ref = ref.float()
    elif mode == "pt":
        ref = model_cls(cfg)
        ref.load_state_dict(torch.load(os.path.join(folder, "weights.pt"), weights_only=True), strict=False)
        ref.tie_weights()
        ref = ref.float()
    else:
        auto = model_cls if cls_name else transformers.AutoModelForCausalLM
        ref = auto.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    with torch.no_grad():
        logits = ref(torch.tensor([TOKENS])).logits.float().contiguous()
        long = ref(torch.tensor([LONG_TOKENS])).logits.float().contiguous()
        with tpu_matmuls():
            tpu = ref(torch.tensor([TOKENS])).logits.float().contiguous()
    save_file({"logits": logits}, os.path.join(outdir, name + ".logits.safetensors"))
    save_file({"logits": long}, os.path.join(outdir, name + ".long.safetensors"))
    save_file({"logits": tpu}, os.path.join(outdir, name + ".tpu.safetensors"))
    return {"name": name, "path": path, "tokens": TOKENS, "long_tokens": LONG_TOKENS, "model_type": model_type,
            "architecture": model_cls.__name__, "generic": name in GENERIC}


def main():
    outdir = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    os.makedirs(outdir, exist_ok=True)
    print(json.dumps([make(n, outdir) for n in names]))


if __name__ == "__main__":
    main()
