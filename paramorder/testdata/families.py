"""The transformers model families paramorder describes, and the configurations that build
them: a tiny base configuration per model_type and variants that switch on each optional
piece (biases, q/k norms, dense layers between MoE layers, tied embeddings, …), so that the
union of their modules is every module the family can have."""

import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

BASE = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=0)
MOE = dict(num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
           shared_expert_intermediate_size=16, n_shared_experts=1, n_group=1, topk_group=1)


def decoder(**kw):
    """A Llama-shaped decoder's configuration (testdata/forward/gen.py's base on the forward branch)."""
    c = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False)
    c.update(kw)
    return c


def gpt(**kw):
    """A GPT-style configuration: heads of hidden/heads features, no grouped keys; embeddings tied as each
    family ties them by default."""
    c = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)
    c.update(kw)
    return c


# model_type → (base configuration, variants). The first seventeen were written for ckpt's first
# families; the others are the model types ckpt's forward pass runs, each based on the
# configuration its forward test builds, with a variant for every boolean of its configuration
# that, switched, adds parameters (found by switching each in turn), and the pieces other
# settings add (q_lora_rank=None's q_proj, OPT's projections around a narrower embedding).
FAMILIES = {
    "llama": (BASE, [dict(attention_bias=True, mlp_bias=True), dict(tie_word_embeddings=True)]),
    "mistral": (BASE, [dict(tie_word_embeddings=True)]),
    "qwen2": (BASE, [dict(tie_word_embeddings=True)]),
    "qwen3": (BASE, [dict(attention_bias=True), dict(tie_word_embeddings=True)]),
    "qwen2_moe": (dict(BASE, **MOE), [dict(qkv_bias=False), dict(mlp_only_layers=[0]), dict(decoder_sparse_step=2)]),
    "qwen3_moe": (dict(BASE, **MOE), [dict(attention_bias=True), dict(mlp_only_layers=[0])]),
    "mixtral": (dict(BASE, **MOE), [dict(tie_word_embeddings=True)]),
    "phi3": (BASE, [dict(tie_word_embeddings=True)]),
    "olmo2": (BASE, [dict(attention_bias=True)]),
    "deepseek_v3": (dict(BASE, **MOE, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4,
        v_head_dim=8,
                         first_k_dense_replace=1),
                    [dict(q_lora_rank=None), dict(attention_bias=True)]),
    "stablelm": (BASE, [dict(use_qkv_bias=True, qk_layernorm=True), dict(use_parallel_residual=True)]),
    "starcoder2": (BASE, [dict(use_bias=False), dict(tie_word_embeddings=True)]),
    "granite": (BASE, [dict(attention_bias=True, mlp_bias=True)]),
    "gpt_oss": (dict(BASE, **MOE), [dict(attention_bias=False)]),
    "gemma": (BASE, [dict(attention_bias=True), dict(tie_word_embeddings=True)]),
    "gemma2": (BASE, [dict(attention_bias=True)]),
    "gemma3_text": (BASE, [dict(attention_bias=True)]),
    "afmoe": (decoder(head_dim=16, num_hidden_layers=3, num_experts=6, num_experts_per_tok=2,
        moe_intermediate_size=16, num_shared_experts=1, route_scale=1.5, global_attn_every_n_layers=2,
        sliding_window=3, mup_enabled=True),
        [dict(attention_bias=True)]),
    "apertus": (decoder(rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
        low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16)),
        [dict(attention_bias=True)]),
    "arcee": (decoder(mlp_bias=True),
        [dict(attention_bias=True)]),
    "aria_text": (decoder(moe_num_experts=4, moe_topk=2, moe_num_shared_experts=1, intermediate_size=32),
        [dict(attention_bias=True), dict(mlp_bias=True)]),
    "biogpt": (gpt(intermediate_size=96),
        [dict(tie_word_embeddings=False)]),
    "bitnet": (decoder(),
        [dict(attention_bias=True)]),
    "bloom": (gpt(),
        [dict(tie_word_embeddings=False)]),
    "codegen": (gpt(rotary_dim=8, n_inner=96, tie_word_embeddings=True),
        [dict(tie_word_embeddings=False)]),
    "cohere": (decoder(logit_scale=0.5),
        [dict(attention_bias=True), dict(use_qk_norm=True)]),
    "cohere2": (decoder(num_hidden_layers=4, sliding_window=4, logit_scale=0.25),
        [dict(attention_bias=True)]),
    "cohere2_moe": (decoder(head_dim=16, num_hidden_layers=4, num_experts=6, num_experts_per_tok=2,
        num_shared_experts=1, first_k_dense_replace=1, prefix_dense_intermediate_size=48, sliding_window=3,
        sliding_window_pattern=2, logit_scale=0.5, rms_norm_eps=None, layer_norm_eps=1e-5, pad_token_id=0),
        [dict(attention_bias=True)]),
    "ctrl": (gpt(dff=96, tie_word_embeddings=False),
        []),
    "cwm": (decoder(num_hidden_layers=4, sliding_window=3, rope_parameters=dict(rope_type="llama3",
        rope_theta=10000.0, factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=16)),
        [dict(mlp_bias=True)]),
    "deepseek_v2": (decoder(num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=12, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
        n_shared_experts=1, first_k_dense_replace=1, num_hidden_layers=3, routed_scaling_factor=1.5),
        [dict(attention_bias=True), dict(mlp_bias=True), dict(q_lora_rank=None)]),
    "diffllama": (decoder(num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, head_dim=8),
        [dict(attention_bias=True)]),
    "dots1": (decoder(head_dim=16, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
        n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1, norm_topk_prob=True,
        routed_scaling_factor=1.5, num_hidden_layers=3, sliding_window=4, max_window_layers=2),
        [dict(attention_bias=True)]),
    "ernie4_5": (decoder(head_dim=16, use_bias=True),
        []),
    "ernie4_5_moe": (decoder(moe_num_experts=6, moe_k=2, moe_intermediate_size=16, moe_num_shared_experts=1,
        moe_layer_start_index=1, num_hidden_layers=3, use_bias=True, head_dim=16),
        []),
    "exaone4": (decoder(num_hidden_layers=4, sliding_window=3, sliding_window_pattern=2),
        []),
    "exaone_moe": (decoder(head_dim=16, num_hidden_layers=4, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=16, num_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.0,
        sliding_window=3, sliding_window_pattern=2),
        []),
    "falcon": (gpt(),
        [dict(bias=True), dict(new_decoder_architecture=True), dict(parallel_attn=False),
        dict(tie_word_embeddings=False)]),
    "falcon_mamba": (dict(vocab_size=97, hidden_size=48, state_size=6, num_hidden_layers=3, conv_kernel=3, expand=2,
        time_step_rank=5),
        [dict(tie_word_embeddings=False), dict(use_bias=True)]),
    "flex_olmo": (decoder(num_experts=6, num_experts_per_tok=2, norm_topk_prob=True, pad_token_id=0),
        [dict(attention_bias=True)]),
    "glm": (decoder(attention_bias=True, pad_token_id=0),
        []),
    "glm4": (decoder(attention_bias=True, pad_token_id=0, head_dim=32),
        []),
    "glm4_moe": (decoder(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, n_shared_experts=1,
        first_k_dense_replace=1, n_group=2, topk_group=1, routed_scaling_factor=2.0, attention_bias=True,
        use_qk_norm=True, num_hidden_layers=3),
        []),
    "glm4_moe_lite": (decoder(num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=12, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
        n_shared_experts=1, num_hidden_layers=3, routed_scaling_factor=1.5),
        [dict(attention_bias=True), dict(q_lora_rank=None)]),
    "gpt-sw3": (gpt(n_inner=80),
        [dict(tie_word_embeddings=False)]),
    "gpt2": (gpt(n_inner=96),
        [dict(tie_word_embeddings=False)]),
    "gpt_bigcode": (gpt(n_inner=96),
        [dict(tie_word_embeddings=False)]),
    "gpt_neo": (gpt(attention_types=[[["global", "local"], 1]], window_size=5, intermediate_size=96),
        [dict(tie_word_embeddings=False)]),
    "gpt_neox": (gpt(intermediate_size=96),
        []),
    "gpt_neox_japanese": (gpt(intermediate_multiple_size=2, hidden_act="gelu",
        rope_parameters=dict(rope_type="default", rope_theta=500.0)),
        [dict(tie_word_embeddings=False)]),
    "gptj": (gpt(rotary_dim=8, n_inner=96),
        []),
    "granitemoe": (decoder(num_local_experts=4, num_experts_per_tok=2, embedding_multiplier=2.0,
        attention_multiplier=0.2, residual_multiplier=0.5, logits_scaling=2.0),
        [dict(attention_bias=True)]),
    "granitemoeshared": (decoder(num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=48,
        embedding_multiplier=2.0, attention_multiplier=0.2, residual_multiplier=0.5, logits_scaling=2.0),
        [dict(attention_bias=True)]),
    "helium": (decoder(head_dim=16, attention_bias=True, mlp_bias=True),
        []),
    "hunyuan_v1_dense": (decoder(head_dim=16, attention_bias=True, rope_parameters=dict(rope_type="dynamic",
        rope_theta=10000.0, alpha=1000.0, factor=1.0)),
        []),
    "hunyuan_v1_moe": (decoder(head_dim=16, num_experts=4, moe_topk=2, attention_bias=True,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        []),
    "hy_v3": (decoder(head_dim=16, num_hidden_layers=3, num_experts=6, num_experts_per_tok=2,
        moe_intermediate_size=16, num_shared_experts=1, router_scaling_factor=1.7),
        [dict(attention_bias=True), dict(mlp_bias=True)]),
    "hyperclovax": (decoder(embedding_multiplier=2.0, logits_scaling=0.5, residual_multiplier=0.7,
        attention_multiplier=0.2),
        [dict(attention_bias=True), dict(mlp_bias=True)]),
    "jais2": (decoder(attention_bias=True, mlp_bias=True, hidden_act="relu2", layer_norm_eps=1e-5),
        []),
    "jetmoe": (gpt(num_key_value_heads=2, kv_channels=16, num_local_experts=4, num_experts_per_tok=2,
        intermediate_size=32),
        [dict(tie_word_embeddings=False)]),
    "laguna": (decoder(head_dim=16, num_hidden_layers=3, num_experts=6, num_experts_per_tok=2,
        moe_intermediate_size=16, shared_expert_intermediate_size=24, sliding_window=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], num_attention_heads_per_layer=[4,
        6, 2], moe_routed_scaling_factor=1.5, moe_router_logit_softcapping=2.0),
        [dict(attention_bias=True)]),
    "llama4_text": (decoder(head_dim=16, num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=1,
        intermediate_size=32, intermediate_size_mlp=48, interleave_moe_layer_step=2, attention_chunk_size=5,
        no_rope_layer_interval=2, floor_scale=4, attn_scale=0.2),
        [dict(attention_bias=True)]),
    "mamba": (dict(vocab_size=97, hidden_size=64, state_size=8, num_hidden_layers=2, conv_kernel=4, expand=2,
        tie_word_embeddings=False, use_bias=True),
        []),
    "mellum": (decoder(head_dim=16, num_hidden_layers=3, num_experts=6, num_experts_per_tok=2,
        moe_intermediate_size=16, sliding_window=3, layer_types=["sliding_attention", "full_attention",
        "sliding_attention"], mlp_layer_types=["dense", "sparse", "sparse"]),
        [dict(attention_bias=True)]),
    "minimax_m2": (decoder(head_dim=16, num_local_experts=6, num_experts_per_tok=2, intermediate_size=16,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5)),
        []),
    "ministral": (decoder(num_hidden_layers=3, sliding_window=4, head_dim=16, layer_types=["sliding_attention",
        "full_attention", "sliding_attention"]),
        []),
    "ministral3": (decoder(head_dim=16, sliding_window=5, rope_parameters=dict(rope_type="yarn", rope_theta=10000.0,
        factor=4.0, original_max_position_embeddings=4, beta_fast=32.0, beta_slow=1.0, mscale=1.0,
        mscale_all_dim=1.0, llama_4_scaling_beta=0.3)),
        []),
    "modernbert-decoder": (decoder(num_hidden_layers=4, num_attention_heads=4, local_attention=6,
        global_attn_every_n_layers=2, norm_bias=True, attention_bias=True, classifier_bias=True, pad_token_id=0),
        [dict(mlp_bias=True)]),
    "mpt": (gpt(attn_config=dict(clip_qkv=0.8)),
        [dict(tie_word_embeddings=False)]),
    "nanochat": (decoder(final_logit_softcapping=4.0, hidden_act="relu2"),
        [dict(attention_bias=True)]),
    "nemotron": (decoder(norm_eps=1e-5, attention_bias=True, mlp_bias=True),
        []),
    "olmo": (decoder(clip_qkv=0.7, attention_bias=True),
        []),
    "olmo3": (decoder(num_hidden_layers=4, sliding_window=3),
        [dict(attention_bias=True)]),
    "olmoe": (decoder(num_experts=6, num_experts_per_tok=2, clip_qkv=0.9, norm_topk_prob=True),
        [dict(attention_bias=True)]),
    "openai-gpt": (gpt(afn="gelu"),
        [dict(tie_word_embeddings=False)]),
    "opt": (gpt(ffn_dim=96),
        [dict(tie_word_embeddings=False), dict(word_embed_proj_dim=32)]),
    "persimmon": (gpt(intermediate_size=96),
        []),
    "phi": (gpt(intermediate_size=96),
        [dict(qk_layernorm=True)]),
    "phimoe": (decoder(num_local_experts=4, num_experts_per_tok=2, intermediate_size=32, attention_bias=True,
        lm_head_bias=True),
        []),
    "seed_oss": (decoder(head_dim=16, attention_bias=True, attention_out_bias=True),
        [dict(mlp_bias=True)]),
    "smollm3": (decoder(num_hidden_layers=4, pad_token_id=0, no_rope_layer_interval=2),
        [dict(attention_bias=True), dict(mlp_bias=True)]),
    "solar_open": (decoder(head_dim=16, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
        n_shared_experts=1, n_group=2, topk_group=1, routed_scaling_factor=2.0, attention_bias=True),
        []),
    "vaultgemma": (decoder(head_dim=16, num_hidden_layers=3, sliding_window=3, query_pre_attn_scalar=24,
        attn_logit_softcapping=5.0, final_logit_softcapping=3.0),
        [dict(attention_bias=True)]),
    "xglm": (gpt(ffn_dim=96),
        [dict(tie_word_embeddings=False)]),
    "youtu": (decoder(num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=12),
        [dict(attention_bias=True), dict(q_lora_rank=None)]),
}

HEADS = (AutoModelForCausalLM, AutoModel, AutoModelForSequenceClassification)


def config(model_type, **kw):
    args = dict(FAMILIES[model_type][0])
    args.update(kw)
    return AutoConfig.for_model(model_type, **args)


def build(head, cfg, seed=0):
    torch.manual_seed(seed)
    try:
        return head.from_config(cfg)
    except ValueError:  # no such head for this family
        return None
