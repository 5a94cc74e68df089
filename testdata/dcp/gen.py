#!/usr/bin/env python3
"""Generate the torch.distributed.checkpoint (DCP) fixtures in testdata/dcp/.

Run it inside the oracle chroot (real PyTorch 2.14, Python 3.14):

    scripts/oracle python testdata/dcp/gen.py

Every fixture is a DCP folder NAME/ (a `.metadata` pickle plus `__<rank>_<n>.distcp`
files) written by torch's own dcp.save, and NAME.json, what torch reports for it (see
README.md for the schema).  mutated/ holds `.metadata` files derived from the sharded
fixture by unpickling, changing one thing and pickling again (error cases, plus two
legal variants).

Listings come from torch itself: torch.distributed.checkpoint.format_utils.
dcp_to_torch_save() into a temporary .pt, then torch.load; the nested tree is walked
(dict keys with str(), list and tuple indices) and every tensor and non-tensor leaf is
listed.  The safetensors-format fixture is the exception: torch's FileSystemReader
cannot read what its own writer produces with SerializationFormat.SAFETENSORS (it
torch.loads the slice), so its listing is taken from the state dict that was saved.

Multi-process fixtures run 4 (or 2) gloo ranks on the CPU with torch.multiprocessing
and a file:// rendezvous; DCP needs no process group for the single-process ones.

Determinism: fixed seeds; the writer's save_id (a random UUID in StorageMeta) is pinned
by a FileSystemWriter subclass, and checkpoint_id is the relative path the fixture was
written to, so two runs give byte-identical files.
"""

import hashlib
import json
import os
import pathlib
import pickle
import shutil
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed.checkpoint import metadata as dcpmd  # noqa: E402
from torch.distributed.checkpoint.filesystem import (  # noqa: E402
    FileSystemWriter,
    SerializationFormat,
    _StorageInfo,
)
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict  # noqa: E402
from torch.distributed._shard.sharded_tensor import metadata as oldtp  # noqa: E402

torch.set_num_threads(1)

HERE = os.path.relpath(os.path.dirname(os.path.abspath(__file__)))
SAVE_ID = "00000000-0000-4000-8000-000000000000"


class Writer(FileSystemWriter):
    """FileSystemWriter with a fixed save_id, so .metadata is reproducible."""

    def storage_meta(self):
        meta = super().storage_meta()
        meta.save_id = SAVE_ID
        return meta


def fresh(name):
    path = os.path.join(HERE, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


# --------------------------------------------------------------------------------------
# listing


def tensor_bytes(t):
    c = t.detach().contiguous().clone()
    return bytes(c.untyped_storage())


def jsonable(v):
    if v is None or isinstance(v, (bool, int, str)):
        return True
    return isinstance(v, float) and v == v and abs(v) != float("inf")


def walk(v, name, tensors, leaves):
    """Walk like statedict.Walk: dict keys str(), list/tuple indices, "." joins."""

    def join(k):
        return k if name == "" else name + "." + k

    if isinstance(v, torch.Tensor):
        b = tensor_bytes(v)
        tensors.append({
            "name": name,
            "dtype": str(v.dtype).removeprefix("torch."),
            "shape": list(v.shape),
            "nbytes": len(b),
            "sha256": hashlib.sha256(b).hexdigest(),
        })
    elif isinstance(v, dict) and len(v) > 0:
        for k, x in v.items():
            walk(x, join(str(k)), tensors, leaves)
    elif type(v) in (list, tuple) and len(v) > 0:
        for i, x in enumerate(v):
            walk(x, join(str(i)), tensors, leaves)
    else:
        leaf = {"name": name, "type": type(v).__name__}
        if jsonable(v):
            leaf["value"] = v
        elif isinstance(v, bytes):
            leaf["value"] = v.hex()
        elif isinstance(v, complex):
            leaf["value"] = [v.real, v.imag]
        elif isinstance(v, torch.dtype):
            leaf["value"] = str(v)
        leaves.append(leaf)


def chunk_counts(path):
    """fqn → number of chunks, for tensors stored in more than one chunk."""
    with open(os.path.join(path, ".metadata"), "rb") as f:
        md = pickle.load(f)  # our own fixture: trusted
    return {
        fqn: len(m.chunks)
        for fqn, m in md.state_dict_metadata.items()
        if isinstance(m, dcpmd.TensorStorageMetadata) and len(m.chunks) > 1
    }


def write_listing(name, sd, note=""):
    path = os.path.join(HERE, name)
    tensors, leaves = [], []
    walk(sd, "", tensors, leaves)
    out = {
        "dir": name,
        "format": "dcp",
        "note": note,
        "chunked": chunk_counts(path),
        "tensors": tensors,
        "non_tensors": leaves,
    }
    with open(os.path.join(HERE, name + ".json"), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


def listing_via_torch(name, note=""):
    """List what dcp_to_torch_save + torch.load make of the folder."""
    with tempfile.TemporaryDirectory() as tmp:
        pt = os.path.join(tmp, "x.pt")
        dcp_to_torch_save(os.path.join(HERE, name), pt)
        sd = torch.load(pt, weights_only=False)
    write_listing(name, sd, note)


# --------------------------------------------------------------------------------------
# (a) model: small model + Adam after 2 steps, single process


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.l1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.l2 = nn.Linear(16, 4)

    def forward(self, idx):
        return self.l2(self.norm(torch.relu(self.l1(self.emb(idx)))))


def train(model, optim, steps=2):
    for _ in range(steps):
        optim.zero_grad()
        model(torch.arange(6) % 10).square().mean().backward()
        optim.step()


def gen_model():
    torch.manual_seed(0)
    model = Net()
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    train(model, optim)
    msd, osd = get_state_dict(model, optim)
    path = fresh("model")
    dcp.save({"model": msd, "optim": osd}, storage_writer=Writer(path))
    listing_via_torch("model", "Net (Embedding, 2 Linear, LayerNorm) + Adam after 2 steps, "
                      "get_state_dict, dcp.save without a process group")


# --------------------------------------------------------------------------------------
# (b) sharded: 4 gloo ranks, FSDP2 model + Adam, DTensors of assorted placements


def dtensors():
    """Full tensors (same on every rank) and how to place them: on the flat 4-rank mesh or
    the 2x2 one."""
    from torch.distributed.tensor import Replicate, Shard

    g = torch.Generator().manual_seed(1)
    return {
        # Shard(1) on 4 ranks of a 9-wide tensor: widths 3, 3, 3, 0.
        "col": (torch.randn(5, 9, generator=g).to(torch.bfloat16), "flat", [Shard(1)]),
        # A 2x2 grid of 3x4 blocks.
        "grid": (torch.randn(6, 8, generator=g), "mesh", [Shard(0), Shard(1)]),
        # dim 2 split 3+2 over mesh dim 0, dim 0 split 2+2 over mesh dim 1.
        "grid3": (torch.arange(120, dtype=torch.int64).reshape(4, 6, 5), "mesh", [Shard(2), Shard(0)]),
        # dim 0 sharded twice (strided sharding): 4 bands of 2 rows.
        "bands": (torch.randn(8, 3, generator=g).double(), "mesh", [Shard(0), Shard(0)]),
        # One row over 4 ranks: one full chunk and an empty one.
        "tiny": (torch.arange(3.0).reshape(1, 3), "flat", [Shard(0)]),
        "rep": (torch.arange(4, dtype=torch.int32), "mesh", [Replicate(), Replicate()]),
    }


def sharded_worker(rank, world, store, path):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor

    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    flat = init_device_mesh("cpu", (world,))
    mesh = init_device_mesh("cpu", (2, 2))
    torch.manual_seed(0)
    model = Net()
    fully_shard(model, mesh=flat)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    train(model, optim)
    msd, osd = get_state_dict(model, optim)
    extra = {
        # src_data_rank=None: every rank slices its own copy (gloo cannot scatter bf16).
        k: distribute_tensor(t, flat if m == "flat" else mesh, pl, src_data_rank=None)
        for k, (t, m, pl) in dtensors().items()
    }
    sd = {"model": msd, "optim": osd, "dt": extra, "plain": torch.arange(5.0), "step": 7}
    dcp.save(sd, storage_writer=Writer(path))
    dist.barrier()
    dist.destroy_process_group()


def gen_sharded():
    path = fresh("sharded")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(sharded_worker, args=(4, os.path.join(tmp, "store"), path), nprocs=4)
    listing_via_torch("sharded", "4 gloo ranks: FSDP2 (fully_shard) Net + Adam after 2 steps "
                      "and DTensors: Shard(1), 2x2 grid, 3-d grid, Shard(0)x2, an empty shard, "
                      "Replicate; plus a plain tensor and an int")


# --------------------------------------------------------------------------------------
# (c) scalars: non-tensor values of every kind, single process


def gen_scalars():
    torch.manual_seed(0)
    p = nn.Parameter(torch.randn(3))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=10)
    for _ in range(3):
        opt.step()
        sched.step()
    sd = {
        "epoch": 3,
        "global_step": 2**40,
        "huge": 2**70,
        "neg": -7,
        "name": "run-α/β",
        "lr": 3e-4,
        "flag": True,
        "nothing": None,
        "lrs": [0.1, 0.01, 0.001],
        "betas": (0.9, 0.999),
        "nested": {"a": {"b": 1, "c": "x"}, "d": [1, [2, 3]]},
        "mixed": [1, torch.arange(3), "two"],
        "tuple_with_tensor": (torch.ones(2, dtype=torch.float16), 5),
        "int_keys": {3: "three", 10: torch.tensor(1.5)},
        "list_of_dicts": [{"a": 1}, {"b": torch.zeros(1)}],
        "sched": sched.state_dict(),
        "scaler": {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                   "growth_interval": 2000, "_growth_tracker": 0},
        "empty_list": [],
        "empty_dict_inside": {"x": {}, "y": 1},
        "raw": b"\x00\xffab",
        "cplx": 1 + 2j,
        "dt": torch.bfloat16,
        "rng": torch.get_rng_state()[:64].clone(),
    }
    path = fresh("scalars")
    dcp.save(sd, storage_writer=Writer(path))
    listing_via_torch("scalars", "bytes items of every kind: ints (2**40, 2**70), floats, str, "
                      "bool, None, lists, tuples (one holding a tensor), nested dicts, int dict "
                      "keys, OneCycleLR state, bytes, complex, a dtype; empty dicts vanish")


# --------------------------------------------------------------------------------------
# (d) legacy113: .metadata re-pickled with the module paths of torch 1.13

OLD = "torch.distributed._shard.checkpoint"


class Legacy113Pickler(pickle._Pickler):
    """Pickles the DCP classes under their torch 1.13 names (STACK_GLOBAL, protocol 4)."""

    renames = {
        dcpmd.Metadata: (OLD + ".metadata", "Metadata"),
        dcpmd.TensorStorageMetadata: (OLD + ".metadata", "TensorStorageMetadata"),
        dcpmd.BytesStorageMetadata: (OLD + ".metadata", "BytesStorageMetadata"),
        dcpmd.ChunkStorageMetadata: (OLD + ".metadata", "ChunkStorageMetadata"),
        dcpmd.MetadataIndex: (OLD + ".metadata", "MetadataIndex"),
        _StorageInfo: (OLD + ".filesystem", "_StorageInfo"),
    }

    def save_global(self, obj, name=None):
        target = self.renames.get(obj)
        if target is None:
            return super().save_global(obj, name)
        self.save(target[0])
        self.save(target[1])
        self.write(pickle.STACK_GLOBAL)
        self.memoize(obj)

    def save(self, obj, save_persistent_id=True):
        if not isinstance(obj, Legacy113Metadata):
            return super().save(obj, save_persistent_id)
        # What copyreg.__newobj__ would write for the 1.13 dataclass.
        self.save(dcpmd.Metadata)
        self.save(())
        self.write(pickle.NEWOBJ)
        self.memoize(obj)
        self.save(obj.state)
        self.write(pickle.BUILD)


class Legacy113Metadata:
    """1.13's Metadata had three fields: no storage_meta, no version."""

    def __init__(self, md):
        self.state = {
            "state_dict_metadata": md.state_dict_metadata,
            "planner_data": md.planner_data,
            "storage_data": md.storage_data,
        }


def old_properties(p):
    return oldtp.TensorProperties(dtype=p.dtype, layout=p.layout, requires_grad=p.requires_grad,
                                  memory_format=p.memory_format, pin_memory=p.pin_memory)


def gen_legacy113():
    torch.manual_seed(0)
    sd = {"w": torch.randn(3, 2), "b": torch.arange(4, dtype=torch.int16), "lr": 0.5,
          "opt": {"state": {"w": {"step": torch.tensor(2.0)}}, "groups": [{"params": ["w"]}]}}
    path = fresh("legacy113")
    dcp.save(sd, storage_writer=Writer(path))
    # torch 2.14 cannot load the rewritten file (it imports the old module path as a second
    # copy of metadata.py, whose classes fail its isinstance checks), so list it before.
    listing_via_torch("legacy113", "torch 2.14 files whose .metadata is re-pickled with torch "
                      "1.13's module paths (torch.distributed._shard.checkpoint.*, "
                      "_shard.sharded_tensor.metadata.TensorProperties with MEM_FORMAT_ENCODING), "
                      "protocol 4 and 1.13's three Metadata fields; listed before the rewrite")
    mdpath = os.path.join(path, ".metadata")
    with open(mdpath, "rb") as f:
        md = pickle.load(f)
    for m in md.state_dict_metadata.values():
        if isinstance(m, dcpmd.TensorStorageMetadata):
            m.properties = old_properties(m.properties)
    with open(mdpath, "wb") as f:
        Legacy113Pickler(f, protocol=4).dump(Legacy113Metadata(md))


# --------------------------------------------------------------------------------------
# (e) safetensors: SerializationFormat.SAFETENSORS, 2 gloo ranks


def st_full():
    """The safetensors fixture's state dict, unsharded."""
    g = torch.Generator().manual_seed(2)
    return {"w": torch.randn(6, 4, generator=g), "h": torch.randn(3, generator=g).half(),
            "meta": {"epoch": 2, "tag": "st"}}


def st_worker(rank, world, store, path):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    sd = st_full()
    sd["w"] = distribute_tensor(sd["w"], mesh, [Shard(0)], src_data_rank=None)
    dcp.save(sd, storage_writer=Writer(path, serialization_format=SerializationFormat.SAFETENSORS))
    dist.barrier()
    dist.destroy_process_group()


def gen_safetensors():
    path = fresh("safetensors")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(st_worker, args=(2, os.path.join(tmp, "store"), path), nprocs=2)
    write_listing("safetensors", st_full(), "SerializationFormat.SAFETENSORS on 2 gloo ranks; torch's "
                  "reader cannot load it, so this lists the state dict that was saved")


# --------------------------------------------------------------------------------------
# mutated .metadata files (from sharded/)


class Evil:
    def __reduce__(self):
        return os.system, ("echo pwned",)


class PartsPath:
    """A checkpoint_id pickled as Python 3.11 does: PosixPath with the parts tuple."""

    def __reduce__(self):
        return pathlib.PosixPath, ("/", "tmp", "ck")


def storage_key(md, fqn, offsets):
    for k in md.storage_data:
        if k.fqn == fqn and k.offset == torch.Size(offsets):
            return k
    raise KeyError((fqn, offsets))


def mutate(name, fn):
    with open(os.path.join(HERE, "sharded", ".metadata"), "rb") as f:
        md = pickle.load(f)
    fn(md)
    with open(os.path.join(HERE, "mutated", name + ".metadata"), "wb") as f:
        pickle.dump(md, f)


def gen_mutated():
    shutil.rmtree(os.path.join(HERE, "mutated"), ignore_errors=True)
    os.makedirs(os.path.join(HERE, "mutated"))
    grid = lambda md: md.state_dict_metadata["dt.grid"]  # noqa: E731

    def missing_chunk(md):
        grid(md).chunks.pop()

    def overlap(md):
        c = grid(md).chunks[1]  # (0, 4) → (0, 3): overlaps (0, 0)
        info = md.storage_data.pop(storage_key(md, "dt.grid", c.offsets))
        c.offsets = torch.Size([0, 3])
        md.storage_data[dcpmd.MetadataIndex("dt.grid", c.offsets, 1)] = info

    def out_of_bounds(md):
        grid(md).chunks[3].sizes = torch.Size([3, 5])

    def past_eof(md):
        md.storage_data[storage_key(md, "dt.grid", [3, 4])].length += 1_000_000

    def escape(md):
        md.storage_data[storage_key(md, "dt.grid", [3, 0])].relative_path = "../sharded/__0_0.distcp"

    def absolute(md):
        md.storage_data[storage_key(md, "dt.grid", [3, 0])].relative_path = "/etc/passwd"

    def missing_file(md):
        md.storage_data[storage_key(md, "dt.grid", [3, 0])].relative_path = "__9_0.distcp"

    def no_storage(md):
        del md.storage_data[storage_key(md, "dt.grid", [3, 0])]

    def transform(md):
        # A stream transform torch has no extension for (its registry refuses it too).
        md.storage_data[storage_key(md, "dt.grid", [0, 4])].transform_descriptors = ["stream.aes/1"]

    def zstd_plain(md):
        # torch's ZStandard extension named for an item that is not zstd: the reader
        # fails when it inflates that chunk.
        md.storage_data[storage_key(md, "dt.grid", [0, 4])].transform_descriptors = ["stream.zstd/1"]

    def dtype_mismatch(md):
        grid(md).properties.dtype = torch.float64

    def evil_global(md):
        md.version = Evil()

    def parts_path(md):
        md.storage_meta.checkpoint_id = PartsPath()

    def no_planner_data(md):
        md.planner_data = None

    for fn in (missing_chunk, overlap, out_of_bounds, past_eof, escape, absolute, missing_file,
               no_storage, transform, zstd_plain, dtype_mismatch, evil_global, parts_path, no_planner_data):
        mutate(fn.__name__, fn)


def main():
    gen_model()
    gen_sharded()
    gen_scalars()
    gen_legacy113()
    gen_safetensors()
    gen_mutated()
    total = 0
    for root, _, files in os.walk(HERE):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"testdata/dcp: {total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
