"""Writes a Llama-shaped bf16 state_dict with torch.save (about 2 GiB) for the convert benchmark.

    python3 make_llama.py OUT.pt [LAYERS]

hidden 2048, intermediate 5632, vocab 32000, 18 layers: 1.06 G parameters, 1.97 GiB.
"""
import sys

import torch

out = sys.argv[1]
layers = int(sys.argv[2]) if len(sys.argv) > 2 else 18
h, inter, vocab = 2048, 5632, 32000
g = torch.Generator().manual_seed(0)


def w(*shape):
    return torch.randn(*shape, generator=g).to(torch.bfloat16)


sd = {"model.embed_tokens.weight": w(vocab, h)}
for i in range(layers):
    p = f"model.layers.{i}."
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        sd[p + f"self_attn.{name}.weight"] = w(h, h)
    sd[p + "mlp.gate_proj.weight"] = w(inter, h)
    sd[p + "mlp.up_proj.weight"] = w(inter, h)
    sd[p + "mlp.down_proj.weight"] = w(h, inter)
    sd[p + "input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    sd[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
sd["model.norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
sd["lm_head.weight"] = w(vocab, h)
torch.save(sd, out)
print(f"{sum(t.numel() for t in sd.values())/1e9:.2f} G parameters")
