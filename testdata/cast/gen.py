"""Torch's own --dtype casts between float16, bfloat16, float32 and float64, as golden values
for remap's converter (remap/cast_test.go). Run in the oracle from the repo root:

    scripts/oracle python testdata/cast/gen.py > testdata/cast/expected.json

Sources: every 16-bit pattern for float16 and bfloat16 (65 536 values), and for float32 and
float64 the special patterns (zeros, subnormals, infinities, quiet and signalling NaNs with
payloads, rounding midpoints around each target's precision and range, random values). Each
source is cast as one contiguous tensor (torch's vectorized kernels, as a checkpoint tensor
is) and, for the special patterns, also element by element (its scalar path), since the two
paths disagree on some NaNs. The file records the special inputs, and per (from, to) the
SHA-256 of both paths' outputs (little-endian bytes), the vectorized outputs of the specials
and where the scalar path differs from them.
"""
import hashlib
import json
import random
import sys

import torch

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}
INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def from_bits(bits, dt):
    size = torch.empty(0, dtype=dt).element_size()
    raw = b"".join(b.to_bytes(size, "little") for b in bits)
    return torch.frombuffer(bytearray(raw), dtype=dt).clone()


def raw(t):
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.contiguous().numpy().tobytes()


def specials32():
    rnd = random.Random(0)
    out = [0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
           0x7F800000, 0xFF800000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FC00000, 0x7FC00001,
           0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F810000, 0x7F80FFFF]
    for e in range(0, 256):  # every exponent, with the low bits that decide each rounding
        for m in (0, 1, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001, 0x18000, 0x7FFFFF):
            out.append((e << 23) | m)
            out.append(0x80000000 | (e << 23) | m)
    out += [rnd.getrandbits(32) for _ in range(300)]
    return out


def specials64():
    rnd = random.Random(1)
    out = [0, 1 << 63, 1, 0x000FFFFFFFFFFFFF, 0x0010000000000000, 0x7FEFFFFFFFFFFFFF,
           0x7FF0000000000000, 0xFFF0000000000000, 0x7FF0000000000001, 0x7FF4000000000000,
           0x7FF8000000000000, 0x7FF8000000000001, 0xFFF8000000000000, 0x7FFFFFFFFFFFFFFF]
    for e in range(0x380 - 30, 0x480 + 2):  # float32/16 ranges, subnormals included
        for m in (0, 1, 0x0FFFFFFF, 0x10000000, 0x10000001, 0x0000020000000000, 0x000FFFFFFFFFFFFF,
                  0x0000100000000000, 0x0000080000000000, 0x0000180000000000):
            out.append((e << 52) | m)
            out.append((1 << 63) | (e << 52) | m)
    out += [rnd.getrandbits(64) for _ in range(300)]
    # NaNs at the very end: torch converts the last partial block with its scalar code.
    out += [0x7FF8000000000000, 0xFFF8000000000001, 0x7FF0000000000001]
    return out


def hexes(b, size):
    return ["%x" % int.from_bytes(b[i:i + size], "little") for i in range(0, len(b), size)]


casts, inputs = {}, {}
sources = {
    "float16": list(range(65536)),
    "bfloat16": list(range(65536)),
    "float32": specials32(),
    "float64": specials64(),
}
for src_name, bits in sources.items():
    x = from_bits(bits, DTYPES[src_name])
    exhaustive = src_name in ("float16", "bfloat16")
    if not exhaustive:
        inputs[src_name] = ["%x" % b for b in bits]
    for dst_name, dst in DTYPES.items():
        if dst_name == src_name:
            continue
        vec = raw(x.to(dst))
        scal = b"".join(raw(x[i:i + 1].to(dst)) for i in range(len(bits)))
        size = torch.empty(0, dtype=dst).element_size()
        entry = {"sha256": hashlib.sha256(vec).hexdigest(), "scalar_sha256": hashlib.sha256(scal).hexdigest()}
        if not exhaustive:
            entry["outputs"] = hexes(vec, size)
            entry["scalar_differs"] = {str(i): s for i, (v, s) in enumerate(zip(hexes(vec, size), hexes(scal, size))) if v != s}
        casts["%s->%s" % (src_name, dst_name)] = entry
json.dump({"torch": torch.__version__, "inputs": inputs, "casts": casts}, sys.stdout, separators=(",", ":"), sort_keys=True)
print()
