"""Fixtures for formats/safetensors, written by torch 2.14 + safetensors 0.8 in the oracle.

    scripts/oracle python testdata/safetensors/gen.py            regenerate every fixture
    scripts/oracle python testdata/safetensors/gen.py list FILE  print FILE as safetensors loads it

Writes, next to this script:
  every_dtype.safetensors  save_file output: one tensor of every dtype safetensors 0.8 writes from
                           torch (interesting bit patterns: NaN, inf, -0, subnormals, all 256
                           codes of the 8/4-bit floats), 0-dim and empty tensors, odd names, and
                           three __metadata__ entries.
  every_dtype.json         that file as safetensors lists it: {"tensors": [{name, dtype (torch),
                           shape (torch), nbytes, sha256 of the contiguous LE bytes}] in offset
                           order, "metadata": {...}, "versions": {...}}.
  crafted/*.safetensors    hand-made files: F6 and unknown dtypes, and hostile headers.
  crafted.json             {file: {"what", "safe_open": "ok" or the error text,
                           "get_tensor": {name: "ok" or error}}}: what safetensors says of each.
"""

import hashlib
import json
import os
import random
import struct
import sys

import safetensors
import torch
from safetensors import safe_open
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def listing(path):
    """The tensors of path as safetensors' torch loader returns them, in offset order."""
    out = []
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
        for name in f.offset_keys():
            t = f.get_tensor(name)
            raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            out.append({
                "name": name,
                "dtype": str(t.dtype).removeprefix("torch."),
                "shape": list(t.shape),
                "nbytes": len(raw),
                "sha256": hashlib.sha256(raw).hexdigest(),
            })
    return {"tensors": out, "metadata": meta}


def from_bytes(raw, dtype, shape):
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape).clone()


def patterns(width, special, count, rng):
    """count little-endian words of width bytes: the special bit patterns, then random ones."""
    words = list(special) + [rng.getrandbits(8 * width) for _ in range(count - len(special))]
    return b"".join(w.to_bytes(width, "little") for w in words[:count])


def every_dtype():
    rng = random.Random(20260514)
    all256 = bytes(range(256))
    p16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0x7BFF, 0x7C00, 0xFC00, 0x7E00,
           0x7C01, 0xFE00, 0xFFFF, 0x007F, 0x0080, 0x3F80, 0x7F7F, 0x7F80, 0xFF80, 0x7FC0, 0x7F81]
    p32 = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x3F800000, 0x7F7FFFFF,
           0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x7FFFFFFF]
    p64 = [0, 1 << 63, 1, 0x000FFFFFFFFFFFFF, 0x0010000000000000, 0x3FF0000000000000,
           0x7FEFFFFFFFFFFFFF, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000,
           0x7FF0000000000001, 0xFFFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF]
    t = {}
    t["t.bool"] = torch.tensor([[True, False, True], [False, False, True]])
    for name, dt in [("u8", torch.uint8), ("i8", torch.int8), ("f8_e4m3fn", torch.float8_e4m3fn),
                     ("f8_e5m2", torch.float8_e5m2), ("f8_e4m3fnuz", torch.float8_e4m3fnuz),
                     ("f8_e5m2fnuz", torch.float8_e5m2fnuz), ("f8_e8m0fnu", torch.float8_e8m0fnu),
                     ("f4_e2m1fn_x2", torch.float4_e2m1fn_x2)]:
        t["t." + name] = from_bytes(all256, dt, (16, 16))
    for name, dt in [("f16", torch.float16), ("bf16", torch.bfloat16), ("i16", torch.int16),
                     ("u16", torch.uint16)]:
        t["t." + name] = from_bytes(patterns(2, p16, 32, rng), dt, (4, 8))
    for name, dt in [("f32", torch.float32), ("i32", torch.int32), ("u32", torch.uint32)]:
        t["t." + name] = from_bytes(patterns(4, p32, 24, rng), dt, (2, 3, 4))
    for name, dt in [("f64", torch.float64), ("i64", torch.int64), ("u64", torch.uint64)]:
        t["t." + name] = from_bytes(patterns(8, p64, 15, rng), dt, (3, 5))
    t["t.c64"] = from_bytes(patterns(4, p32, 26, rng), torch.complex64, (13,))
    # 0-dim tensors.
    t["scalar.f32"] = from_bytes(struct.pack("<I", 0x7FC00001), torch.float32, ())
    t["scalar.bf16"] = from_bytes(struct.pack("<H", 0x8001), torch.bfloat16, ())
    t["scalar.bool"] = torch.tensor(True)
    t["scalar.i64"] = torch.tensor(-(1 << 63))
    t["scalar.f8_e4m3fn"] = from_bytes(b"\x7f", torch.float8_e4m3fn, ())
    t["scalar.c64"] = from_bytes(struct.pack("<II", 0x80000000, 0x7F800000), torch.complex64, ())
    # Empty tensors (each sorts right before a non-empty tensor of its dtype, so no two share an
    # offset and the offset order is unambiguous).
    t["empty.f32"] = torch.empty((3, 0, 2), dtype=torch.float32)
    t["empty.u8"] = torch.empty((0,), dtype=torch.uint8)
    t["empty.f4_e2m1fn_x2"] = torch.empty((0, 4), dtype=torch.float4_e2m1fn_x2)
    t["zz.empty.f4_e2m1fn_x2"] = torch.empty((2, 0), dtype=torch.float4_e2m1fn_x2)
    t["empty.bf16"] = torch.empty((0,), dtype=torch.bfloat16)
    # Names that exercise JSON escaping, and a realistic one.
    t['odd "name"\n\té/ünï<&>\u2028\x7f\x01'] = torch.arange(5, dtype=torch.uint8)
    t["model.layers.0.self_attn.q_proj.weight"] = from_bytes(patterns(2, p16, 12, rng), torch.bfloat16, (3, 4))
    meta = {"format": "pt", "note": 'é "q"\n\t<&>', "producer": "testdata/safetensors/gen.py"}
    path = os.path.join(HERE, "every_dtype.safetensors")
    # safetensors writes __metadata__ in Rust HashMap order, which changes from call to call;
    # keep the first file whose order is sorted, which is the order ckpt's writer uses.
    for _ in range(200):
        save_file(t, path, metadata=meta)
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
        if list(hdr["__metadata__"]) == sorted(meta):
            break
    else:
        sys.exit("no save_file call wrote sorted __metadata__")
    os.chmod(path, 0o644)  # save_file writes through a 0600 temporary file
    ranges = [tuple(v["data_offsets"]) for k, v in hdr.items() if k != "__metadata__"]
    assert len(set(ranges)) == len(ranges), "two tensors share data_offsets"
    out = listing(path)
    out["versions"] = {"torch": torch.__version__, "safetensors": safetensors.__version__}
    with open(os.path.join(HERE, "every_dtype.json"), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


def header_file(header, data=b"", pad=True):
    """A file with the given JSON header text, space-padded to a multiple of 8 like the writer."""
    h = header.encode() if isinstance(header, str) else header
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def entry(name, dtype, shape, begin, end):
    return '"%s":{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}' % (
        name, dtype, json.dumps(shape, separators=(",", ":")), begin, end)


def crafted():
    a4 = entry("a", "F32", [1], 0, 4)
    files = {
        # Valid for the reference's header check; torch cannot load F6.
        "f6": ("F6 tensors laid out as the Rust writer would (F6_E3M2 sorts before F6_E2M3)",
               header_file("{" + ",".join([
                   entry("w.f32", "F32", [2], 0, 8),
                   entry("w.e3m2", "F6_E3M2", [2, 4], 8, 14),
                   entry("w.e2m3", "F6_E2M3", [4], 14, 17)]) + "}",
                   struct.pack("<ff", 1.5, -2.0) + bytes(range(0x40, 0x49)))),
        "unknown_dtype": ("a well-formed dtype string safetensors 0.8 does not know",
                          header_file("{" + entry("x", "F128", [1], 0, 16) + "," +
                                      entry("y", "U8", [2], 16, 18) + "}", bytes(range(18)))),
        "f4_odd_last_dim": ("F4 with an odd last dimension: a valid header, not a torch tensor",
                            header_file("{" + entry("q", "F4", [2, 3], 0, 3) + "}", b"\x12\x34\x56")),
        "deep_ok": ("125 nested arrays in an ignored field: the deepest serde_json accepts",
                    header_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":%s}}'
                                % ("[" * 125 + "]" * 125), b"\0\0\x80\x3f")),
        "metadata_only": ("no tensors, only metadata", header_file('{"__metadata__":{"k":"v"}}')),
        # Hostile files.
        "short": ("file shorter than the length field", b"\x10\x00\x00\x00\x00"),
        "header_too_large": ("header length 2^62", struct.pack("<Q", 1 << 62) + b"{}"),
        "header_past_eof": ("header length past the end of the file", struct.pack("<Q", 1000) + b"{}" + b" " * 14),
        "empty_header": ("zero-length header", struct.pack("<Q", 0)),
        "not_utf8_name": ("raw 0xff byte in a tensor name",
                          header_file(b'{"a\xffb":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4)),
        "lone_surrogate": ("tensor name escaping a lone UTF-16 surrogate",
                           header_file('{"a\\ud800b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4)),
        "not_object": ("header is a JSON array", header_file("[]")),
        "trailing_json": ("non-space bytes after the header object", header_file("{" + a4 + "} x", b"\0" * 4)),
        "dup_tensor": ("the same tensor name twice (reference: last wins)",
                       header_file("{" + a4 + "," + entry("a", "U8", [4], 0, 4) + "}", b"\0" * 4)),
        "dup_field": ("dtype twice in one entry",
                      header_file('{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4)),
        "dup_metadata_key": ("a __metadata__ key twice",
                             header_file('{"__metadata__":{"k":"1","k":"2"},' + a4 + "}", b"\0" * 4)),
        "metadata_not_string": ("__metadata__ value is a number",
                                header_file('{"__metadata__":{"k":1},' + a4 + "}", b"\0" * 4)),
        "metadata_null": ("__metadata__ is null", header_file('{"__metadata__":null,' + a4 + "}", b"\0" * 4)),
        "entry_array": ("tensor entry in serde's sequence form", header_file('{"a":["F32",[1],[0,4]]}', b"\0" * 4)),
        "dtype_map": ("dtype in serde's enum-map form",
                      header_file('{"a":{"dtype":{"F32":null},"shape":[1],"data_offsets":[0,4]}}', b"\0" * 4)),
        "dtype_malformed": ("dtype string that is no dtype", header_file("{" + entry("a", "f32", [1], 0, 4) + "}", b"\0" * 4)),
        "missing_offsets": ("entry without data_offsets", header_file('{"a":{"dtype":"F32","shape":[1]}}', b"\0" * 4)),
        "offsets_three": ("data_offsets with three numbers",
                          header_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}}', b"\0" * 4)),
        "shape_negative": ("negative dimension", header_file('{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}', b"\0" * 4)),
        "shape_float": ("dimension written as a float", header_file('{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}', b"\0" * 4)),
        "shape_huge_zero": ("dimension beyond int64 next to a 0 (0 bytes)",
                            header_file('{"a":{"dtype":"U8","shape":[0,18446744073709551615],"data_offsets":[0,0]}}')),
        "too_deep": ("126 nested arrays in an ignored field",
                     header_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":%s}}'
                                 % ("[" * 126 + "]" * 126), b"\0" * 4)),
        "overlap": ("second tensor starts inside the first",
                    header_file("{" + entry("a", "F32", [2], 0, 8) + "," + entry("b", "F32", [1], 4, 8) + "}", b"\0" * 8)),
        "gap": ("two bytes between tensors",
                header_file("{" + a4 + "," + entry("b", "F32", [1], 6, 10) + "}", b"\0" * 10)),
        "not_at_zero": ("first tensor starts at 4", header_file("{" + entry("a", "F32", [1], 4, 8) + "}", b"\0" * 8)),
        "end_before_begin": ("data_offsets [4, 0]", header_file("{" + entry("a", "F32", [0], 4, 0) + "}")),
        "shape_overflow": ("element count overflows u64 before a 0 dimension",
                           header_file("{" + entry("a", "U8", [1 << 32, 1 << 32, 0], 0, 0) + "}")),
        "bits_overflow": ("element count fits, size in bits does not",
                          header_file("{" + entry("a", "U64", [1 << 61], 0, 0) + "}")),
        "f4_odd_count": ("three F4 values: 12 bits", header_file("{" + entry("a", "F4", [3], 0, 2) + "}", b"\0\0")),
        "size_mismatch": ("F32 [2] with 4 bytes",
                          header_file("{" + a4 + "," + entry("b", "F32", [2], 4, 8) + "}", b"\0" * 8)),
        "trailing_bytes": ("one byte after the last tensor", header_file("{" + a4 + "}", b"\0" * 5)),
        "truncated": ("last tensor cut short",
                      header_file("{" + a4 + "," + entry("b", "F32", [2], 4, 12) + "}", b"\0" * 10)),
    }
    d = os.path.join(HERE, "crafted")
    os.makedirs(d, exist_ok=True)
    report = {}
    for name, (what, blob) in sorted(files.items()):
        path = os.path.join(d, name + ".safetensors")
        with open(path, "wb") as f:
            f.write(blob)
        rec = {"what": what}
        try:
            with safe_open(path, framework="pt") as f:
                rec["safe_open"] = "ok"
                got = {}
                for k in f.keys():
                    try:
                        f.get_tensor(k)
                        got[k] = "ok"
                    except Exception as e:  # record the loader's verdict, whatever it is
                        got[k] = str(e).split("\n")[0]
                rec["get_tensor"] = got
        except Exception as e:
            rec["safe_open"] = str(e)
        report[name] = rec
    with open(os.path.join(HERE, "crafted.json"), "w") as f:
        json.dump(report, f, indent=1, ensure_ascii=False, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "list":
        json.dump(listing(sys.argv[2]), sys.stdout, ensure_ascii=False)
    elif len(sys.argv) == 1:
        every_dtype()
        crafted()
    else:
        sys.exit(__doc__)
