"""The reference side of scripts/bench/dequant.sh, in the oracle.

    python3 dequant_ref.py make DIR     write DIR/fp8 and DIR/mxfp4 (Hugging Face folders)
    python3 dequant_ref.py time DIR     time the reference dequantizers on them

make: DIR/fp8 holds one 8192x8192 float8_e4m3fn weight with float32 128x128 block scales
(quant_method "fp8"); DIR/mxfp4 one gpt-oss-120b-sized expert tensor, 32 experts x 2880 x
2880 as uint8 *_blocks [32, 2880, 90, 16] + *_scales [32, 2880, 90] (quant_method "mxfp4").
Codes are uniformly random bytes; scales are what real checkpoints hold.

time: loads each tensor, then runs transformers 5.12.1's own dequantizers on it with torch's
default threads (one per core): Fp8Dequantize._dequantize_one (to bfloat16 and float32) and
convert_moe_packed_tensors (to bfloat16), best of RUNS. Prints one JSON line per case:
{"case", "elements", "seconds", "sha256"} (sha256 of the output's bytes).
"""
import hashlib
import json
import os
import sys
import time

import torch
from safetensors.torch import load_file, save_file
from transformers.integrations.finegrained_fp8 import Fp8Dequantize
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

RUNS = 3


def write(folder, config, tensors):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "bench", "quantization_config": config}, f, indent=2)
    save_file(tensors, os.path.join(folder, "model.safetensors"))


def make(d):
    g = torch.Generator().manual_seed(1)
    q = torch.randint(0, 256, (8192, 8192), dtype=torch.uint8, generator=g).view(torch.float8_e4m3fn)
    s = torch.rand((64, 64), generator=g) * 1e-3 + 1e-4
    write(os.path.join(d, "fp8"), {"quant_method": "fp8", "weight_block_size": [128, 128]},
          {"model.layers.0.mlp.down_proj.weight": q, "model.layers.0.mlp.down_proj.weight_scale_inv": s})
    b = torch.randint(0, 256, (32, 2880, 90, 16), dtype=torch.uint8, generator=g)
    e = torch.randint(115, 135, (32, 2880, 90), dtype=torch.uint8, generator=g)
    write(os.path.join(d, "mxfp4"), {"quant_method": "mxfp4"},
          {"model.layers.0.mlp.experts.down_proj_blocks": b, "model.layers.0.mlp.experts.down_proj_scales": e})


def best(case, fn, elements):
    secs, out = [], None
    for _ in range(RUNS if elements < 1e9 // 4 else 2):
        out = None
        t0 = time.perf_counter()
        out = fn()
        secs.append(time.perf_counter() - t0)
    digest = hashlib.sha256(out.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
    print(json.dumps({"case": case, "elements": elements, "seconds": min(secs), "sha256": digest}), flush=True)


def run(d):
    t = load_file(os.path.join(d, "fp8", "model.safetensors"))
    q, s = t["model.layers.0.mlp.down_proj.weight"], t["model.layers.0.mlp.down_proj.weight_scale_inv"]
    deq = Fp8Dequantize(None)
    for dtype in (torch.bfloat16, torch.float32):
        best(f"fp8-block {str(dtype)[6:]}", lambda: deq._dequantize_one(q, s, output_dtype=dtype), q.numel())
    del q, s, t
    t = load_file(os.path.join(d, "mxfp4", "model.safetensors"))
    b, e = t["model.layers.0.mlp.experts.down_proj_blocks"], t["model.layers.0.mlp.experts.down_proj_scales"]
    best("mxfp4 bfloat16", lambda: convert_moe_packed_tensors(b, e), b.numel() * 2)


make(sys.argv[2]) if sys.argv[1] == "make" else run(sys.argv[2])
