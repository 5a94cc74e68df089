#!/usr/bin/env python3
"""Training checkpoints that pickle Python objects beside their tensors, as the libraries of
the ecosystem save them (see README.md for which are written by the real library and which
are replicas built from its source). Run inside the oracle chroot from the repository root:

    scripts/oracle python testdata/ecosystem/gen_objects.py

Writes into testdata/ecosystem/objects/ and objects.json: for every file, torch's listing of
its tensors (name, dtype, shape, SHA-256, modules as their state_dict) and the plain data
ckpt must turn each hyper-parameter object into.
"""
import argparse
import dataclasses
import datetime
import fractions
import json
import os
import sys
import types

import torch
import torch.nn as nn
from omegaconf import OmegaConf

sys.path.insert(0, os.path.dirname(__file__))
from common import listing  # noqa: E402

OUT = "testdata/ecosystem/objects"


def module(name, **members):
    """Registers a module named name (and its parents) whose classes pickle under that name."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    m = sys.modules[name]
    for k, v in members.items():
        v.__module__ = name
        v.__qualname__ = k
        setattr(m, k, v)
    return m


# Replica of lightning.fabric.utilities.data.AttributeDict (Lightning 2.x source): a dict
# subclass whose attributes are its items.
class AttributeDict(dict):
    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError as e:
            raise AttributeError(key) from e

    def __setattr__(self, key, val):
        self[key] = val

    def __delattr__(self, item):
        del self[item]


module("lightning.fabric.utilities.data", AttributeDict=AttributeDict)


# Records of a training library's own (replicas of the usual shapes): a dataclass, and a
# class with __slots__.
@dataclasses.dataclass
class OptimConfig:
    lr: float = 3e-4
    betas: tuple = (0.9, 0.95)
    schedule: str = "cosine"


class Slotted:
    __slots__ = ("width", "depth")

    def __init__(self):
        self.width, self.depth = 8, 2


module("trainlib.config", OptimConfig=OptimConfig, Slotted=Slotted)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(4, 8)
        self.norm = nn.BatchNorm1d(8)
        self.l2 = nn.Linear(8, 2)


def trained():
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    for _ in range(3):
        loss = net.l2(net.norm(net.l1(torch.randn(5, 4)))).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    return net, opt, sched


def lightning(net, opt, sched, hparams, extra):
    """The dict Lightning's _dump_checkpoint builds (trainer/connectors/checkpoint_connector.py)."""
    ck = {
        "epoch": 2,
        "global_step": 3,
        "pytorch-lightning_version": "2.5.0",
        "state_dict": {"model." + k: v for k, v in net.state_dict().items()},
        "loops": {"fit_loop": {"state_dict": {}, "epoch_loop.state_dict": {"_batches_that_stepped": 3},
                               "epoch_progress": {"total": {"ready": 3, "completed": 2}}}},
        "callbacks": {"ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min'}": {
            "monitor": "val_loss", "best_model_score": torch.tensor(0.25), "best_model_path": "/ckpts/epoch=1.ckpt",
            "current_score": torch.tensor(0.3), "dirpath": "/ckpts"}},
        "optimizer_states": [opt.state_dict()],
        "lr_schedulers": [sched.state_dict()],
        "hparams_name": "kwargs",
        "hyper_parameters": hparams,
    }
    ck.update(extra)
    return ck


def plain(v):
    """What ckpt must turn v into: containers of data as plain dicts and lists."""
    if OmegaConf.is_config(v):
        return OmegaConf.to_container(v, resolve=False)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, (types.SimpleNamespace, argparse.Namespace)):
        return {k: plain(x) for k, x in vars(v).items()}
    if dataclasses.is_dataclass(v):
        return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, Slotted):
        return {k: getattr(v, k) for k in v.__slots__}
    if isinstance(v, type):
        return f"{v.__module__}.{v.__qualname__}"
    return v


def main():
    os.makedirs(OUT, exist_ok=True)
    net, opt, sched = trained()
    expected = {"torch": torch.__version__}

    def save(name, obj, plains, **kw):
        path = os.path.join(OUT, name)
        torch.save(obj, path, **kw)
        back = torch.load(path, weights_only=False)
        expected[name] = {"tensors": listing(back), "plain": {k: plain(back[k]) for k in plains}}

    hp = AttributeDict(lr=1e-3, hidden=8, net=AttributeDict(act="gelu", dropout=0.1), tags=["a", "b"])
    save("lightning.ckpt", lightning(net, opt, sched, hp, {}), ["hyper_parameters"])

    cfg = OmegaConf.create({"model": {"hidden": 8, "lr": 1e-3, "warmup_lr": "${model.lr}", "layers": [4, 8, 2]},
                            "data": {"path": "???", "batch": 16}, "seed": None})
    save("lightning_omegaconf.ckpt", lightning(net, opt, sched, cfg, {"hyper_parameters_type": type(cfg)}),
         ["hyper_parameters", "hyper_parameters_type"])

    # fairseq's checkpoint_utils.save_checkpoint state (fairseq/checkpoint_utils.py, 0.12).
    fcfg = OmegaConf.create({"common": {"fp16": True, "seed": 1}, "optimization": {"lr": [0.25], "max_update": 3},
                             "model": {"_name": "transformer", "encoder_embed_dim": 8, "decoder_embed_dim": "${model.encoder_embed_dim}"},
                             "task": {"_name": "translation", "data": "/data"}})
    fairseq = {
        "args": None,
        "cfg": fcfg,
        "model": net.state_dict(),
        "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "FairseqAdam",
                               "lr_scheduler_state": {"best": 2.5}, "num_updates": 3}],
        "task_state": {},
        "extra_state": {"epoch": 2, "train_iterator": {"epoch": 2, "iterations_in_epoch": 0, "shuffle": True},
                        "val_loss": 2.5},
        "last_optimizer_state": opt.state_dict(),
    }
    save("fairseq.pt", fairseq, ["cfg"])

    records = {
        "model": net.state_dict(),
        "args": argparse.Namespace(lr=0.1, epochs=3),
        "ns": types.SimpleNamespace(name="run", steps=3),
        "optim_config": OptimConfig(),
        "arch": Slotted(),
        # Not plain data: kept as the source pickled them.
        "ratio": fractions.Fraction(1, 3),
        "started": datetime.date(2024, 5, 17),
    }
    save("records.pt", records, ["args", "ns", "optim_config", "arch"])

    # torch.compile wraps a module in OptimizedModule; torch.save pickles the wrapper.
    compiled = torch.compile(net)
    for name, kw in (("compiled.pt", {}), ("compiled_legacy.pt", {"_use_new_zipfile_serialization": False})):
        path = os.path.join(OUT, name)
        torch.save(compiled, path, **kw)
        expected[name] = {"tensors": listing(torch.load(path, weights_only=False)), "plain": {}}

    # torch.save(model) in the legacy format: the module's class is a persistent id.
    path = os.path.join(OUT, "legacy_model.pt")
    torch.save(net, path, _use_new_zipfile_serialization=False)
    expected["legacy_model.pt"] = {"tensors": listing(torch.load(path, weights_only=False)), "plain": {}}

    with open("testdata/ecosystem/objects.json", "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


main()
