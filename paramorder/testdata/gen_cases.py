#!/usr/bin/env python3
"""Writes paramorder/testdata/cases.json, what transformers and its Trainer say of models
built with configurations other than the ones families.json was written from (more
layers, variants combined, other heads). Run in the oracle chroot from the repository root:
scripts/oracle python paramorder/testdata/gen_cases.py [OUT]

Each case: the model_type, the head, the configuration changes, and
  stored     the keys save_pretrained writes (model.safetensors), as ckpt reads them: sorted;
  params     model.named_parameters() (the order the Trainer's groups list them in);
  decay      Trainer.get_decay_parameter_names(model) in named_parameters() order;
  buffers    the state-dict keys that are not parameters;
  fused      whether some stored key is neither a parameter nor a buffer (experts fused
             on load, modules renamed)."""
import json
import os
import sys
import tempfile

from safetensors import safe_open
from transformers import Trainer

sys.path.insert(0, os.path.dirname(__file__))
from families import FAMILIES, HEADS, build, config  # noqa: E402

CASES = {
    "llama": [dict(num_hidden_layers=11, attention_bias=True), dict(mlp_bias=True, tie_word_embeddings=True)],
    "mistral": [dict(num_hidden_layers=3)],
    "qwen2": [dict(num_hidden_layers=3, tie_word_embeddings=True)],
    "qwen3": [dict(num_hidden_layers=12, attention_bias=True, tie_word_embeddings=True)],
    "qwen2_moe": [dict(num_hidden_layers=3, mlp_only_layers=[0, 1, 2]), dict(num_hidden_layers=3)],
    "qwen3_moe": [dict(num_hidden_layers=3, mlp_only_layers=[0, 1, 2], attention_bias=True), dict(num_hidden_layers=2)],
    "mixtral": [dict(num_hidden_layers=3)],
    "phi3": [dict(num_hidden_layers=11)],
    "olmo2": [dict(num_hidden_layers=3, attention_bias=True)],
    "deepseek_v3": [dict(num_hidden_layers=3, first_k_dense_replace=3, q_lora_rank=None, attention_bias=True),
                    dict(num_hidden_layers=3)],
    "stablelm": [dict(num_hidden_layers=3, use_qkv_bias=True, qk_layernorm=True, use_parallel_residual=True)],
    "starcoder2": [dict(num_hidden_layers=11, use_bias=True)],
    "granite": [dict(num_hidden_layers=3, mlp_bias=True)],
    "gpt_oss": [dict(num_hidden_layers=3)],
    "gemma": [dict(num_hidden_layers=3)],
    "gemma2": [dict(num_hidden_layers=3, attention_bias=True)],
    "gemma3_text": [dict(num_hidden_layers=11)],
    # The families of ckpt's forward pass: every variant of families.py at once, every boolean
    # that switched removes parameters switched too (biases, norms, the tie), a layer more
    # (for those whose layers are listed, new lists).
    "afmoe": [dict(num_hidden_layers=4, attention_bias=True, tie_word_embeddings=True)],
    "apertus": [dict(num_hidden_layers=3, attention_bias=True, tie_word_embeddings=True)],
    "arcee": [dict(num_hidden_layers=3, attention_bias=True, mlp_bias=False, tie_word_embeddings=True)],
    "aria_text": [dict(num_hidden_layers=3, attention_bias=True, mlp_bias=True, tie_word_embeddings=True)],
    "biogpt": [dict(num_hidden_layers=3, tie_word_embeddings=False)],
    "bitnet": [dict(num_hidden_layers=3, attention_bias=True, tie_word_embeddings=True)],
    "bloom": [dict(num_hidden_layers=3, tie_word_embeddings=False)],
    "codegen": [dict(num_hidden_layers=3, tie_word_embeddings=False)],
    "cohere": [dict(num_hidden_layers=3, attention_bias=True, use_qk_norm=True, tie_word_embeddings=True)],
    "cohere2": [dict(num_hidden_layers=5, attention_bias=True, tie_word_embeddings=True)],
    "cohere2_moe": [dict(num_hidden_layers=5, attention_bias=True, tie_word_embeddings=True)],
    "ctrl": [dict(num_hidden_layers=3, tie_word_embeddings=True)],
    "cwm": [dict(num_hidden_layers=5, mlp_bias=True, tie_word_embeddings=True)],
    "deepseek_v2": [dict(num_hidden_layers=4, attention_bias=True, mlp_bias=True, q_lora_rank=None,
                         tie_word_embeddings=True)],
    "diffllama": [dict(num_hidden_layers=4, attention_bias=True, tie_word_embeddings=True)],
    "dots1": [dict(num_hidden_layers=4, attention_bias=True, tie_word_embeddings=True)],
    "ernie4_5": [dict(num_hidden_layers=3, tie_word_embeddings=True, use_bias=False)],
    "ernie4_5_moe": [dict(num_hidden_layers=4, tie_word_embeddings=True, use_bias=False)],
    "exaone4": [dict(num_hidden_layers=5, tie_word_embeddings=True)],
    "exaone_moe": [dict(num_hidden_layers=5, tie_word_embeddings=True)],
    "falcon": [dict(num_hidden_layers=3, bias=True, new_decoder_architecture=True, parallel_attn=False,
                    tie_word_embeddings=False)],
    "falcon_mamba": [dict(num_hidden_layers=4, tie_word_embeddings=False, use_bias=True, use_conv_bias=False)],
    "flex_olmo": [dict(num_hidden_layers=3, attention_bias=True, tie_word_embeddings=True)],
    "glm": [dict(num_hidden_layers=3, attention_bias=False, tie_word_embeddings=True)],
    "glm4": [dict(num_hidden_layers=3, attention_bias=False, tie_word_embeddings=True)],
    "glm4_moe": [dict(num_hidden_layers=4, attention_bias=False, tie_word_embeddings=True, use_qk_norm=False)],
    "glm4_moe_lite": [dict(num_hidden_layers=4, attention_bias=True, q_lora_rank=None, tie_word_embeddings=True)],
    "gpt-sw3": [dict(num_hidden_layers=3, tie_word_embeddings=False)],
    "gpt2": [dict(num_hidden_layers=3, tie_word_embeddings=False)],
    "gpt_bigcode": [dict(num_hidden_layers=3, tie_word_embeddings=False)],
    "gpt_neo": [dict(num_hidden_layers=4, attention_types=[[["global", "local"], 2]], tie_word_embeddings=False)],
    "gpt_neox": [dict(num_hidden_layers=3, attention_bias=False, tie_word_embeddings=True)],
    "gpt_neox_japanese": [dict(num_hidden_layers=3, tie_word_embeddings=False)],
    "gptj": [dict(num_hidden_layers=3, tie_word_embeddings=True)],
    "granitemoe": [dict(num_hidden_layers=3, attention_bias=True, tie_word_embeddings=True)],
    "granitemoeshared": [dict(num_hidden_layers=3, attention_bias=True, tie_word_embeddings=True)],
    "helium": [dict(num_hidden_layers=3, attention_bias=False, mlp_bias=False, tie_word_embeddings=True)],
    "hunyuan_v1_dense": [dict(num_hidden_layers=3, attention_bias=False, tie_word_embeddings=True)],
    "hunyuan_v1_moe": [dict(num_hidden_layers=3, attention_bias=False, tie_word_embeddings=True)],
    "hy_v3": [dict(num_hidden_layers=4, attention_bias=True, mlp_bias=True, tie_word_embeddings=True)],
    "hyperclovax": [dict(num_hidden_layers=3, attention_bias=True, mlp_bias=True, tie_word_embeddings=True,
                         use_post_norm=False)],
    "jais2": [dict(num_hidden_layers=3, attention_bias=False, mlp_bias=False, tie_word_embeddings=True)],
    "jetmoe": [dict(num_hidden_layers=3, tie_word_embeddings=False)],
    "laguna": [dict(num_hidden_layers=4, attention_bias=True, tie_word_embeddings=True,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                    num_attention_heads_per_layer=[4, 6, 2, 4],
                    mlp_layer_types=["dense", "sparse", "dense", "sparse"])],
    "llama4_text": [dict(num_hidden_layers=5, attention_bias=True, tie_word_embeddings=True)],
    "mamba": [dict(num_hidden_layers=3, tie_word_embeddings=True, use_bias=False, use_conv_bias=False)],
    "mellum": [dict(num_hidden_layers=4, attention_bias=True, tie_word_embeddings=True,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                    mlp_layer_types=["dense", "sparse", "dense", "sparse"])],
    "minimax_m2": [dict(num_hidden_layers=3, tie_word_embeddings=True)],
    "ministral": [dict(num_hidden_layers=4, tie_word_embeddings=True,
                       layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"])],
    "ministral3": [dict(num_hidden_layers=3, tie_word_embeddings=True)],
    "modernbert-decoder": [dict(num_hidden_layers=5, mlp_bias=True, attention_bias=False, classifier_bias=False,
                                decoder_bias=False, norm_bias=False, tie_word_embeddings=True)],
    "mpt": [dict(num_hidden_layers=3, tie_word_embeddings=False)],
    "nanochat": [dict(num_hidden_layers=3, attention_bias=True, tie_word_embeddings=True)],
    "nemotron": [dict(num_hidden_layers=3, attention_bias=False, mlp_bias=False, tie_word_embeddings=True)],
    "olmo": [dict(num_hidden_layers=3, attention_bias=False, tie_word_embeddings=True)],
    "olmo3": [dict(num_hidden_layers=5, attention_bias=True, tie_word_embeddings=True)],
    "olmoe": [dict(num_hidden_layers=3, attention_bias=True, tie_word_embeddings=True)],
    "openai-gpt": [dict(num_hidden_layers=3, tie_word_embeddings=False)],
    "opt": [dict(num_hidden_layers=3, tie_word_embeddings=False, word_embed_proj_dim=32, do_layer_norm_before=False,
                 enable_bias=False, layer_norm_elementwise_affine=False)],
    "persimmon": [dict(num_hidden_layers=3, qk_layernorm=False, tie_word_embeddings=True)],
    "phi": [dict(num_hidden_layers=3, qk_layernorm=True, tie_word_embeddings=True)],
    "phimoe": [dict(num_hidden_layers=3, attention_bias=False, lm_head_bias=False, tie_word_embeddings=True)],
    "seed_oss": [dict(num_hidden_layers=3, mlp_bias=True, attention_bias=False, attention_out_bias=False,
                      tie_word_embeddings=True)],
    "smollm3": [dict(num_hidden_layers=5, attention_bias=True, mlp_bias=True, tie_word_embeddings=True)],
    "solar_open": [dict(num_hidden_layers=3, attention_bias=False, tie_word_embeddings=True)],
    "vaultgemma": [dict(num_hidden_layers=4, attention_bias=True, tie_word_embeddings=True)],
    "xglm": [dict(num_hidden_layers=3, tie_word_embeddings=False)],
    "youtu": [dict(num_hidden_layers=3, attention_bias=True, q_lora_rank=None, tie_word_embeddings=True)],
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "paramorder/testdata/cases.json"
    cases = []
    for mt in FAMILIES:
        for kw in CASES[mt]:
            for head in HEADS:
                model = build(head, config(mt, **kw), seed=1)
                if model is None:
                    continue
                with tempfile.TemporaryDirectory() as d:
                    model.save_pretrained(d)
                    stored = []
                    for f in os.listdir(d):
                        if f.endswith(".safetensors"):
                            with safe_open(os.path.join(d, f), "pt") as s:
                                stored += list(s.keys())
                params = [n for n, _ in model.named_parameters()]
                every = {n for n, _ in model.named_parameters(remove_duplicate=False)}
                decay = set(Trainer.get_decay_parameter_names(None, model))
                buffers = sorted(k for k in model.state_dict() if k not in every)
                cases.append({
                    "model_type": mt, "head": type(model).__name__, "config": kw,
                    "stored": sorted(stored), "params": params, "decay": [n for n in params if n in decay],
                    "buffers": buffers,
                    "fused": bool(set(stored) - every - set(buffers)),
                })
    with open(out, "w") as f:
        json.dump({"cases": cases}, f, indent=0)
        f.write("\n")


main()
