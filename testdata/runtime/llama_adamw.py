#!/usr/bin/env python3
"""Writes a small Llama-style training checkpoint: {"model": state_dict, "optim": AdamW state}.

transformers' LlamaForCausalLM with dimensions that no mesh size divides evenly (vocab 61,
intermediate 44, 2 key-value heads of 4), in bfloat16, after two AdamW steps, so every
parameter has its step counter (a 0-dim CPU tensor) and its exp_avg / exp_avg_sq moments.
Deterministic (fixed seed, deterministic CPU kernels).

Usage (in the oracle chroot): python3 testdata/runtime/llama_adamw.py OUT.pt
"""

import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def main():
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    cfg = LlamaConfig(vocab_size=61, hidden_size=16, intermediate_size=44, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        ids = torch.randint(0, cfg.vocab_size, (2, 8))
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, sys.argv[1])


if __name__ == "__main__":
    main()
