#!/usr/bin/env python3
"""DeepSpeed ZeRO checkpoint folders, as byte-faithful replicas: DeepSpeed is not packaged
in Debian, so this script writes, with torch.save, the dicts DeepSpeed 0.16's engine and
ZeRO optimizers save (runtime/engine.py _save_checkpoint and _save_zero_checkpoint,
runtime/zero/stage_1_and_2.py and stage3.py state_dict), with stand-ins for DeepSpeed's own
pickled classes (ZeroStageEnum, LossScaler, fragment_address) registered under DeepSpeed's
module names, and partitions laid out as those optimizers lay them out. It then
consolidates each folder with the algorithm of DeepSpeed's deepspeed/utils/zero_to_fp32.py
(reimplemented below from its source, step for step) to give the expected weights.

    scripts/oracle python testdata/ecosystem/gen_zero.py

Writes testdata/ecosystem/zero/{zero2,zero3}/ (latest, global_step3/, zero_to_fp32.py) and
zero.json: for each, the consolidated state dict's listing, and the listing of the optimizer
state by parameter name that DeepSpeed's deepspeed/checkpoint/ds_to_universal.py extracts
from the same partitions (reimplemented below from its source).
"""
import dataclasses
import enum
import json
import math
import os
import re
import shutil
import sys
import types
from collections import OrderedDict

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import listing  # noqa: E402

OUT = "testdata/ecosystem/zero"
VERSION = "0.16.4"


def module(name, **members):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    for k, v in members.items():
        v.__module__, v.__qualname__ = name, k
        setattr(sys.modules[name], k, v)


class ZeroStageEnum(int, enum.Enum):  # deepspeed/runtime/zero/config.py
    disabled = 0
    optimizer_states = 1
    gradients = 2
    weights = 3
    max_stage = 3


class LossScaler:  # deepspeed/runtime/fp16/loss_scaler.py (static scaling; bf16 / fp32 training)
    def __init__(self, scale=1.0):
        self.cur_scale = scale
        self.dynamic = False


@dataclasses.dataclass
class fragment_address:  # deepspeed/utils/tensor_fragment.py
    numel: int
    start: int


module("deepspeed.runtime.zero.config", ZeroStageEnum=ZeroStageEnum)
module("deepspeed.runtime.fp16.loss_scaler", LossScaler=LossScaler)
module("deepspeed.utils.tensor_fragment", fragment_address=fragment_address)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 5)
        self.proj = torch.nn.Linear(5, 5)
        self.norm = torch.nn.BatchNorm1d(5)
        self.head = torch.nn.Linear(5, 10, bias=False)
        self.frozen = torch.nn.Linear(5, 3)


CONFIG = {"train_batch_size": 4, "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 2}}


def model(stage):
    torch.manual_seed(stage)
    net = Net()
    net.norm.running_mean.add_(0.25)
    net.norm.num_batches_tracked.add_(3)
    net.frozen.requires_grad_(False)
    return net


def trainable(net, shared):
    """Trainable parameters in module order, shared (tied) ones once, as DeepSpeed groups them:
    a weight-decay group and a no-decay group (biases and norms)."""
    seen, groups = set(), [[], []]
    for name, p in net.named_parameters():
        if not p.requires_grad or name in shared:
            continue
        groups[1 if name.endswith("bias") or name.startswith("norm") else 0].append((name, p))
    return groups


def engine_state(net, module_sd, stage, ws, param_shapes, frozen_shapes, frozen_fragments, shared):
    cfg = dict(CONFIG, zero_optimization={"stage": stage})
    return {"module": module_sd, "buffer_names": [n for n, _ in net.named_buffers()], "optimizer": None,
            "param_shapes": param_shapes, "frozen_param_shapes": frozen_shapes, "shared_params": shared,
            "frozen_param_fragments": frozen_fragments, "lr_scheduler": {"last_epoch": 3, "_step_count": 4},
            "data_sampler": None, "random_ltd": None, "sparse_tensor_module_names": set(), "skipped_steps": 0,
            "global_steps": 3, "global_samples": 12, "dp_world_size": ws, "mp_world_size": 1, "ds_config": cfg,
            "ds_version": VERSION}


def adam_state(partitions):
    torch.manual_seed(99)
    return {"state": {i: {"step": torch.tensor(3.0), "exp_avg": torch.randn_like(p), "exp_avg_sq": torch.rand_like(p)}
                      for i, p in enumerate(partitions)},
            "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": wd, "amsgrad": False,
                              "params": [i]} for i, wd in enumerate([0.01, 0.0][:len(partitions)])]}


def zero2(ws=2):
    """Stages 1 and 2 (stage_1_and_2.py): each group's bf16 params flattened, padded to a
    multiple of 2 × world size, split in equal partitions; each rank keeps an fp32 copy of its
    partition, saved without the padding (only the last rank has some)."""
    net = model(2)
    shared = {"head.weight": "embed.weight"}
    net.head.weight = net.embed.weight  # tied
    groups = trainable(net, shared)
    param_shapes = [OrderedDict((n, p.shape) for n, p in g) for g in groups]
    frozen = {n: p for n, p in net.named_parameters() if not p.requires_grad}
    align = 2 * ws
    partitions = [[] for _ in range(ws)]
    padded = [[] for _ in range(ws)]  # what the optimizer steps on: the last rank's keeps its padding
    paddings = [[] for _ in range(ws)]
    slices = [[] for _ in range(ws)]
    for g in groups:
        flat = torch.cat([p.detach().bfloat16().float().reshape(-1) for _, p in g])
        pad = -flat.numel() % align
        flat = torch.cat([flat, torch.zeros(pad)])
        size = flat.numel() // ws
        for r in range(ws):
            part = flat[r * size:(r + 1) * size].clone()
            padding = pad if r == ws - 1 else 0
            partitions[r].append(part[:part.numel() - padding].clone())
            padded[r].append(part)
            paddings[r].append(padding)
            m, start = OrderedDict(), 0
            for n, p in g:
                lo, hi = max(start, r * size), min(start + p.numel(), (r + 1) * size)
                if lo < hi:
                    m[n] = fragment_address(numel=hi - lo, start=lo - r * size)
                start += p.numel()
            slices[r].append(m)
    module_sd = OrderedDict((k, v.bfloat16() if v.is_floating_point() else v) for k, v in net.state_dict().items())
    folder = write(2, ws, engine_state(net, module_sd, 2, ws, param_shapes, OrderedDict((n, p.shape) for n, p in frozen.items()),
                                      {n: p.detach().bfloat16() for n, p in frozen.items()}, shared),
                   lambda r: {"loss_scaler": LossScaler(), "dynamic_loss_scale": False, "overflow": False, "clip_grad": 1.0,
                              "base_optimizer_state": adam_state(padded[r]), "single_partition_of_fp32_groups": partitions[r],
                              "zero_stage": ZeroStageEnum.gradients, "group_paddings": paddings[r], "partition_count": [ws, ws],
                              "ds_version": VERSION, "param_slice_mappings": slices[r]},
                   model_files=["mp_rank_00_model_states.pt"])
    return folder


def zero3(ws=3):
    """Stage 3 (stage3.py): every parameter partitioned on its own in ceil(numel / world size)
    elements per rank, the last zero-padded; a rank's fp32 flat group is the concatenation of
    its pieces; the module holds [0]-shaped placeholders; every rank saves model states."""
    net = model(3)
    groups = trainable(net, {})
    param_shapes = [OrderedDict((n, p.shape) for n, p in g) for g in groups]
    frozen = {n: p for n, p in net.named_parameters() if not p.requires_grad}

    def piece(p, r):
        n = math.ceil(p.numel() / ws)
        flat = torch.cat([p.detach().bfloat16().float().reshape(-1), torch.zeros(n * ws - p.numel())])
        return flat[r * n:(r + 1) * n]

    flat_groups = [[torch.cat([piece(p, r) for _, p in g]) for g in groups] for r in range(ws)]
    placeholders = OrderedDict()
    params = dict(net.named_parameters())
    for k, v in net.state_dict().items():
        placeholders[k] = torch.empty(0, dtype=torch.bfloat16) if k in params else v
    states = {}
    for r in range(ws):
        fragments = {n: piece(p, r).bfloat16() for n, p in frozen.items()}
        states[r] = engine_state(net, placeholders, 3, ws, param_shapes, OrderedDict((n, p.shape) for n, p in frozen.items()),
                                 fragments, {})
    folder = write(3, ws, states,
                   lambda r: {"zero_stage": ZeroStageEnum.weights, "loss_scaler": LossScaler(), "dynamic_loss_scale": False,
                              "overflow": False, "partition_count": ws, "optimizer_state_dict": adam_state(flat_groups[r]),
                              "fp32_flat_groups": flat_groups[r]},
                   model_files=[f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in range(ws)])
    return folder


def write(stage, ws, model_state, optim_state, model_files):
    root = os.path.join(OUT, f"zero{stage}")
    shutil.rmtree(root, ignore_errors=True)
    tag = os.path.join(root, "global_step3")
    os.makedirs(tag)
    with open(os.path.join(root, "latest"), "w") as f:
        f.write("global_step3")
    with open(os.path.join(root, "zero_to_fp32.py"), "w") as f:
        f.write("# DeepSpeed copies its zero_to_fp32.py here; this replica holds a placeholder.\n")
    for r, name in enumerate(model_files):
        torch.save(model_state[r] if isinstance(model_state, dict) and r in model_state else model_state, os.path.join(tag, name))
    for r in range(ws):
        torch.save({"optimizer_state_dict": optim_state(r), "ds_config": CONFIG, "ds_version": VERSION},
                   os.path.join(tag, f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))
    return root


# ---- deepspeed/utils/zero_to_fp32.py, the reference consolidation ------------------------

def natural_keys(text):
    return [int(c) if c.isdigit() else c for c in re.split(r'(\d+)', text)]


def files(d, pattern):
    return sorted((os.path.join(d, f) for f in os.listdir(d) if re.fullmatch(pattern, f)), key=natural_keys)


def zero_to_fp32(checkpoint_dir):
    with open(os.path.join(checkpoint_dir, "latest")) as f:
        tag = f.read().strip()
    d = os.path.join(checkpoint_dir, tag)
    models = []
    for f in files(d, r".*_model_states\.pt"):
        sd = torch.load(f, map_location="cpu", weights_only=False)
        models.append({"buffers": {k: v.float() for k, v in sd["module"].items() if k in sd["buffer_names"]},
                       "param_shapes": sd["param_shapes"], "shared_params": [[k, v] for k, v in sd["shared_params"].items()],
                       "frozen_param_shapes": sd.get("frozen_param_shapes"), "frozen_param_fragments": sd.get("frozen_param_fragments")})
    optims = [torch.load(f, map_location="cpu", weights_only=False) for f in files(d, r".*_optim_states\.pt")]
    stage = optims[0]["optimizer_state_dict"]["zero_stage"]
    ws = optims[0]["optimizer_state_dict"]["partition_count"]
    ws = max(ws) if isinstance(ws, list) else ws
    assert ws == len(optims)
    key = "single_partition_of_fp32_groups" if stage <= 2 else "fp32_flat_groups"
    flat_groups = [o["optimizer_state_dict"][key] for o in optims]
    sd = OrderedDict(models[0]["buffers"])
    frozen = models[0]["frozen_param_shapes"]
    if frozen:
        for name, shape in frozen.items():
            if stage <= 2:
                sd[name] = models[0]["frozen_param_fragments"][name]
            else:
                frags = tuple(m["frozen_param_fragments"][name] for m in models)
                sd[name] = torch.cat(frags, 0).narrow(0, 0, shape.numel()).view(shape)
    if stage <= 2:
        merged = [torch.cat([fg[i] for fg in flat_groups], 0) for i in range(len(flat_groups[0]))]
        for shapes, vec in zip(models[0]["param_shapes"], merged):
            offset = 0
            for name, shape in shapes.items():
                n = shape.numel()
                sd[name] = vec.narrow(0, offset, n).view(shape)
                offset += n
            align = 2 * ws
            assert align * math.ceil(offset / align) == align * math.ceil(vec.numel() / align)
    else:
        shapes = {k: v for s in models[0]["param_shapes"] for k, v in s.items()}
        flat = [torch.cat(fg) for fg in flat_groups]
        offset = 0
        for name, shape in shapes.items():
            n = shape.numel()
            part = math.ceil(n / ws)
            sd[name] = torch.cat([f[offset:offset + part] for f in flat])[:n].view(shape).contiguous()
            offset += part
        assert offset * ws == sum(f.numel() for f in flat_groups[0]) * ws
    for a, b in models[0]["shared_params"]:
        if b in sd:
            sd[a] = sd[b]
    return sd


# ---- deepspeed/checkpoint/ds_to_universal.py, the reference optimizer-state extraction ----

def universal_optimizer(checkpoint_dir):
    """The optimizer state by parameter name that ds_to_universal.py extracts: stages 1 and 2
    (extract_zero_shards, dump_param_fragment, _merge_zero_shards): for every group, each
    rank's fragment of each parameter (param_slice_mappings: start, numel within the rank's
    partition) of exp_avg / exp_avg_sq, concatenated over the ranks and reshaped; stage 3
    (extract_zero_shards_stage3): each parameter's padding-free piece at its offset in every
    rank's flat state, the groups' flat states back to back. "step" is the group's (the
    same on every rank). Laid out as get_optimizer_state_dict gives it."""
    with open(os.path.join(checkpoint_dir, "latest")) as f:
        tag = f.read().strip()
    d = os.path.join(checkpoint_dir, tag)
    model = torch.load(files(d, r".*_model_states\.pt")[0], map_location="cpu", weights_only=False)
    optims = [torch.load(f, map_location="cpu", weights_only=False)["optimizer_state_dict"] for f in files(d, r".*_optim_states\.pt")]
    stage = optims[0]["zero_stage"]
    ws = len(optims)
    shapes = model["param_shapes"]
    fragments = {}  # name -> key -> [per-rank fragment]
    if stage <= 2:
        for osd in optims:
            state_groups = osd["base_optimizer_state"]["state"]
            for gid, mapping in enumerate(osd["param_slice_mappings"]):
                flat_state = {k: state_groups[gid][k] for k in ("exp_avg", "exp_avg_sq")}
                for name, frag in mapping.items():
                    for key, flat in flat_state.items():
                        fragments.setdefault(name, {}).setdefault(key, []).append(flat.narrow(0, frag.start, frag.numel).clone())
    else:
        merged_shapes = {k: v for g in shapes for k, v in g.items()}
        for r, osd in enumerate(optims):
            st = osd["optimizer_state_dict"]["state"]
            flat_state = {k: torch.cat([st[g][k] for g in range(len(shapes))]) for k in ("exp_avg", "exp_avg_sq")}
            offset = 0
            for name, shape in merged_shapes.items():
                unpartitioned = shape.numel()
                partitioned = math.ceil(unpartitioned / ws)  # _zero_partitioned_param_info
                padding_free = min(partitioned, abs(unpartitioned - r * partitioned))
                for key, flat in flat_state.items():
                    fragments.setdefault(name, {}).setdefault(key, []).append(flat.narrow(0, offset, padding_free).clone())
                offset += partitioned
    base = optims[0]["base_optimizer_state"] if stage <= 2 else optims[0]["optimizer_state_dict"]
    state, groups = {}, []
    for gid, g in enumerate(shapes):
        for name, shape in g.items():
            state[name] = {"step": base["state"][gid]["step"].clone()}
            for key in ("exp_avg", "exp_avg_sq"):
                state[name][key] = torch.cat(fragments[name][key]).reshape(shape)
        groups.append({**{k: v for k, v in base["param_groups"][gid].items() if k != "params"}, "params": list(g)})
    return {"state": state, "param_groups": groups}


def main():
    expected = {"torch": torch.__version__}
    for folder in (zero2(), zero3()):
        sd = zero_to_fp32(folder)
        expected[os.path.basename(folder)] = {"tensors": listing(sd), "optimizer": listing(universal_optimizer(folder)),
                                              "tied": {a: b for a, b in [["head.weight", "embed.weight"]] if a in sd and sd[a] is sd[b]}}
    with open("testdata/ecosystem/zero.json", "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


main()
