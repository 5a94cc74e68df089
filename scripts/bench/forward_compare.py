"""Max abs difference between the "logits" tensors of safetensors files, against the first.

    python3 forward_compare.py REF.safetensors OTHER.safetensors...
"""
import sys

from safetensors.torch import load_file

ref = load_file(sys.argv[1])["logits"].float()
for p in sys.argv[2:]:
    x = load_file(p)["logits"].float()
    d = (x - ref).abs()
    top1 = (x.argmax(-1) == ref.argmax(-1)).float().mean().item()
    print(f"| {p.split('/')[-1]} | {d.max().item():.3g} | {d.mean().item():.3g} | {top1:.3f} |")
