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

# model_type → (extra base kwargs, variants)
FAMILIES = {
    "llama": ({}, [dict(attention_bias=True, mlp_bias=True), dict(tie_word_embeddings=True)]),
    "mistral": ({}, [dict(tie_word_embeddings=True)]),
    "qwen2": ({}, [dict(tie_word_embeddings=True)]),
    "qwen3": ({}, [dict(attention_bias=True), dict(tie_word_embeddings=True)]),
    "qwen2_moe": (MOE, [dict(qkv_bias=False), dict(mlp_only_layers=[0]), dict(decoder_sparse_step=2)]),
    "qwen3_moe": (MOE, [dict(attention_bias=True), dict(mlp_only_layers=[0])]),
    "mixtral": (MOE, [dict(tie_word_embeddings=True)]),
    "phi3": ({}, [dict(tie_word_embeddings=True)]),
    "olmo2": ({}, [dict(attention_bias=True)]),
    "deepseek_v3": (dict(MOE, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8,
                         first_k_dense_replace=1),
                    [dict(q_lora_rank=None), dict(attention_bias=True)]),
    "stablelm": ({}, [dict(use_qkv_bias=True, qk_layernorm=True), dict(use_parallel_residual=True)]),
    "starcoder2": ({}, [dict(use_bias=False), dict(tie_word_embeddings=True)]),
    "granite": ({}, [dict(attention_bias=True, mlp_bias=True)]),
    "gpt_oss": (MOE, [dict(attention_bias=False)]),
    "gemma": ({}, [dict(attention_bias=True), dict(tie_word_embeddings=True)]),
    "gemma2": ({}, [dict(attention_bias=True)]),
    "gemma3_text": ({}, [dict(attention_bias=True)]),
}

HEADS = (AutoModelForCausalLM, AutoModel, AutoModelForSequenceClassification)


def config(model_type, **kw):
    extra, _ = FAMILIES[model_type]
    args = dict(BASE, **extra)
    args.update(kw)
    return AutoConfig.for_model(model_type, **args)


def build(head, cfg, seed=0):
    torch.manual_seed(seed)
    try:
        return head.from_config(cfg)
    except ValueError:  # no such head for this family
        return None
