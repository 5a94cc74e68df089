#!/usr/bin/env python3
"""Loads ckpt's outputs the way their users load them and reports what torch sees.

    python3 check.py JOBS.json

JOBS.json is a list of {"out", "format", "weights_only", "keys"}: FORMAT is torch (loaded
with torch.load(weights_only=WEIGHTS_ONLY)), safetensors (a file or a folder of shards,
safetensors.torch.load_file) or dcp (torch.distributed.checkpoint through
dcp_to_torch_save, whose bytes items DCP unpickles itself). Prints one JSON line per job:
{"tensors": torch's listing (common.listing), "plain": the values under KEYS as JSON,
"repr": their repr(), "types": their type names, "bytes": every io.BytesIO by flattened
name, hex, "error": why loading failed}.
"""
import io
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import listing  # noqa: E402


def load(fmt, out, weights_only):
    if fmt == "torch":
        return torch.load(out, weights_only=weights_only, map_location="cpu")
    if fmt == "safetensors":
        from safetensors.torch import load_file
        if not os.path.isdir(out):
            return load_file(out)
        sd = {}
        for f in sorted(os.listdir(out)):
            if f.endswith(".safetensors"):
                sd.update(load_file(os.path.join(out, f)))
        return sd
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "out.pt")
        dcp_to_torch_save(out, p)
        return torch.load(p, weights_only=False)


def jsonable(v):
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return repr(v)


def byte_items(obj, prefix=""):
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(byte_items(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, io.BytesIO):
        out[prefix] = obj.getvalue().hex()
    return out


def main():
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    for job in jobs:
        rep = {}
        try:
            obj = load(job["format"], job["out"], job.get("weights_only", True))
            rep["tensors"] = listing(obj)
            rep["bytes"] = byte_items(obj)
            keys = job.get("keys") or []
            rep["plain"] = {k: jsonable(obj[k]) for k in keys if k in obj}
            rep["repr"] = {k: repr(obj[k]) for k in keys if k in obj}
            rep["types"] = {k: type(obj[k]).__module__ + "." + type(obj[k]).__qualname__ for k in keys if k in obj}
        except Exception as e:  # reported, for the Go test to show
            rep["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(rep))


main()
