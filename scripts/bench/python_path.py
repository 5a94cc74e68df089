"""The Python path ckpt convert is measured against, timed inside Python (torch imported first).

    python3 python_path.py SRC.pt OUT safetensors|torch [DTYPE]

safetensors: torch.load(mmap=True, weights_only=True) + safetensors.torch.save_file.
torch:       torch.load(mmap=True, weights_only=True) + torch.save.
DTYPE (e.g. bfloat16): between load and save, every floating tensor is cast with
v.to(getattr(torch, DTYPE)), as ckpt convert --dtype DTYPE does; other tensors are kept.
Prints seconds and peak RSS (MiB) as JSON.
"""
import json
import os
import resource
import sys
import time

import torch
from safetensors.torch import save_file

src, out, kind = sys.argv[1:4]
dtype = getattr(torch, sys.argv[4]) if len(sys.argv) > 4 else None
t0 = time.perf_counter()
sd = torch.load(src, mmap=True, weights_only=True)
if dtype is not None:
    sd = {k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()}
if kind == "safetensors":
    save_file(sd, out, metadata={"format": "pt"})
else:
    torch.save(sd, out)
with open(out, "rb+") as f:  # as ckpt does: the output is durable when the command returns
    os.fsync(f.fileno())
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
