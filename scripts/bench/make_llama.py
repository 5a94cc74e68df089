"""Writes a Llama-shaped state_dict with torch.save for the convert benchmark.

    python3 make_llama.py OUT.pt [LAYERS] [DTYPE]

hidden 2048, intermediate 5632, vocab 32000. LAYERS defaults to 18: 1.06 G parameters.
DTYPE is bfloat16 (default; 2.11 GB with 18 layers) or float32 (full-precision values, not
rounded to bfloat16: 2.17 GB with 8 layers, 0.54 G parameters). The weights come from the
same seeded generator, drawn in the same order, whatever the dtype.
"""
import sys

import torch

out = sys.argv[1]
layers = int(sys.argv[2]) if len(sys.argv) > 2 else 18
dtype = getattr(torch, sys.argv[3] if len(sys.argv) > 3 else "bfloat16")
assert dtype in (torch.bfloat16, torch.float32), sys.argv[3]
h, inter, vocab = 2048, 5632, 32000
g = torch.Generator().manual_seed(0)


def w(*shape):
    return torch.randn(*shape, generator=g).to(dtype)


sd = {"model.embed_tokens.weight": w(vocab, h)}
for i in range(layers):
    p = f"model.layers.{i}."
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        sd[p + f"self_attn.{name}.weight"] = w(h, h)
    sd[p + "mlp.gate_proj.weight"] = w(inter, h)
    sd[p + "mlp.up_proj.weight"] = w(inter, h)
    sd[p + "mlp.down_proj.weight"] = w(h, inter)
    sd[p + "input_layernorm.weight"] = torch.ones(h, dtype=dtype)
    sd[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=dtype)
sd["model.norm.weight"] = torch.ones(h, dtype=dtype)
sd["lm_head.weight"] = w(vocab, h)
torch.save(sd, out)
print(f"{sum(t.numel() for t in sd.values())/1e9:.2f} G parameters")
