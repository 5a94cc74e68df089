#!/usr/bin/env python3
"""Write the golden tables for package quant from real PyTorch.

Run it inside the oracle chroot (torch 2.14.1):

    scripts/oracle python testdata/quant/gen.py [OUTDIR]

OUTDIR defaults to testdata/quant.  Every value below is produced by torch
itself on the chroot's CPU (AVX512 here; the bfloat16 NaN bits depend on the
kernel path, see README.md).  The output is deterministic: two runs give
byte-identical files.

All binary files are little-endian arrays of unsigned integers holding IEEE
bit patterns; README.md lists them.
"""

import json
import os
import sys
import zlib

import numpy as np
import torch
from torch.testing._internal.common_quantized import (
    _f32_to_floatx_unpacked,
    _floatx_unpacked_to_f32,
    pack_uint4,
)

FP8 = [
    ("float8_e4m3fn", torch.float8_e4m3fn),
    ("float8_e5m2", torch.float8_e5m2),
    ("float8_e4m3fnuz", torch.float8_e4m3fnuz),
    ("float8_e5m2fnuz", torch.float8_e5m2fnuz),
    ("float8_e8m0fnu", torch.float8_e8m0fnu),
]
ENCODE = [("bfloat16", torch.bfloat16), ("float16", torch.float16)] + FP8
SEED = 20260814
RANDOM_UNIFORM = 14000  # uniformly random float32 bit patterns
RANDOM_MODERATE = 6000  # random float32 with exponent in [2^-30, 2^21)
CHUNK_BITS = 24  # exhaustive sweep: one CRC-32 per 2^24 consecutive inputs


def bits_u32(t):
    """uint32 numpy array of a float32 tensor's bit patterns."""
    return t.contiguous().view(torch.int32).numpy().view(np.uint32)


def f32(bits):
    """float32 tensor from an iterable of uint32 bit patterns."""
    a = np.asarray(bits, dtype=np.uint32)
    return torch.from_numpy(a.view(np.int32).copy()).view(torch.float32)


def u8_codes(dtype):
    """The 256 codes of an 8-bit dtype, in order."""
    return torch.arange(256, dtype=torch.uint8).view(dtype)


def boundary_inputs(values):
    """For sorted, distinct, non-negative finite float32 bit patterns of a target
    format: every value, every midpoint between neighbours (a tie), the float32
    neighbours of each midpoint, and the same past the largest value (the
    overflow threshold); both signs."""
    out = []
    vals = [float(np.uint32(v).view(np.float32)) for v in values]
    for i, v in enumerate(vals):
        out.append(values[i])
        hi = vals[i + 1] if i + 1 < len(vals) else vals[i] + (vals[i] - vals[i - 1])
        mid = np.float32((v + hi) / 2)  # exact: both are short binary fractions
        if np.isinf(mid):
            continue
        m = int(np.array(mid, dtype=np.float32).view(np.uint32))
        out += [m - 1, m, m + 1]
    return out + [b | 0x80000000 for b in out]


def fp8_finite_positive(dtype):
    v = u8_codes(dtype).float()
    keep = torch.isfinite(v) & (v >= 0)
    return sorted(set(int(b) for b in bits_u32(v[keep])))


def encode_inputs():
    """The float32 inputs of the encoder tables, in a fixed order, deduplicated."""
    special = [
        0x00000000, 0x7F800000,  # 0, inf
        0x7FC00000, 0x7F800001, 0x7FBFFFFF, 0x7FFFFFFF, 0x7FC00001,  # NaN payloads
        0x7FE00000, 0x7F802000, 0x7FA00000, 0x7F900000, 0x7F801FFF,
        0x7F7FFFFF, 0x00800000, 0x00000001, 0x007FFFFF,  # max, min normal/subnormal
        0x00400000, 0x00600000, 0x00400001, 0x003FFFFF, 0x00200000,
        0x3F800000, 0x3FC00000, 0x3FBFFFFF, 0x3FC00001, 0x7F3FFFFF, 0x7F400000,
    ]
    special += [b | 0x80000000 for b in special]
    out = list(special)
    # float8 and e8m0: every value, tie and neighbour.
    for _, dtype in FP8:
        out += boundary_inputs(fp8_finite_positive(dtype))
    # e8m0 rounds on the float32 exponent: ties at 1.5 * 2^k (normals) and at
    # 2^-128 (subnormal inputs), guard/round/sticky patterns for every exponent.
    for e in range(256):
        for m in (0x000000, 0x3FFFFF, 0x400000, 0x400001, 0x200000, 0x600000, 0x7FFFFF):
            out.append(e << 23 | m)
    # float16: all subnormals' ties near zero, the min normal and max boundaries,
    # and 400 sampled codes with their ties.
    rng = np.random.default_rng(SEED)
    h = torch.arange(0x7C00, dtype=torch.int32).to(torch.int16).view(torch.float16)
    hv = bits_u32(h.float())
    pick = sorted(set(list(range(0, 64)) + list(range(0x3C0, 0x440)) +
                  list(range(0x7BC0, 0x7C00)) + rng.integers(0, 0x7C00, 400).tolist()))
    for i in pick:
        hi = hv[i + 1] if i + 1 < len(hv) else None
        out.append(int(hv[i]))
        if hi is None:  # past 65504: the overflow threshold 65520
            mid = 0x477FF000
        else:
            mid = int(np.float32((float(hv[i].view(np.float32)) + float(hi.view(np.float32))) / 2).view(np.uint32))
        out += [mid - 1, mid, mid + 1, mid | 0x80000000]
    # bfloat16: low halves around the tie for sampled high halves (odd and even),
    # the subnormal ties and the overflow to inf.
    highs = rng.integers(0, 0x7F80, 300).tolist() + [0x0000, 0x0001, 0x0002, 0x007F, 0x0080, 0x7F7E, 0x7F7F]
    for hi in highs:
        for lo in (0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF):
            b = hi << 16 | lo
            out += [b, b | 0x80000000]
    out += rng.integers(0, 1 << 32, RANDOM_UNIFORM, dtype=np.uint64).tolist()
    sign = rng.integers(0, 2, RANDOM_MODERATE, dtype=np.uint64) << 31
    exp = rng.integers(127 - 30, 127 + 21, RANDOM_MODERATE, dtype=np.uint64) << 23
    man = rng.integers(0, 1 << 23, RANDOM_MODERATE, dtype=np.uint64)
    out += (sign | exp | man).tolist()
    seen, uniq = set(), []
    for b in out:
        b = int(b) & 0xFFFFFFFF
        if b not in seen:
            seen.add(b)
            uniq.append(b)
    return uniq


def float64_inputs():
    """float64 inputs for the float64 -> float32 table: specials, float32 ties
    (normal, subnormal, overflow threshold), NaN payloads, random patterns."""
    rng = np.random.default_rng(SEED + 1)
    special = [
        0x0000000000000000, 0x7FF0000000000000, 0x7FF8000000000000, 0x7FF0000000000001,
        0x7FF7FFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF, 0x7FF0000020000000, 0x7FF000001FFFFFFF,
        0x7FEFFFFFFFFFFFFF, 0x0000000000000001, 0x0010000000000000,
        0x47EFFFFFE0000000, 0x47EFFFFFDFFFFFFF, 0x47EFFFFFF0000000, 0x47F0000000000000,  # FLT_MAX, its tie
        0x36A0000000000000, 0x3690000000000000, 0x3690000000000001, 0x368FFFFFFFFFFFFF,  # 2^-149, tie to 0
        0x36A8000000000000, 0x36B4000000000000, 0x380FFFFFF0000000, 0x380FFFFFE0000000,  # subnormal ties
        0x3FF0000010000000, 0x3FF0000030000000, 0x3FF0000010000001,  # normal ties (even/odd)
    ]
    special += [b | 1 << 63 for b in special]
    rand = rng.integers(0, 1 << 63, 2000, dtype=np.uint64) * 2 + rng.integers(0, 2, 2000, dtype=np.uint64)
    sign = rng.integers(0, 2, 2000, dtype=np.uint64) << 63
    exp = rng.integers(1023 - 160, 1023 + 130, 2000, dtype=np.uint64) << 52
    man = rng.integers(0, 1 << 52, 2000, dtype=np.uint64)
    return special + rand.tolist() + (sign | exp | man).tolist()


def fp4_tables():
    """float4_e2m1fn_x2: torch 2.14 cannot cast it (no copy_kernel), so the values
    come from torch's own reference utilities: pack_uint4 defines which nibble
    holds the even element, _floatx_unpacked_to_f32 decodes a nibble.  The bytes
    are also viewed as torch.float4_e2m1fn_x2 and back to check the dtype is a
    plain byte container."""
    pairs = torch.cartesian_prod(torch.arange(16), torch.arange(16)).to(torch.uint8)  # [256, 2]: (even, odd)
    packed = pack_uint4(pairs).reshape(-1)
    x2 = packed.view(torch.float4_e2m1fn_x2)
    assert torch.equal(x2.view(torch.uint8), packed)
    vals = _floatx_unpacked_to_f32(pairs.reshape(-1), 2, 1).reshape(256, 2)
    # Round trip through torch's float32 -> e2m1 rounding utility.
    assert torch.equal(_f32_to_floatx_unpacked(vals.reshape(-1), 2, 1), pairs.reshape(-1))
    table = np.zeros((256, 2), dtype=np.uint32)
    table[packed.numpy()] = bits_u32(vals)
    assert len(set(packed.tolist())) == 256
    return table


def crc_sweep(dtype):
    """CRC-32 of torch's bytes for every float32 bit pattern, per 2^24 chunk."""
    n = 1 << CHUNK_BITS
    base = torch.arange(n, dtype=torch.int32)
    buf = torch.empty(n, dtype=torch.int32)
    crcs = []
    for k in range(1 << (32 - CHUNK_BITS)):
        off = k << CHUNK_BITS
        if off >= 1 << 31:
            off -= 1 << 32
        torch.add(base, off, out=buf)
        y = buf.view(torch.float32).to(dtype)
        crcs.append("%08x" % zlib.crc32(y.view(torch.uint8).numpy()))
    return crcs


def write(outdir, name, array):
    with open(os.path.join(outdir, name), "wb") as f:
        f.write(np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes())


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "testdata/quant"
    os.makedirs(outdir, exist_ok=True)

    for name, dtype in FP8:
        write(outdir, name + ".decode", bits_u32(u8_codes(dtype).float()))
        write(outdir, name + ".bfloat16", u8_codes(dtype).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))
    write(outdir, "float4_e2m1fn_x2.decode", fp4_tables())
    for name, dtype in [("bfloat16", torch.bfloat16), ("float16", torch.float16)]:
        codes = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(dtype)
        write(outdir, name + ".decode", bits_u32(codes.float()))

    inputs = encode_inputs()
    x = f32(inputs)
    write(outdir, "encode.inputs", np.asarray(inputs, dtype=np.uint32))
    for name, dtype in ENCODE:
        y = x.to(dtype).view(torch.uint8).numpy()
        write(outdir, "encode." + name, y.view(np.uint16) if dtype.itemsize == 2 else y)

    d = float64_inputs()
    dt = torch.from_numpy(np.asarray(d, dtype=np.uint64).view(np.int64).copy()).view(torch.float64)
    write(outdir, "float64.inputs", np.asarray(d, dtype=np.uint64))
    write(outdir, "float64.float32", bits_u32(dt.to(torch.float32)))

    sweep = {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "chunk_bits": CHUNK_BITS,
        "crc32": {name: crc_sweep(dtype) for name, dtype in ENCODE},
    }
    with open(os.path.join(outdir, "exhaustive.json"), "w") as f:
        json.dump(sweep, f, indent=0, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
