"""The Python path ckpt convert is measured against, timed inside Python (torch imported first).

    python3 python_path.py SRC.pt OUT safetensors|torch

safetensors: torch.load(mmap=True, weights_only=True) + safetensors.torch.save_file.
torch:       torch.load(mmap=True, weights_only=True) + torch.save.
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
t0 = time.perf_counter()
sd = torch.load(src, mmap=True, weights_only=True)
if kind == "safetensors":
    save_file(sd, out, metadata={"format": "pt"})
else:
    torch.save(sd, out)
with open(out, "rb+") as f:  # as ckpt does: the output is durable when the command returns
    os.fsync(f.fileno())
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
