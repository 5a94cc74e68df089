#!/usr/bin/env python3
"""Accelerate `save_state` folders, written by the real accelerate (python3-accelerate) and
torch in the oracle chroot:

    scripts/oracle python testdata/ecosystem/gen_accelerate.py

Writes into testdata/ecosystem/folders/:
  accelerate/       Accelerator.save_state after two AdamW steps: model.safetensors,
                    optimizer.bin, scheduler.bin, random_states_0.pkl (real accelerate)
  accelerate_fsdp/  the layout save_state gives under FSDP with SHARDED_STATE_DICT
                    (accelerate/utils/fsdp_utils.py save_fsdp_model, save_fsdp_optimizer):
                    pytorch_model_fsdp_0/, a torch DCP of {"model": get_model_state_dict},
                    optimizer_0/, a DCP of {"optimizer": get_optimizer_state_dict} (parameters
                    by name), of a model sharded with torch's fully_shard over one CPU rank;
                    scheduler.bin and random_states_0.pkl by accelerate's own
                    save_accelerator_state. Accelerate does not run FSDP on a CPU-only host,
                    so its two FSDP calls are made here as it makes them.
and accelerate.json: torch's listing of the weights accelerate's load_state would load
(model.safetensors; the DCP's "model"), and of each training-state file or folder.
"""
import json
import os
import shutil
import sys
import tempfile

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29541", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", USE_LIBUV="0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.checkpointing import save_accelerator_state  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from common import listing  # noqa: E402

OUT = "testdata/ecosystem/folders"


def net():
    torch.manual_seed(11)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def train(model, opt, sched):
    for _ in range(2):
        model(torch.randn(3, 8)).sum().backward()
        opt.step()
        sched.step()
        opt.zero_grad()


def load_dcp(path):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "ref.pt")
        dcp_to_torch_save(path, p)
        return torch.load(p, weights_only=False)


def plain():
    path = os.path.join(OUT, "accelerate")
    shutil.rmtree(path, ignore_errors=True)
    acc = Accelerator(cpu=True)
    model = net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    model, opt, sched = acc.prepare(model, opt, sched)
    train(model, opt, sched)
    acc.save_state(path)
    return {"model": listing(load_file(os.path.join(path, "model.safetensors"))),
            "optimizer.bin": listing(torch.load(os.path.join(path, "optimizer.bin"), weights_only=True)),
            "scheduler.bin": listing(torch.load(os.path.join(path, "scheduler.bin"), weights_only=True)),
            "random_states_0.pkl": listing(torch.load(os.path.join(path, "random_states_0.pkl"), weights_only=False))}


def fsdp():
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
    from torch.distributed.fsdp import fully_shard
    path = os.path.join(OUT, "accelerate_fsdp")
    shutil.rmtree(path, ignore_errors=True)
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    model = net()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    train(model, opt, sched)
    # save_fsdp_model / save_fsdp_optimizer with SHARDED_STATE_DICT (fsdp_version 2).
    dcp.save(state_dict={"model": get_model_state_dict(model)}, storage_writer=dcp.FileSystemWriter(os.path.join(path, "pytorch_model_fsdp_0")))
    dcp.save(state_dict={"optimizer": get_optimizer_state_dict(model, opt)}, storage_writer=dcp.FileSystemWriter(os.path.join(path, "optimizer_0")))
    # Accelerator.save_state then saves the rest without the models and optimizers.
    save_accelerator_state(path, [], [], [sched], [], 0, 0)
    dist.destroy_process_group()
    return {"model": listing(load_dcp(os.path.join(path, "pytorch_model_fsdp_0"))["model"]),
            "optimizer_0": listing(load_dcp(os.path.join(path, "optimizer_0"))),
            "scheduler.bin": listing(torch.load(os.path.join(path, "scheduler.bin"), weights_only=True)),
            "random_states_0.pkl": listing(torch.load(os.path.join(path, "random_states_0.pkl"), weights_only=False))}


def main():
    expected = {"torch": torch.__version__, "accelerate": plain(), "accelerate_fsdp": fsdp()}
    with open("testdata/ecosystem/accelerate.json", "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


main()
