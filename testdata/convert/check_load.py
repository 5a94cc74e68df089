"""Checks a ckpt output against torch's own load of the source, in the oracle.

    python3 check_load.py JOBS.json

JOBS.json is a list of {"format", "src", "out", "tag", "dtype", "dropped": [names], "cpu": [names]}
("cpu": RNG states, which keep a "cpu" tag whatever TAG is).

FORMAT is torch, safetensors (file or HF folder) or dcp. torch loads the source with its
own loader (recording each storage's location tag), loads OUT the way users will
(torch.load(weights_only=True) with a map_location callable that records the tags,
safetensors.torch.load_file, torch.distributed.checkpoint via dcp_to_torch_save), and
compares every tensor: same names, dtypes, shapes, and bit-identical contents — after the
requested dtype cast of floating weights, computed by torch itself. Prints a JSON report;
one line per job, in order.
"""
import glob
import json
import os
import sys
import tempfile

import numpy as np
import torch.utils.serialization
import torch



def load_tagged(path, weights_only):
    tags = {}

    def cb(storage, loc):
        tags[storage.data_ptr()] = loc
        return storage
    obj = torch.load(path, map_location=cb, weights_only=weights_only)
    return obj, tags


def flatten(obj, prefix=""):
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}.{i}" if prefix else str(i)))
    else:
        out[prefix] = obj
    return out


def raw(t):
    if t.is_quantized:
        return bytes(t.untyped_storage()) + repr(t.qscheme()).encode()
    c = t.detach().resolve_conj().resolve_neg().contiguous().clone()
    return bytes(c.untyped_storage())


def load_source(src):
    """torch's own reading of a source: a torch.save file, a DCP directory (through
    dcp_to_torch_save) or a Hugging Face folder (every safetensors / .bin shard)."""
    if not os.path.isdir(src):
        return load_tagged(src, weights_only=False)
    if os.path.exists(os.path.join(src, ".metadata")):
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "src.pt")
            dcp_to_torch_save(src, p)
            return load_tagged(p, weights_only=False)
    from safetensors.torch import load_file
    sd = {}
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            sd.update(load_file(os.path.join(src, f)))
        elif f.endswith(".bin"):
            sd.update(torch.load(os.path.join(src, f), weights_only=True))
    return sd, {}


def check(fmt, src, out, expect_tag, dtype, dropped, cpu):
    """Compares one output with torch's load of its source; returns the report."""
    cast = getattr(torch, dtype) if dtype and dtype != "keep" else None
    dropped = set(dropped or [])
    problems = []
    src_obj, src_tags = load_source(src)
    # ckpt turns numpy arrays into tensors (torch.load(weights_only=True) refuses numpy).
    src_flat = {k: (torch.from_numpy(v) if isinstance(v, np.ndarray) else v) for k, v in flatten(src_obj).items()
                if isinstance(v, (torch.Tensor, np.ndarray)) and k not in dropped}

    out_tags = {}
    if fmt == "torch":
        out_obj, out_tags = load_tagged(out, weights_only=True)
        if expect_tag == "cpu":
            torch.load(out)  # plain load, no map_location, on a machine without CUDA
        # We write .format_version, which lets torch compute storage offsets itself instead of
        # reading them from local headers: that must give the same bytes, mmapped.
        torch.utils.serialization.config.load.calculate_storage_offsets = True
        try:
            mm = torch.load(out, mmap=True, weights_only=True, map_location=lambda s, l: s)
        finally:
            torch.utils.serialization.config.load.calculate_storage_offsets = False
        for name, v in flatten(mm).items():
            if isinstance(v, torch.Tensor) and raw(v) != raw(flatten(out_obj)[name]):
                problems.append(f"{name}: computed-offset mmap load differs")
    elif fmt == "safetensors":
        from safetensors.torch import load_file
        files = [out] if os.path.isfile(out) else sorted(glob.glob(os.path.join(out, "*.safetensors")))
        out_obj = {}
        for f in files:
            out_obj.update(load_file(f))
    elif fmt == "dcp":
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "x.pt")
            dcp_to_torch_save(out, p)
            out_obj = torch.load(p, weights_only=False)
    else:
        sys.exit(f"unknown format {fmt}")
    out_flat = {k: v for k, v in flatten(out_obj).items() if isinstance(v, torch.Tensor)}

    if fmt == "safetensors":
        # Tied aliases are written once; the metadata says which name holds them.
        from safetensors import safe_open
        files = [out] if os.path.isfile(out) else sorted(glob.glob(os.path.join(out, "*.safetensors")))
        for f in files:
            with safe_open(f, framework="pt") as sf:
                for removed, kept in (sf.metadata() or {}).items():
                    if removed != "format" and kept in out_flat:
                        out_flat[removed] = out_flat[kept]

    missing = sorted(set(src_flat) - set(out_flat))
    extra = sorted(set(out_flat) - set(src_flat))
    if missing:
        problems.append(f"missing tensors: {missing[:10]}")
    if extra:
        problems.append(f"unexpected tensors: {extra[:10]}")

    in_optim = set()
    for name in src_flat:
        parts = name.split(".")
        for i in range(len(parts)):
            head = ".".join(parts[:i])
            sub = src_obj
            try:
                for p in parts[:i]:
                    sub = sub[int(p)] if isinstance(sub, (list, tuple)) else sub[p]
            except Exception:
                break
            if isinstance(sub, dict) and "state" in sub and "param_groups" in sub:
                in_optim.add(name)

    compared = 0
    for name, s in src_flat.items():
        o = out_flat.get(name)
        if o is None:
            continue
        want = s
        if cast is not None and s.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64) \
                and name not in in_optim and not name.endswith(".step"):
            want = s.to(cast)
        if o.dtype != want.dtype or tuple(o.shape) != tuple(want.shape):
            problems.append(f"{name}: {o.dtype} {tuple(o.shape)}, want {want.dtype} {tuple(want.shape)}")
            continue
        if raw(o) != raw(want):
            problems.append(f"{name}: bytes differ")
        compared += 1

    tags = sorted(set(out_tags.values()))
    if fmt == "torch":
        for name, o in out_flat.items():
            tag = out_tags.get(o.untyped_storage().data_ptr())
            want_tag = expect_tag
            if name in in_optim and name.endswith(".step"):
                want_tag = src_tags.get(src_flat[name].untyped_storage().data_ptr())
            elif name in (cpu or []):
                want_tag = "cpu"
            if tag != want_tag and o.numel() > 0:
                problems.append(f"{name}: tagged {tag}, want {want_tag}")
        # Tied weights: tensors sharing a storage in the source share one after loading ours.
        groups = {}
        for name, s in src_flat.items():
            if s.untyped_storage().nbytes() > 0:
                groups.setdefault(s.untyped_storage().data_ptr(), []).append(name)
        for names in groups.values():
            ptrs = {out_flat[n].untyped_storage().data_ptr() for n in names if n in out_flat}
            if len(ptrs) > 1:
                problems.append(f"storage sharing lost between {names}")

    return {"compared": compared, "tags": tags, "problems": problems}


for job in json.load(open(sys.argv[1])):
    try:
        res = check(job["format"], job["src"], job["out"], job["tag"], job.get("dtype"), job.get("dropped"),
                    job.get("cpu"))
    except BaseException as e:  # a load failure is a finding, reported per job (DCP raises BaseException)
        detail = getattr(e, "failures", None)  # DCP's CheckpointException: per-rank errors
        res = {"compared": 0, "tags": [], "problems": [f"{type(e).__name__}: {detail or e}"]}
    print(json.dumps(res), flush=True)
