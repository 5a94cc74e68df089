#!/usr/bin/env python3
"""Checkpoints that pickle whole nn.Module objects (torch.save(model), and YOLO-style
{"model": module, ...} dicts), with the state_dict torch itself gives for each module.

Run inside the oracle chroot from the repository root:

    scripts/oracle python testdata/modules/gen.py

Writes module.pt (torch.save of a torchvision-free nn.Sequential), wrapped.pt (a dict with
a __main__.Net module, an epoch and a plain state dict) and expected.json: for every module
in them, its dotted path in the checkpoint and the entries of module.state_dict() in order
(name, dtype, shape, SHA-256 of the contiguous bytes). __main__.Net is a class the loader
cannot import: ckpt must read its state without it.
"""
import hashlib
import json

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
        self.head = nn.Linear(4, 2)
        self.tied = self.head  # a submodule registered twice: state_dict lists it twice
        self.register_buffer("scale", torch.arange(2.0))
        self.register_buffer("cache", torch.zeros(3), persistent=False)
        self.register_buffer("absent", None)
        self.register_parameter("optional", None)
        self.note = "not state"


def digest(t):
    t = t.detach().contiguous()
    b = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return hashlib.sha256(b).hexdigest()


def listing(m):
    return [{"name": k, "dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape), "sha256": digest(v)}
            for k, v in m.state_dict().items()]


torch.manual_seed(0)
seq = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
torch.save(seq, "testdata/modules/module.pt")
net = Net()
net.features[1].running_mean.add_(0.5)  # buffers that differ from their defaults
net.features[1].num_batches_tracked.add_(7)
torch.save({"model": net, "epoch": 3, "ema": None, "state_dict": seq.state_dict()}, "testdata/modules/wrapped.pt")
expected = {
    "torch": torch.__version__,
    "module.pt": {"": listing(seq)},
    "wrapped.pt": {"model": listing(net)},
}
with open("testdata/modules/expected.json", "w") as f:
    json.dump(expected, f, indent=1)
    f.write("\n")
