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
