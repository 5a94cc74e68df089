"""A per-device sharded copy of a converted model, written by real torch ranks.

Usage (in the oracle chroot): python3 testdata/verify/shard.py SRC OUT [SRC OUT ...]

Each SRC is a folder with config.json and model.safetensors. Four gloo ranks on the CPU lay a
2×2 DeviceMesh over the weights as tensor and data parallelism would — matrices split
[Shard(0), Shard(1)] (a grid of blocks, uneven where a dimension is odd: the vocabulary of
97 rows), stacked expert weights [Shard(0), Shard(2)], vectors [Shard(0), Replicate()] —
and dcp.save the DTensors: OUT is a DCP directory whose __R_0.distcp holds rank R's local
shards, what a per-device conversion writes. config.json is copied beside .metadata.
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
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (2, 2))
    placements = {1: [Shard(0), Replicate()], 2: [Shard(0), Shard(1)], 3: [Shard(0), Shard(2)]}
    for src, out in jobs:
        sd = load_file(os.path.join(src, "model.safetensors"))
        dts = {k: distribute_tensor(v, mesh, placements[v.dim()], src_data_rank=None) for k, v in sd.items()}
        dcp.save(dts, checkpoint_id=out)
        dist.barrier()
    dist.destroy_process_group()


def main():
    args = sys.argv[1:]
    jobs = list(zip(args[0::2], args[1::2]))
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(4, os.path.join(tmp, "store"), jobs), nprocs=4)
    for src, out in jobs:
        shutil.copy(os.path.join(src, "config.json"), out)


if __name__ == "__main__":
    main()
