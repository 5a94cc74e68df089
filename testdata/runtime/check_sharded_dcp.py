#!/usr/bin/env python3
"""Checks a per-device DCP checkpoint ckpt wrote against torch, rank by rank.

Usage (in the oracle chroot): python3 check_sharded_dcp.py SRC.pt OUT_DIR MESH WORK_DIR

SRC.pt is {"model": state_dict, "optim": optimizer state_dict} (llama_adamw.py); OUT_DIR is
`ckpt convert --to cpu --mesh MESH --format dcp SRC.pt OUT_DIR`; MESH is "fsdp=4",
"tp=2,fsdp=2", … (outermost axis first). As many gloo processes as the mesh has ranks are
started (torch.multiprocessing with fork, which spares each rank importing torch again;
file:// rendezvous in WORK_DIR, as testdata/dcp/gen.py). Each rank:

  * builds the DTensors of the original checkpoint with distribute_tensor (src_data_rank=None)
    on init_device_mesh("cpu", MESH), placed by the plan ckpt documents, stated here on its
    own: FSDP2's Shard(0) of everything on fsdp; on tp, q/k/v/gate/up and the embedding and
    lm_head Shard(0), o/down Shard(1), the rest Replicate; AdamW moments like their
    parameter; step counters plain tensors. Where FSDP2 shards a dimension TP already split
    (an fsdp axis before the tp axis) the local tensor is what FSDP2 holds — torch.chunk of
    the TP shard — wrapped as DTensor.from_local with _StridedShard, FSDP2's placement;
  * loads OUT_DIR with dcp.load into zeroed copies and checks every local shard, step counter
    and param-group value bit for bit;
  * checks that its file __RANK_0.distcp holds only its own pieces: every chunk stored there
    is its local shard (offsets and sizes as DTensor reports them, bytes equal), everything
    else a plain tensor or value it holds, and nothing else is in the file;
  * loads OUT_DIR again into another layout (a 1-D mesh over every rank, last dimension
    sharded) and checks it;
  * saves the same DTensors with torch's own dcp.save, and rank 0 checks that torch puts
    every chunk and value in the same file as ckpt did (the same deduplication).

Then one process (no process group) loads OUT_DIR into a plain state dict and checks that it
reassembles the whole model and optimizer bit for bit. Prints {"ok": …, "errors": […], …}.
"""

import copy
import io
import json
import os
import pickle
import re
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor  # noqa: E402
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset  # noqa: E402
from torch.distributed.tensor.placement_types import _StridedShard  # noqa: E402

torch.set_num_threads(1)

COLWISE = re.compile(r"(^|\.)(q_proj|k_proj|v_proj|gate_proj|up_proj)\.(weight|bias)$")
ROWWISE = re.compile(r"(^|\.)(o_proj|down_proj)\.weight$")
VOCAB = re.compile(r"(^|\.)(embed_tokens|lm_head)\.weight$")


def parse_mesh(s):
    names, sizes = [], []
    for part in s.split(","):
        n, k = part.split("=")
        names.append(n)
        sizes.append(int(k))
    return names, sizes


def tp_placement(name):
    if COLWISE.search(name) or VOCAB.search(name):
        return Shard(0)
    if ROWWISE.search(name):
        return Shard(1)
    return Replicate()


def chunk_or_empty(t, k, dim, i):
    pieces = torch.chunk(t, k, dim)
    if i < len(pieces):
        return pieces[i]
    return t.narrow(dim, t.shape[dim], 0)


def dtensor(name, full, mesh, names, sizes):
    """The DTensor of parameter `name` (full: its global value) as ckpt's plan places it."""
    pls = []
    for ax in names:
        pls.append(Shard(0) if ax == "fsdp" else tp_placement(name) if ax == "tp" else Replicate())
    fsdp = names.index("fsdp") if "fsdp" in names else -1
    tp = names.index("tp") if "tp" in names else -1
    if fsdp >= 0 and tp > fsdp and pls[tp] == Shard(0):
        # FSDP2 over TP: FSDP chunks each rank's TP shard.
        coord = mesh.get_coordinate()
        local = chunk_or_empty(chunk_or_empty(full, sizes[tp], 0, coord[tp]), sizes[fsdp], 0, coord[fsdp])
        pls[fsdp] = _StridedShard(0, split_factor=sizes[tp])
        return DTensor.from_local(local.clone(), mesh, pls, run_check=False, shape=full.shape, stride=full.stride())
    return distribute_tensor(full, mesh, pls, src_data_rank=None)


def build(orig, place):
    """The training state dict with every parameter and moment placed by place(name, t)."""
    names = list(orig["model"].keys())
    sd = {"model": {k: place("model." + k, v) for k, v in orig["model"].items()}, "optim": {}}
    state = {}
    for i, st in orig["optim"]["state"].items():
        state[i] = {k: (place("model." + names[i], v) if k != "step" else v.clone()) for k, v in st.items()}
    sd["optim"]["state"] = state
    sd["optim"]["param_groups"] = copy.deepcopy(orig["optim"]["param_groups"])
    return sd


def zeroed(v):
    if isinstance(v, DTensor):
        return DTensor.from_local(torch.zeros_like(v.to_local()), v.device_mesh, v.placements, run_check=False,
                                  shape=v.shape, stride=v.stride())
    if isinstance(v, torch.Tensor):
        return torch.zeros_like(v)
    if isinstance(v, dict):
        return {k: zeroed(x) for k, x in v.items()}
    if isinstance(v, list):
        return [zeroed(x) for x in v]
    if isinstance(v, float):
        return -1.0
    return v


def bits(t):
    t = t.detach().contiguous()
    return bytes(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b""


def compare(got, want, path, errors):
    if isinstance(want, DTensor):
        if not isinstance(got, DTensor) or got.to_local().shape != want.to_local().shape or bits(got.to_local()) != bits(want.to_local()):
            errors.append("%s: local shard differs" % path)
        return 1
    if isinstance(want, torch.Tensor):
        if got.dtype != want.dtype or got.shape != want.shape or bits(got) != bits(want):
            errors.append("%s: tensor differs" % path)
        return 1
    if isinstance(want, dict):
        return sum(compare(got[k], x, "%s.%s" % (path, k), errors) for k, x in want.items())
    if isinstance(want, (list, tuple)):
        if len(got) != len(want):
            errors.append("%s: %d items, want %d" % (path, len(got), len(want)))
            return 0
        return sum(compare(g, x, "%s.%d" % (path, i), errors) for i, (g, x) in enumerate(zip(got, want)))
    if got != want:
        errors.append("%s: %r, want %r" % (path, got, want))
    return 1


def terminal(v):
    """DCP's rule: a list is a leaf unless it holds a tensor or a container to traverse."""
    return not any(isinstance(x, (torch.Tensor, dict)) or (isinstance(x, list) and not terminal(x)) for x in v)


def flat(v, prefix=""):
    """fqn → value, as DCP's flatten_state_dict names them."""
    out = {}
    items = v.items() if isinstance(v, dict) else enumerate(v)
    for k, x in items:
        key = prefix + str(k)
        if isinstance(x, dict) or (isinstance(x, list) and not terminal(x)):
            out.update(flat(x, key + "."))
        else:
            out[key] = x
    return out


def local_box(v):
    """(offsets, sizes) of a DTensor's local shard; the whole for anything else."""
    if isinstance(v, DTensor):
        sizes, offs = compute_local_shape_and_global_offset(v.shape, v.device_mesh, v.placements)
        return list(offs), list(sizes)
    if isinstance(v, torch.Tensor):
        return [0] * v.dim(), list(v.shape)
    return None, None


def check_file(rank, out, expected, errors):
    """Every item in this rank's data file is one it holds, with the bytes it holds."""
    with open(os.path.join(out, ".metadata"), "rb") as f:
        md = pickle.load(f)  # ckpt's output under test: trusted here
    fl = flat(expected)
    path = os.path.join(out, "__%d_0.distcp" % rank)
    data = open(path, "rb").read()
    covered = 0
    n = 0
    for idx, info in md.storage_data.items():
        if info.relative_path != "__%d_0.distcp" % rank:
            continue
        n += 1
        covered += info.length
        v = fl.get(idx.fqn)
        blob = torch.load(io.BytesIO(data[info.offset:info.offset + info.length]), weights_only=False)
        if isinstance(v, (torch.Tensor, DTensor)):
            offs, sizes = local_box(v)
            tm = md.state_dict_metadata[idx.fqn]
            chunk = [c for c in tm.chunks if list(c.offsets) == list(idx.offset)]
            if list(idx.offset) != offs or not chunk or list(chunk[0].sizes) != sizes:
                errors.append("rank %d's file holds %s at %s, not its shard at %s %s" % (rank, idx.fqn, list(idx.offset), offs, sizes))
                continue
            local = v.to_local() if isinstance(v, DTensor) else v
            if bits(blob) != bits(local) or list(blob.shape) != sizes:
                errors.append("rank %d's file: %s at %s holds other bytes than its shard" % (rank, idx.fqn, offs))
        elif blob != v:
            errors.append("rank %d's file: %s is %r, want %r" % (rank, idx.fqn, blob, v))
    if covered != len(data):
        errors.append("rank %d's file is %d bytes, its %d items %d" % (rank, len(data), n, covered))
    return n


def run(rank, world, src, out, mesh_s, work):
    dist.init_process_group("gloo", init_method="file://" + os.path.join(work, "rdzv"), rank=rank, world_size=world)
    names, sizes = parse_mesh(mesh_s)
    mesh = init_device_mesh("cpu", tuple(sizes), mesh_dim_names=tuple(names))
    orig = torch.load(src, weights_only=True)
    errors = []
    expected = build(orig, lambda name, t: dtensor(name, t, mesh, names, sizes))
    target = zeroed(expected)
    dcp.load(target, checkpoint_id=out)
    res = {"rank": rank, "loaded": compare(target, expected, "", errors)}
    res["own_items"] = check_file(rank, out, expected, errors)
    # Another layout: every rank on one axis, the last dimension split.
    line = init_device_mesh("cpu", (world,), mesh_dim_names=("all",))
    other = build(orig, lambda name, t: distribute_tensor(t, line, [Shard(t.dim() - 1) if t.dim() else Replicate()], src_data_rank=None))
    target = zeroed(other)
    dcp.load(target, checkpoint_id=out)
    res["other_layout"] = compare(target, other, "", errors)
    # torch's own save of the same DTensors: which file holds what.
    tdir = os.path.join(work, "torch")
    dcp.save(expected, checkpoint_id=tdir)
    dist.barrier()
    if rank == 0:
        mds = []
        for d in (tdir, out):
            with open(os.path.join(d, ".metadata"), "rb") as f:
                mds.append(pickle.load(f))
        t_md, c_md = mds
        where = lambda md: {(i.fqn, tuple(i.offset) if i.offset is not None else None): s.relative_path for i, s in md.storage_data.items()}
        tw, cw = where(t_md), where(c_md)
        if tw != cw:
            diff = sorted(str(k) for k in set(tw) | set(cw) if tw.get(k) != cw.get(k))
            errors.append("items in other files than torch's dcp.save puts them: %s" % diff[:8])
        res["torch_items"] = len(tw)
        for fqn, m in t_md.state_dict_metadata.items():
            cm = c_md.state_dict_metadata.get(fqn)
            if hasattr(m, "chunks"):
                key = lambda c: (list(c.offsets), list(c.sizes))
                if cm is None or sorted(map(key, m.chunks)) != sorted(map(key, cm.chunks)) or m.size != cm.size or m.properties.dtype != cm.properties.dtype:
                    errors.append("%s: chunks or properties differ from torch's" % fqn)
    with open(os.path.join(work, "rank%d.json" % rank), "w") as f:
        json.dump({**res, "errors": errors}, f)
    dist.barrier()
    dist.destroy_process_group()


def main():
    src, out, mesh_s, work = sys.argv[1:5]
    world = 1
    for k in parse_mesh(mesh_s)[1]:
        world *= k
    # fork: the ranks start without importing torch again (minutes on a small machine)
    mp.start_processes(run, args=(world, src, out, mesh_s, work), nprocs=world, start_method="fork")
    result = {"mesh": mesh_s, "world": world, "ranks": [], "errors": []}
    for r in range(world):
        with open(os.path.join(work, "rank%d.json" % r)) as f:
            rr = json.load(f)
        result["errors"] += rr.pop("errors")
        result["ranks"].append(rr)
    # One process, no process group: the whole model and optimizer.
    orig = torch.load(src, weights_only=True)
    whole = zeroed(build(orig, lambda name, t: t.clone()))
    dcp.load(whole, checkpoint_id=out, no_dist=True)
    result["single_process"] = compare(whole, build(orig, lambda name, t: t), "", result["errors"])
    result["ok"] = not result["errors"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
