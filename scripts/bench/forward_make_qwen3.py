"""Writes the forward benchmark's model: a Qwen3-0.6B-shaped random model (hidden 1024,
28 layers, intermediate 3072, vocab 151936, 16 heads, 8 KV heads, head_dim 128, tied
embeddings) as a bfloat16 Hugging Face folder (about 1.19 GB of safetensors).

    python3 forward_make_qwen3.py OUTDIR
"""
import sys

import torch
import transformers

out = sys.argv[1]
torch.manual_seed(0)
cfg = transformers.Qwen3Config(
    vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
    num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
    rms_norm_eps=1e-6, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
with torch.device("cpu"):
    model = transformers.Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
with torch.no_grad():
    for p in model.parameters():
        if p.dim() > 1:
            p.normal_(0, 0.02)
model.save_pretrained(out)
print(f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} G parameters")
