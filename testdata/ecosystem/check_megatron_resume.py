#!/usr/bin/env python3
"""Training resumes from a merged Megatron save exactly where the TP=1 model it was split
from stands.

    python3 check_megatron_resume.py FAMILY OUT_DCP [FAMILY OUT_DCP ...]

FAMILY is a model of megatron_tp.MODELS; OUT_DCP is ckpt's conversion of its TP=2 × PP=2
save (one global model and its optimizer state by parameter name). The truth is rebuilt
(megatron_tp.Truth: the TP=1 model's fp32 main parameters after three AdamW steps, with
torch's own optimizer). The conversion is loaded with dcp_to_torch_save into a module
whose parameters have the merged names (set_model_state_dict from each parameter's
fp32_param) and an AdamW built with the saved groups' parameters and options, its state
set with torch's set_optimizer_state_dict. Both then take two more steps on the same
gradients; prints one line {"ok", "errors", "params"} per pair: every parameter and moment
must be equal bit for bit.
"""
import json
import os
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402
from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import megatron_tp  # noqa: E402


def module_of(names, like):
    """A module whose parameters are called names (dotted), in that order."""
    root = torch.nn.Module()
    for name in names:
        m = root
        *path, last = name.split(".")
        for p in path:
            if not hasattr(m, p):
                m.add_module(p, torch.nn.Module())
            m = getattr(m, p)
        m.register_parameter(last, torch.nn.Parameter(torch.zeros_like(like[name])))
    return root


def check(family, out):
    cfg, seed = megatron_tp.MODELS[family]
    truth = megatron_tp.Truth(cfg, seed)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "out.pt")
        dcp_to_torch_save(out, p)
        ck = torch.load(p, weights_only=False)  # the extra state is io.BytesIO, as DCP keeps it
    osd = ck["optimizer"]
    names = list(ck["model"])
    mains = {n: osd["state"][n]["fp32_param"] for n in names}
    model = module_of(names, mains)
    set_model_state_dict(model, mains)
    params = dict(model.named_parameters())
    options = ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize")
    opt = torch.optim.AdamW([dict({k: g[k] for k in options}, params=[params[n] for n in g["params"]])
                             for g in osd["param_groups"]])
    set_optimizer_state_dict(model, opt, osd)
    errors = []
    g = torch.Generator().manual_seed(99)
    for _ in range(2):
        for n in names:
            grad = torch.randn(truth.main[n].shape, generator=g)
            truth.main[n].grad = grad.clone()
            params[n].grad = grad.clone()
        truth.opt.step()
        opt.step()
    for n in names:
        if not torch.equal(truth.main[n].detach(), params[n].detach()):
            errors.append(f"{n}: parameter differs after the steps")
        for k in ("step", "exp_avg", "exp_avg_sq"):
            if not torch.equal(truth.opt.state[truth.main[n]][k], opt.state[params[n]][k]):
                errors.append(f"{n}: {k} differs after the steps")
    return {"ok": not errors, "errors": errors[:20], "params": len(names)}


def main():
    args = sys.argv[1:]
    for family, out in zip(args[::2], args[1::2]):
        try:
            rep = check(family, out)
        except Exception as e:  # reported, for the Go test to show
            rep = {"ok": False, "errors": [f"{type(e).__name__}: {e}"]}
        print(json.dumps(rep))


main()
