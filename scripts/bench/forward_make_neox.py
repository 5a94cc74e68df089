"""Writes the forward benchmark's second model: a Pythia-410M-shaped random GPT-NeoX (hidden
1024, 24 layers, 16 heads, intermediate 4096, vocab 50304, rotary on a quarter of each head,
parallel residual, untied embed_out) as a bfloat16 Hugging Face folder (about 0.8 GB of
safetensors).

    python3 forward_make_neox.py OUTDIR
"""
import sys

import torch
import transformers

out = sys.argv[1]
torch.manual_seed(0)
cfg = transformers.GPTNeoXConfig(
    vocab_size=50304, hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
    max_position_embeddings=2048, layer_norm_eps=1e-5, use_parallel_residual=True, tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})
with torch.device("cpu"):
    model = transformers.GPTNeoXForCausalLM(cfg).to(torch.bfloat16).eval()
with torch.no_grad():
    for p in model.parameters():
        if p.dim() > 1:
            p.normal_(0, 0.02)
model.save_pretrained(out)
print(f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} G parameters")
