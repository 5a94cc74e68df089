#!/usr/bin/env python3
"""torch.distributed.checkpoint directories of the ecosystem, written by torch's own DCP
(single process, FileSystemWriter). Run inside the oracle chroot (with zstandard) from the
repository root:

    scripts/oracle python testdata/ecosystem/gen_dcp.py

Writes into testdata/ecosystem/dcp/:
  megatron/  a Megatron-core / NeMo 2 style state dict: weights and, for every Transformer
             Engine layer, an `_extra_state` io.BytesIO (a torch.save of its FP8 metadata,
             or empty), as TE's get_extra_state returns and mcore's torch_dist saves them
  zstd/      a training state dict saved with torch's ZStandard stream extension
             (FileSystemWriter(_extensions=[ZStandard()])): every item compressed
and dcp.json: torch's listing of each (loaded back with dcp_to_torch_save) and the bytes
of every BytesIO, hex.
"""
import io
import json
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._extension import ZStandard
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

sys.path.insert(0, os.path.dirname(__file__))
from common import listing  # noqa: E402

OUT = "testdata/ecosystem/dcp"


def extra_state(fp8):
    """Transformer Engine's TransformerEngineBaseModule.get_extra_state (TE 1.x): a BytesIO
    holding torch.save of the FP8 meta state, or an empty one without FP8."""
    buf = io.BytesIO()
    if fp8:
        torch.save({"scale_fwd": torch.ones(3), "scale_inv_fwd": torch.ones(3), "amax_history_fwd": torch.zeros(16, 3),
                    "global_fp8_buffer_pos_fwd": 0, "extra_fp8_variables": {"num_gemms": 1}}, buf)
    return buf


def megatron():
    torch.manual_seed(4)
    sd = {}
    for layer in range(2):
        pre = f"decoder.layers.{layer}."
        sd[pre + "self_attention.linear_qkv.weight"] = torch.randn(24, 8, dtype=torch.bfloat16)
        sd[pre + "self_attention.linear_qkv.layer_norm_weight"] = torch.ones(8, dtype=torch.bfloat16)
        sd[pre + "self_attention.linear_qkv._extra_state"] = extra_state(fp8=layer == 0)
        sd[pre + "mlp.linear_fc1.weight"] = torch.randn(16, 8, dtype=torch.bfloat16)
        sd[pre + "mlp.linear_fc1._extra_state"] = extra_state(fp8=False)
    sd["embedding.word_embeddings.weight"] = torch.randn(32, 8, dtype=torch.bfloat16)
    return sd


def training():
    torch.manual_seed(5)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(net.parameters())
    net(torch.randn(2, 8)).sum().backward()
    opt.step()
    return {"model": net.state_dict(), "optim": opt.state_dict(), "step": 1, "zeros": torch.zeros(4096)}


def reference(path):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "ref.pt")
        dcp_to_torch_save(path, p)
        return torch.load(p, weights_only=False)


def byte_items(obj, prefix=""):
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(byte_items(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, io.BytesIO):
        out[prefix] = obj.getvalue().hex()
    return out


def main():
    expected = {"torch": torch.__version__}
    for name, sd, kw in (("megatron", megatron(), {}),
                         ("zstd", training(), {"storage_writer": None})):
        path = os.path.join(OUT, name)
        shutil.rmtree(path, ignore_errors=True)
        if name == "zstd":
            writer = dcp.FileSystemWriter(path, _extensions=[ZStandard()])
            dcp.save(sd, storage_writer=writer)
        else:
            dcp.save(sd, checkpoint_id=path)
        back = reference(path)
        expected[name] = {"tensors": listing(back), "bytes": byte_items(back)}
    with open("testdata/ecosystem/dcp.json", "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


main()
