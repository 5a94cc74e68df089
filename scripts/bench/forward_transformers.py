"""The transformers path ckpt forward is measured against: from_pretrained + one forward of
the given tokens on CPU, timed inside Python after the imports.

    python3 forward_transformers.py MODEL_DIR DTYPE TOKENS [OUT]

DTYPE is bfloat16 or float32; TOKENS comma-separated ids. With OUT the float32 logits are
written as the safetensors tensor "logits", as ckpt forward --out does. Prints the load and
forward seconds and the peak RSS (MiB) as JSON.
"""
import json
import resource
import sys
import time

import torch
import transformers
from safetensors.torch import save_file

src, dtype, tokens = sys.argv[1], getattr(torch, sys.argv[2]), sys.argv[3]
ids = torch.tensor([[int(t) for t in tokens.split(",")]])
t0 = time.perf_counter()
model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=dtype, attn_implementation="eager").eval()
t1 = time.perf_counter()
with torch.no_grad():
    logits = model(ids).logits.float()
if len(sys.argv) > 4:
    save_file({"logits": logits.contiguous()}, sys.argv[4])
t2 = time.perf_counter()
print(json.dumps({"load": t1 - t0, "forward": t2 - t1, "seconds": t2 - t0,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
