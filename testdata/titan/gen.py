#!/usr/bin/env python3
"""Writes TorchTitan checkpoints the way torchtitan's CheckpointManager does (titan.py).

Usage (in the oracle chroot, from the repository root):

    python3 testdata/titan/gen.py single OUT              # one process, no FSDP
    python3 testdata/titan/gen.py fsdp2 OUT WORK [nested]  # 2 gloo ranks, FSDP2 (fully_shard)
    python3 testdata/titan/gen.py fixtures                # both, into testdata/titan/{single,fsdp2}

Each run builds the llama3 replica with seed 0 (every rank the same full model), trains 2
steps of AdamW with the LambdaLR warmup schedule on the global batches titan.batch gives
(4 sequences of 8 tokens, each rank its share), and saves OUT/step-2 through
CheckpointManager's path: the model's entries at the top level, "optimizer" flattened
(state.FQN.KEY, param_groups.FQN.KEY), "lr_scheduler", "dataloader" (dp_rank_R bytes per
data-parallel rank and world_size), "train_state".

With "nested", the optimizer state is torch's nested FQN form (get_optimizer_state_dict
without flatten_optimizer_state_dict) in the same layout, as a user of torch's
state_dict API beside the top-level model would save it.

fsdp2 runs apply_fsdp as torchtitan's parallelize_llama does: fully_shard on each
TransformerBlock, then on the whole model, over a 1-D mesh of the 2 ranks (dp_shard), so
every parameter and moment is a DTensor Shard(0) and dcp.save writes each rank's rows as
chunks of the global tensors. Ranks are torch.multiprocessing processes (fork) with a
file:// rendezvous in WORK.

For the committed fixtures the writer's random save_id is pinned (otherwise .metadata
would change at every run); the writer is the FileSystemWriter dcp.save makes for a
checkpoint_id, with its defaults.
"""

import os
import shutil
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed.checkpoint.filesystem import FileSystemWriter  # noqa: E402

import titan  # noqa: E402

torch.set_num_threads(1)

STEPS = 2
ROWS = 4
SAVE_ID = "00000000-0000-4000-8000-000000000000"


class PinnedWriter(FileSystemWriter):
    def storage_meta(self):
        meta = super().storage_meta()
        meta.save_id = SAVE_ID
        return meta


def build(rank, world, mesh=None, flatten=True):
    torch.manual_seed(0)
    model = titan.Transformer(titan.Args())
    if mesh is not None:
        from torch.distributed.fsdp import fully_shard

        for block in model.layers.values():
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    optimizers = titan.build_optimizers([model], flatten=flatten)
    schedulers = titan.build_lr_schedulers(optimizers)
    return model, optimizers, schedulers, titan.ParallelAwareDataloader(rank, world), titan.TrainState()


def train(rank, world, out, pinned, mesh=None, flatten=True):
    model, optimizers, schedulers, loader, trainer = build(rank, world, mesh, flatten)
    per = ROWS // world
    for step in range(1, STEPS + 1):
        inputs, labels = titan.batch(step, ROWS)
        titan.train_step(model, optimizers, schedulers, inputs[rank * per:(rank + 1) * per], labels[rank * per:(rank + 1) * per])
        trainer.step = step
        trainer.ntokens_seen += inputs.numel()
        loader.yielded += 1
    st = titan.states(trainer, [model], optimizers, loader, schedulers)
    path = os.path.join(out, "step-%d" % STEPS)
    if pinned:
        with torch.no_grad():
            dcp.save(titan.flattened(st), storage_writer=PinnedWriter(path))
    else:
        titan.save(st, path)


def fsdp2_rank(rank, world, out, work, pinned, flatten):
    dist.init_process_group("gloo", init_method="file://" + os.path.join(work, "rdzv"), rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_shard",))
    train(rank, world, out, pinned, mesh, flatten)
    dist.barrier()
    dist.destroy_process_group()


def fsdp2(out, work, pinned=False, flatten=True):
    mp.start_processes(fsdp2_rank, args=(2, out, work, pinned, flatten), nprocs=2, start_method="fork")


def main():
    mode = sys.argv[1]
    if mode == "single":
        train(0, 1, sys.argv[2], False)
    elif mode == "fsdp2":
        fsdp2(sys.argv[2], os.path.abspath(sys.argv[3]), flatten=sys.argv[4:] != ["nested"])
    elif mode == "fixtures":
        here = os.path.dirname(os.path.abspath(__file__))
        for name in ("single", "fsdp2"):
            shutil.rmtree(os.path.join(here, name), ignore_errors=True)
        # fsdp2 first: its ranks are forked, which autograd allows only before it has run
        with tempfile.TemporaryDirectory() as work:
            fsdp2(os.path.join(here, "fsdp2"), work, True)
        train(0, 1, os.path.join(here, "single"), True)
    else:
        sys.exit("usage: gen.py single OUT | fsdp2 OUT WORK | fixtures")


if __name__ == "__main__":
    main()
