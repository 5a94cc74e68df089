"""A per-device sharded copy of a converted model, written by real torch ranks.

Usage (in the oracle chroot): python3 testdata/verify/shard.py SRC OUT [SRC OUT ...]

Each SRC is a folder with config.json and model.safetensors. Two gloo ranks on the CPU
distribute the weights over a 2-device mesh as FSDP and tensor parallelism would — matrices
alternately by rows (Shard(0), uneven where the dimension is odd: the vocabulary of 97 rows)
and by columns (Shard(1)), stacked expert weights along their last dimension (Shard(2)),
vectors by elements — and dcp.save the DTensors: OUT is a DCP directory whose __R_0.distcp
holds rank R's local shards, what a per-device conversion writes. config.json is copied
beside .metadata. (Two ranks, not more: each is a process importing torch.)
"""

import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from safetensors.torch import load_file


def worker(rank, world, store, jobs):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    for src, out in jobs:
        sd = load_file(os.path.join(src, "model.safetensors"))
        dts = {}
        for i, k in enumerate(sorted(sd)):
            v = sd[k]
            dim = {1: 0, 2: i % 2, 3: 2}[v.dim()]
            dts[k] = distribute_tensor(v, mesh, [Shard(dim)], src_data_rank=None)
        dcp.save(dts, checkpoint_id=out)
        dist.barrier()
    dist.destroy_process_group()


def main():
    args = sys.argv[1:]
    jobs = list(zip(args[0::2], args[1::2]))
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(2, os.path.join(tmp, "store"), jobs), nprocs=2)
    for src, out in jobs:
        shutil.copy(os.path.join(src, "config.json"), out)


if __name__ == "__main__":
    main()
