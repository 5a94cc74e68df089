"""Torch's own --dtype casts between float16, bfloat16, float32 and float64, as golden hashes
for remap's converter (remap/cast_test.go). Run in the oracle from the repo root:

    scripts/oracle python testdata/cast/gen.py > testdata/cast/expected.json

Sources, each cast as one contiguous tensor (torch's vectorized kernels, as a checkpoint tensor
is): every 16-bit pattern of float16 and bfloat16; for float32 the boundary inputs of
testdata/quant/encode.inputs (every float16/bfloat16/float8 value, tie and neighbour, NaN
payloads); for float64 testdata/quant/float64.inputs (float32 ties, subnormals, NaN payloads)
followed by float64_extra below: ties around every float16/bfloat16 exponent and three NaNs
that land in the last partial block of torch's vectorized loop, which it converts with its
scalar code. The file records, per (from, to), the SHA-256 of the outputs' little-endian bytes,
and the float64_extra inputs.
"""
import hashlib
import json
import sys

import numpy as np
import torch

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


def raw(t):
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.contiguous().numpy().tobytes()


def float64_extra(before):
    out = []
    for e in range(0x3FF - 26, 0x3FF + 17):  # float16's range, subnormals included
        for m in (0, 1, 0x0000020000000000, 0x000001FFFFFFFFFF, 0x0000060000000000, 0x0000100000000000,
                  0x00000FFFFFFFFFFF, 0x0000300000000000, 0x000FFFFFFFFFFFFF):
            out += [(e << 52) | m, (1 << 63) | (e << 52) | m]
    nans = [0x7FF8000000000000, 0xFFF8000000000001, 0x7FF0000000000001]
    while (before + len(out) + len(nans)) % 16 != 5:  # the NaNs fall in a 5-element tail
        out.append(0x3FF0000000000000)
    return out + nans


f32 = np.fromfile("testdata/quant/encode.inputs", dtype=np.uint32)
f64 = np.fromfile("testdata/quant/float64.inputs", dtype=np.uint64)
extra = float64_extra(len(f64))
f64 = np.concatenate([f64, np.asarray(extra, dtype=np.uint64)])
u16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
sources = {
    "float16": torch.from_numpy(u16.view(np.int16).copy()).view(torch.float16),
    "bfloat16": torch.from_numpy(u16.view(np.int16).copy()).view(torch.bfloat16),
    "float32": torch.from_numpy(f32.view(np.int32).copy()).view(torch.float32),
    "float64": torch.from_numpy(f64.view(np.int64).copy()).view(torch.float64),
}
casts = {}
for src_name, x in sources.items():
    for dst_name, dst in DTYPES.items():
        if dst_name != src_name:
            casts["%s->%s" % (src_name, dst_name)] = hashlib.sha256(raw(x.to(dst))).hexdigest()
json.dump({"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
           "float64_extra": ["%016x" % v for v in extra], "casts": casts}, sys.stdout, indent=1, sort_keys=True)
print()
