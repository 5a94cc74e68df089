#!/usr/bin/env python3
"""Generate the torch.save fixtures in testdata/torch/ and their JSON listings.

Run it inside the oracle chroot (real PyTorch 2.14):

    scripts/oracle python testdata/torch/gen.py

For every fixture NAME.pt it writes NAME.json, which is what torch itself
reports after torch.load of that file (see README.md for the schema).

Determinism
-----------
* Every fixture builder starts with torch.manual_seed(0) / np.random.default_rng(0).
* Zip archives carry no timestamps and their serialization_id is derived from
  record names and CRCs, so they are byte-identical between runs.
* Legacy (_use_new_zipfile_serialization=False) files use str(storage._cdata),
  a heap address, as storage key.  To make those reproducible too the script
  re-executes itself once with address-space randomisation turned off
  (personality(ADDR_NO_RANDOMIZE)); the heap layout, and so the keys, then
  repeat from run to run on the same machine and torch build.  The heap layout
  also depends on everything the process allocated before, including the text
  of this script: editing gen.py may change the legacy keys (and so the legacy
  .pt bytes) once; the JSON listings never depend on them.

Location tags ("cuda:0" on a machine without CUDA)
--------------------------------------------------
torch.save asks torch.serialization.location_tag(storage) for the tag; that
walks torch.serialization._package_registry (priority, tagger, deserializer),
lowest priority first, and the first tagger returning a non-empty string wins
(the cpu tagger has priority 10).  The hook used here is the public
torch.serialization.register_package(): `tag_storages_as("cuda:0")` registers a
tagger with priority 0 that returns "cuda:0" for CPU storages (except the ones
the caller wants to stay "cpu": it returns None for those, so the cpu tagger
answers), plus a deserializer that always returns None (never used for
loading).  Afterwards the entry is removed from _package_registry again, the
only private touch.  Nothing else of torch is patched; the files are written by
torch's own _save/_legacy_save.

Loading the cuda:0 files works on this CPU-only machine because the listing
passes a map_location callable, which receives every storage with its tag as
saved and returns it unchanged (tags are recorded by storage identity).

Hashing
-------
sha256 is over the tensor's logical contiguous little-endian bytes:
t.resolve_conj().resolve_neg().contiguous(), then the raw bytes of that
contiguous tensor read through its untyped storage (dtype-agnostic, so it also
works for bits*/float4/float8 dtypes, whose kernels are partly missing: e.g.
eq is not implemented for bits*).  Quantized tensors hash t.int_repr() instead
(for quint4x2/quint2x4 int_repr is the *packed* bytes: 2 resp. 4 values per
byte).  Every dtype torch 2.14 can save can also be hashed this way.

nbytes is the length of the hashed byte string: numel * element_size, except
for quint4x2 / quint2x4 where torch's own t.nbytes (numel * 1) overstates the
data; there it is the packed size ceil(numel/2) / ceil(numel/4), i.e. what the
file actually holds for a contiguous tensor.
"""

import argparse
import collections
import contextlib
import ctypes
import hashlib
import io
import json
import math
import os
import pickletools
import struct
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ADDR_NO_RANDOMIZE = 0x0040000


def _disable_aslr_and_reexec():
    """Re-exec this script once with ASLR off (deterministic legacy storage keys)."""
    if os.environ.get("CKPT_GEN_NO_ASLR") == "1":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        cur = libc.personality(0xFFFFFFFF)
        if cur == -1 or libc.personality(cur | ADDR_NO_RANDOMIZE) == -1:
            raise OSError(ctypes.get_errno(), "personality failed")
    except Exception as e:  # keep going; only legacy keys become random
        print(f"note: cannot disable ASLR ({e}); legacy .pt bytes will vary", file=sys.stderr)
        return
    os.environ["CKPT_GEN_NO_ASLR"] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable] + sys.argv)


if __name__ == "__main__":
    _disable_aslr_and_reexec()

import warnings  # noqa: E402

warnings.filterwarnings("ignore")  # experimental-dtype and quantization deprecation noise

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torchvision  # noqa: E402

torch.set_num_threads(1)

# --------------------------------------------------------------------------------------
# location tag hook


@contextlib.contextmanager
def tag_storages_as(tag, keep_cpu=()):
    """Make torch.save tag CPU storages with `tag` (e.g. "cuda:0").

    keep_cpu: tensors whose storages keep the ordinary "cpu" tag.
    """
    keep = {t.untyped_storage().data_ptr() for t in keep_cpu}

    def tagger(storage):
        if storage.device.type == "cpu" and storage.data_ptr() not in keep:
            return tag
        return None

    def deserializer(storage, location):
        return None

    elem = (0, tagger, deserializer)
    torch.serialization.register_package(*elem)
    try:
        yield
    finally:
        torch.serialization._package_registry.remove(elem)


# --------------------------------------------------------------------------------------
# listing (what torch reports after torch.load)

PACKED_Q = {torch.quint4x2: 2, torch.quint2x4: 4}


def type_name(x):
    t = type(x)
    if t.__module__ == "builtins":
        return t.__qualname__
    return f"{t.__module__}.{t.__qualname__}"


def json_scalar(x):
    """JSON value for int/float/str/bool/None leaves, else a sentinel."""
    t = type(x)
    if t is float:
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if t in (int, str, bool) or x is None:
        return x
    return _NO_VALUE


_NO_VALUE = object()


def is_container(x):
    if isinstance(x, torch.Tensor):
        return False
    if isinstance(x, dict) or isinstance(x, list):
        return True
    return isinstance(x, tuple) and not isinstance(x, torch.Size)


def flatten(obj, prefix=""):
    """Depth-first, container order. Yields (name, leaf)."""
    if not is_container(obj):
        yield prefix, obj
        return
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    empty = True
    for k, v in items:
        empty = False
        name = f"{prefix}.{k}" if prefix else str(k)
        yield from flatten(v, name)
    if empty:
        yield prefix, obj


def logical_bytes(t):
    if t.is_quantized:
        c = t.int_repr().contiguous()
    else:
        c = t.resolve_conj().resolve_neg().contiguous()
    nb = c.numel() * c.element_size()
    raw = torch.empty(0, dtype=torch.uint8).set_(c.untyped_storage())
    start = c.storage_offset() * c.element_size()
    return raw[start:start + nb].numpy().tobytes()


def tensor_entry(name, t, locs, first_by_storage):
    st = t.untyped_storage()
    key = st._cdata
    data = logical_bytes(t)
    e = {
        "name": name,
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "strides": list(t.stride()),
        "storage_offset": t.storage_offset(),
        "location": locs[key],
        "nbytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    if t.is_quantized:
        qs = t.qscheme()
        e["q_scheme"] = str(qs).removeprefix("torch.")
        if qs in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            e["q_scale"] = t.q_scale()
            e["q_zero_point"] = t.q_zero_point()
        else:
            e["q_axis"] = t.q_per_channel_axis()
            e["q_scales"] = t.q_per_channel_scales().tolist()
            e["q_zero_points"] = t.q_per_channel_zero_points().tolist()
    if key in first_by_storage:
        e["shares_storage_with"] = first_by_storage[key]
    else:
        first_by_storage[key] = name
    return e


def file_format(path):
    with open(path, "rb") as f:
        return "torch-zip" if f.read(4) == b"PK\x03\x04" else "torch-legacy"


def load_listing(path):
    """torch.load the file (weights_only=True if torch allows) and list it."""
    locs = {}

    def cb(storage, location):
        locs[storage._cdata] = location
        return storage

    try:
        obj = torch.load(path, map_location=cb, weights_only=True)
        weights_only = True
    except Exception:
        locs.clear()
        obj = torch.load(path, map_location=cb, weights_only=False)
        weights_only = False

    tensors, non_tensors, first = [], [], {}
    for name, leaf in flatten(obj):
        if isinstance(leaf, torch.Tensor):
            tensors.append(tensor_entry(name, leaf, locs, first))
        else:
            e = {"name": name, "type": type_name(leaf)}
            v = json_scalar(leaf)
            if v is not _NO_VALUE:
                e["value"] = v
            non_tensors.append(e)
    listing = {
        "file": os.path.basename(path),
        "format": file_format(path),
        "tensors": tensors,
        "non_tensors": non_tensors,
    }
    return listing, weights_only


# --------------------------------------------------------------------------------------
# static pickle inspection (never executes anything)


def _zip_record(path, suffix):
    """Raw bytes of the record ending in suffix (reads the local header itself,
    so files saved without CRC32 work too)."""
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(suffix))
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        hdr = f.read(30)
        n, m = struct.unpack("<HH", hdr[26:30])
        f.seek(info.header_offset + 30 + n + m)
        return f.read(info.compress_size)


def object_pickle(path):
    if file_format(path) == "torch-zip":
        return _zip_record(path, "/data.pkl")
    with open(path, "rb") as f:  # legacy: magic, protocol, sys_info, then the object
        for _ in range(3):
            for _op in pickletools.genops(f):
                pass
        start = f.tell()
        for _op in pickletools.genops(f):
            pass
        end = f.tell()
        f.seek(start)
        return f.read(end - start)


def pickle_globals(data):
    """Ordered unique 'module.name' of GLOBAL / STACK_GLOBAL opcodes, and the protocol."""
    out, memo, strs, proto = [], {}, [], None
    for op, arg, _pos in pickletools.genops(data):
        n = op.name
        if n == "PROTO":
            proto = arg
        elif n == "GLOBAL":
            out.append(arg.replace(" ", "."))
        elif n in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
            strs.append(arg)
        elif n == "MEMOIZE":
            memo[len(memo)] = strs[-1] if strs else None
        elif n in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[arg] = strs[-1] if strs else None
        elif n in ("BINGET", "LONG_BINGET", "GET"):
            v = memo.get(arg)
            if isinstance(v, str):
                strs.append(v)
        elif n == "STACK_GLOBAL":
            out.append(f"{strs[-2]}.{strs[-1]}")
    return list(dict.fromkeys(out)), proto


SAFE_PREFIXES = ("torch.", "collections.", "_codecs.", "builtins.", "__builtin__.")


# --------------------------------------------------------------------------------------
# fixtures


def seed():
    torch.manual_seed(0)
    return np.random.default_rng(0)


def fx_shufflenet(path):
    """A real torchvision model (ShuffleNetV2 x0.5, 10 classes; 1.44 MB fp32
    state dict: the smallest torchvision classifier under 1.5 MB; resnet18 is
    45 MB), saved as if on cuda:0.  BatchNorm running stats get deterministic
    non-trivial values instead of a forward pass (keeps the bytes independent of
    CPU kernels)."""
    seed()
    m = torchvision.models.shufflenet_v2_x0_5(num_classes=10)
    g = torch.Generator().manual_seed(1)
    for i, mod in enumerate(mm for mm in m.modules() if isinstance(mm, nn.BatchNorm2d)):
        mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=g) * 0.1)
        mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
        mod.num_batches_tracked.fill_(100 + i)
    sd = m.state_dict()
    with tag_storages_as("cuda:0"):
        torch.save(sd, path)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def fx_training(path):
    """Full training checkpoint; model/optimizer moments on cuda:0, AdamW step
    counters and RNG states on cpu (as on a real CUDA run)."""
    seed()
    model = MLP()
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and "norm" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (n.endswith("weight") and "norm" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-3, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=1e-5)
    for _ in range(2):
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    torch.manual_seed(1234)
    cuda_rng = torch.tensor(list(range(16)), dtype=torch.uint8)  # CUDA RNG state is 16 bytes: seed, offset
    ckpt = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "scaler": {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                   "growth_interval": 2000, "_growth_tracker": 0},
        "epoch": 3,
        "global_step": 2 ** 40,
        "rng": {"cpu": torch.get_rng_state(), "cuda": [cuda_rng]},
        "args": {"lr": 1e-3, "name": "run-1"},
    }
    keep = [ckpt["rng"]["cpu"], cuda_rng] + [s["step"] for s in opt.state.values()]
    with tag_storages_as("cuda:0", keep_cpu=keep):
        torch.save(ckpt, path)


def _u8(vals, dtype, shape=None):
    t = torch.tensor(vals, dtype=torch.uint8).view(dtype)
    return t.reshape(shape) if shape else t


def dtype_cases():
    """(name, builder) for every dtype; builders may raise (then skipped)."""
    inf, nan = float("inf"), float("nan")
    fp8_bytes = [0x00, 0x01, 0x07, 0x38, 0x7B, 0x7C, 0x7E, 0x7F, 0x80, 0x81, 0xFC, 0xFF]
    cases = [
        ("bool", lambda: torch.tensor([True, False, True, True])),
        ("uint8", lambda: torch.tensor([0, 1, 127, 128, 255], dtype=torch.uint8)),
        ("uint16", lambda: torch.tensor([0, 1, 2 ** 15, 2 ** 16 - 1], dtype=torch.int32).to(torch.uint16)),
        ("uint32", lambda: torch.tensor([0, 1, 2 ** 31, 2 ** 32 - 1], dtype=torch.int64).to(torch.uint32)),
        ("uint64", lambda: torch.tensor([0, 1, 2 ** 63 - 1, -1], dtype=torch.int64).view(torch.uint64)),
        ("int8", lambda: torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8)),
        ("int16", lambda: torch.tensor([-2 ** 15, -1, 0, 2 ** 15 - 1], dtype=torch.int16)),
        ("int32", lambda: torch.tensor([-2 ** 31, -1, 0, 2 ** 31 - 1], dtype=torch.int32)),
        ("int64", lambda: torch.tensor([-2 ** 63, -1, 0, 2 ** 63 - 1], dtype=torch.int64).reshape(2, 2)),
        ("float16", lambda: torch.tensor([0.0, -0.0, 1.0, -2.5, 65504.0, 2.0 ** -24, 2.0 ** -14, inf, -inf, nan],
                                         dtype=torch.float16)),
        ("bfloat16", lambda: torch.tensor([0.0, -0.0, 1.0, -2.5, 3.3895e38, 2.0 ** -133, 2.0 ** -126, inf, -inf, nan],
                                          dtype=torch.bfloat16)),
        ("float32", lambda: torch.tensor([[0.0, -0.0, 1.0, -2.5, 3.4028235e38],
                                          [1e-45, 1.17549435e-38, inf, -inf, nan]], dtype=torch.float32)),
        ("float64", lambda: torch.tensor([0.0, -0.0, 1.0, -2.5, 1.7976931348623157e308, 5e-324,
                                          2.2250738585072014e-308, inf, -inf, nan], dtype=torch.float64)),
        ("complex32", lambda: torch.tensor([1 + 2j, -0.0 - 0.0j, complex(inf, nan), 6e-8 + 65504j],
                                           dtype=torch.complex64).to(torch.complex32)),
        ("complex64", lambda: torch.tensor([1 + 2j, -0.0 - 0.0j, complex(inf, -inf), complex(nan, 1e-45)],
                                           dtype=torch.complex64)),
        ("complex128", lambda: torch.tensor([1 + 2j, -0.0 - 0.0j, complex(inf, -inf), complex(nan, 5e-324)],
                                            dtype=torch.complex128).reshape(2, 2)),
        ("bcomplex32", lambda: torch.tensor([1.0, 2.0, -0.0, 0.0, inf, nan, 2.0 ** -133, -3.0],
                                            dtype=torch.bfloat16).view(torch.bcomplex32)),
        ("float8_e4m3fn", lambda: _u8(fp8_bytes, torch.float8_e4m3fn, (3, 4))),
        ("float8_e5m2", lambda: _u8(fp8_bytes, torch.float8_e5m2)),
        ("float8_e4m3fnuz", lambda: _u8(fp8_bytes, torch.float8_e4m3fnuz)),
        ("float8_e5m2fnuz", lambda: _u8(fp8_bytes, torch.float8_e5m2fnuz)),
        ("float8_e8m0fnu", lambda: _u8([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF], torch.float8_e8m0fnu)),
        ("float4_e2m1fn_x2", lambda: _u8([0x00, 0x21, 0x7F, 0x88, 0xF0, 0x9A], torch.float4_e2m1fn_x2, (2, 3))),
        ("bits8", lambda: _u8([0x00, 0x5A, 0xFF], torch.bits8)),
        ("bits16", lambda: _u8([0x01, 0x02, 0xFF, 0xFE], torch.bits16)),
        ("bits1x8", lambda: _u8([0x81, 0x42], torch.bits1x8)),
        ("bits2x4", lambda: _u8([0x1B, 0xE4], torch.bits2x4)),
        ("bits4x2", lambda: _u8([0x12, 0xEF], torch.bits4x2)),
        ("qint8", lambda: torch.quantize_per_tensor(torch.tensor([-1.0, 0.0, 0.5, 10.0]), 0.1, -3, torch.qint8)),
        ("quint8", lambda: torch.quantize_per_tensor(torch.tensor([-1.0, 0.0, 0.5, 10.0]), 0.05, 128, torch.quint8)),
        ("qint32", lambda: torch.quantize_per_tensor(torch.tensor([-1.0, 0.0, 0.5, 1e6]), 0.001, 7, torch.qint32)),
        ("qint8_per_channel", lambda: torch.quantize_per_channel(
            torch.tensor([[-1.0, 0.0, 1.0], [2.0, 3.0, -4.0]]), torch.tensor([0.1, 0.05], dtype=torch.float64),
            torch.tensor([0, -2]), 0, torch.qint8)),
        ("quint8_per_channel_float_qparams", lambda: torch.quantize_per_channel(
            torch.tensor([[-1.0, 0.0, 1.0], [2.0, 3.0, -4.0]]), torch.tensor([0.1, 0.05]),
            torch.tensor([0.5, -1.0]), 0, torch.quint8)),
        ("quint4x2", lambda: torch.quantize_per_tensor(torch.tensor([0.0, 1.0, 2.0, 3.0, 7.5]), 0.5, 1, torch.quint4x2)),
        ("quint2x4", lambda: torch.quantize_per_tensor(torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0]), 0.5, 0, torch.quint2x4)),
    ]
    for k in range(1, 8):
        for pre in ("uint", "int"):
            cases.append((f"{pre}{k}", lambda d=getattr(torch, f"{pre}{k}"): torch.zeros(4, dtype=torch.uint8).view(d)))
    return cases


def fx_dtypes(path):
    """One small tensor of every dtype torch 2.14 can save."""
    seed()
    out, skipped = {}, []
    for name, build in dtype_cases():
        try:
            t = build()
            buf = io.BytesIO()
            torch.save({name: t}, buf)  # can torch save it?
            buf.seek(0)
            torch.load(buf, weights_only=True)  # and load it back?
        except Exception as e:
            skipped.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        out[name] = t
    torch.save(out, path)
    return skipped


def fx_views(path):
    seed()
    w = torch.randn(3, 4)
    big = torch.arange(100, dtype=torch.float32)
    x = torch.randn(4, 6)
    tied = torch.randn(2, 3)
    s = torch.randn(3, 5)
    c = torch.randn(3, dtype=torch.complex64)
    c2 = torch.randn(3, dtype=torch.complex64)
    pattr = nn.Parameter(torch.randn(2, 2))
    pattr.my_attr = "hello"
    pattr._tp_dim = 1
    tattr = torch.randn(3)
    tattr.foo = "bar"
    tattr.scale = 0.5
    neg = c2.conj().imag  # a real view with the neg bit set
    assert neg.is_neg()
    obj = {
        "transposed": w.t(),
        "slice_offset": big[10:20],
        "strided_cols": x[:, 1::2],
        "permuted": torch.randn(2, 3, 4).permute(2, 0, 1),
        "channels_last": torch.randn(1, 3, 2, 2).contiguous(memory_format=torch.channels_last),
        "expanded": torch.arange(3.0).expand(4, 3),
        "tied_a": tied,
        "tied_b": tied,
        "row0": s[0],
        "row2": s[2],
        "rows_flat": s.view(-1)[5:],
        "scalar": torch.tensor(3.5),
        "scalar_int": torch.tensor(-7, dtype=torch.int64),
        "empty": torch.zeros(0, 3),
        "empty_1d_int": torch.zeros(0, dtype=torch.int32),
        "bool": torch.tensor([[True, False], [False, True]]),
        "conj": c.conj(),
        "neg": neg,
        "param": nn.Parameter(torch.randn(2, 3)),
        "param_frozen": nn.Parameter(torch.randn(2), requires_grad=False),
        "param_with_attr": pattr,
        "tensor_with_attr": tattr,
        "nested": {
            "list": [torch.ones(2), (torch.zeros(1, dtype=torch.int16), torch.full((2,), 2.0))],
            "tuple": (torch.eye(2), [torch.tensor([1, 2, 3])]),
            "shared_with_top": big[50:52],
        },
        "empty_dict": {},
        "empty_list": [],
        "empty_tuple": (),
    }
    torch.save(obj, path)


def _legacy_obj():
    seed()
    big = torch.arange(20, dtype=torch.float32)
    s = torch.randn(4)
    return {
        "f32": torch.randn(2, 3),
        "i64": torch.arange(5),
        "bf16": torch.randn(4).to(torch.bfloat16),
        "bool": torch.tensor([True, False, True]),
        "view": big[3:7],
        "shared_a": s,
        "shared_b": s[1:],
        "nested": {"inner": {"x": torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)}, "list": [big[::5], 7]},
        "step": 7,
    }


def fx_legacy(path):
    torch.save(_legacy_obj(), path, _use_new_zipfile_serialization=False)


def fx_legacy_cuda(path):
    obj = _legacy_obj()
    with tag_storages_as("cuda:0"):
        torch.save(obj, path, _use_new_zipfile_serialization=False)


def fx_numpy_args(path):
    seed()
    obj = {
        "weight": torch.randn(2, 2),
        "np_f64": np.float64(0.125),
        "np_i64": np.int64(-3),
        "np_f32": np.float32(1.5),
        "arr_f32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "arr_i64": np.array([1, -2, 3], dtype=np.int64),
        "args": argparse.Namespace(lr=0.1, layers=[1, 2], name="x"),
        "epoch": 1,
    }
    torch.save(obj, path)


def _small_sd(tag):
    seed()
    m = nn.Linear(4, 3)
    return {"state_dict": m.state_dict(),
            "meta": {"name": tag, "n": 2 ** 40, "f": 0.25, "neg": -5, "b": b"\x00\x01xy", "ok": True, "none": None}}


def fx_protocol4(path):
    torch.save(_small_sd("p4"), path, pickle_protocol=4)


def fx_protocol5(path):
    torch.save(_small_sd("p5"), path, pickle_protocol=5)


def fx_custom_archive(path):
    seed()
    buf = io.BytesIO()
    torch.save({"w": torch.randn(3, 2), "b": torch.zeros(3)}, buf)  # folder "archive/"
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def fx_nocrc(path):
    seed()
    torch.serialization.set_crc32_options(False)
    try:
        torch.save({"w": torch.randn(3, 2), "i": torch.arange(4, dtype=torch.int16)}, path)
    finally:
        torch.serialization.set_crc32_options(True)


class _Pwn:
    """Pickles as REDUCE(os.system, ('echo pwned',)); never unpickle the file."""

    def __reduce__(self):
        return (os.system, ("echo pwned",))


def fx_malicious(path):
    seed()
    torch.save({"weight": torch.randn(2), "payload": _Pwn()}, path)


FIXTURES = [
    ("shufflenet_cuda.pt", fx_shufflenet),
    ("training_cuda.pt", fx_training),
    ("dtypes.pt", fx_dtypes),
    ("views.pt", fx_views),
    ("legacy.pt", fx_legacy),
    ("legacy_cuda.pt", fx_legacy_cuda),
    ("numpy_args.pt", fx_numpy_args),
    ("protocol4.pt", fx_protocol4),
    ("protocol5.pt", fx_protocol5),
    ("custom_archive.pt", fx_custom_archive),
    ("nocrc.pt", fx_nocrc),
    ("malicious.pt", fx_malicious),
]
NEVER_LOAD = {"malicious.pt"}


def write_json(path, obj):
    """Pretty JSON with one tensor / non-tensor entry per line (diff-friendly)."""
    def enc(v):
        return json.dumps(v, ensure_ascii=True, allow_nan=False)

    parts = []
    for k, v in obj.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            body = ",\n".join("  " + enc(e) for e in v)
            parts.append(f" {enc(k)}: [\n{body}\n ]")
        else:
            parts.append(f" {enc(k)}: {enc(v)}")
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(parts) + "\n}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=HERE, help="output folder (default: this folder)")
    ap.add_argument("-v", action="store_true", help="also print the GLOBALs of every data.pkl")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows, notes = [], []
    for fname, build in FIXTURES:
        path = os.path.join(a.out, fname)
        res = build(path)
        if res:
            notes += [f"{fname}: skipped {r}" for r in res]
        globs, proto = pickle_globals(object_pickle(path))
        if fname in NEVER_LOAD:
            dangerous = [g for g in globs if not g.startswith(SAFE_PREFIXES)]
            listing = {"file": fname, "format": file_format(path), "dangerous": dangerous}
            wo, nt, nn_ = "never", "-", "-"
        else:
            listing, wo = load_listing(path)
            nt, nn_ = len(listing["tensors"]), len(listing["non_tensors"])
        write_json(os.path.join(a.out, fname[:-3] + ".json"), listing)
        rebuild = sorted({g.rsplit(".", 1)[1] for g in globs if "_rebuild" in g})
        rows.append((fname, listing["format"], os.path.getsize(path), proto, nt, nn_, wo, ",".join(rebuild)))
        if a.v:
            print(f"{fname}: {globs}")
    hdr = ("file", "format", "bytes", "proto", "tensors", "non_tensors", "weights_only", "rebuild functions")
    w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
    for r in [hdr] + rows:
        print("  ".join(str(v).ljust(w[i]) for i, v in enumerate(r)).rstrip())
    total = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out)
                if os.path.isfile(os.path.join(a.out, f)))
    print(f"total size of {a.out}: {total} bytes")
    for n in notes:
        print("note:", n)


if __name__ == "__main__":
    main()
