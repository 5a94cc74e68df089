#!/usr/bin/env python3
"""Resume training from checkpoints ckpt converted, in the oracle; compare with torch.

    python3 resume.py JOBS.json

JOBS.json is a list of {"name", "kind", "ckpt", "ref", "dtype", "cuda_rng"}:

kind llama, mlp, dcp: the converted training checkpoint CKPT (a torch.save file) is
    loaded the way a TorchTPU script would, on a machine without CUDA
    (torch.load(weights_only=True, map_location="cpu")); model, optimizer, scheduler,
    GradScaler, counters and the CPU RNG state are restored into freshly built objects
    (common.Setup), and STEPS more steps run on the same batches.  With dtype "keep" the
    parameters must be bit-identical to REF (the uninterrupted run); with "bfloat16" the
    weights must load as bfloat16, the optimizer moments as float32, and the losses must
    be finite.  cuda_rng says whether the CUDA RNG states must still be there.
kind optimizers: for every entry of CKPT (converted optimizers.pt), the optimizer state
    is loaded into a fresh MLP + optimizer, once from REF (the source file, loaded by
    torch) and once from CKPT; one more step each must give bit-identical parameters.
kind schedulers: every value of CKPT must equal REF's exactly: same Python types
    (Counter, int, float, bool, None), same float bits.

Prints one JSON line per job, in order: {"name", "problems": [...], "checked": N}.
"""

import json
import math
import os
import struct
import sys
from collections import Counter

sys.dont_write_bytecode = True  # no __pycache__ in testdata
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import MLP, STEPS, Setup, mlp_step, optimizers  # noqa: E402

import torch  # noqa: E402


def load(path):
    return torch.load(path, weights_only=True, map_location="cpu")


def resume(job):
    problems = []
    ck = load(job["ckpt"])
    bf16 = job["dtype"] == "bfloat16"
    want = torch.bfloat16 if bf16 else torch.float32
    model_sd = ck["model"]
    for n, t in model_sd.items():
        if t.is_floating_point() and t.dtype != want:
            problems.append(f"model.{n}: {t.dtype}, want {want}")
    optim = ck["optim" if job["kind"] == "dcp" else "optimizer"]
    for pid, st in optim["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v) and v.is_floating_point() and v.dtype != torch.float32:
                problems.append(f"optimizer state {pid}.{k}: {v.dtype}, want float32")
    rng = ck["rng"]
    if ("cuda" in rng) != job["cuda_rng"]:
        problems.append(f"rng keys {sorted(rng)}: cuda_rng={job['cuda_rng']}")
    if job["cuda_rng"]:
        for t in rng["cuda"]:
            if t.dtype != torch.uint8 or t.device.type != "cpu":
                problems.append(f"cuda rng state {t.dtype} on {t.device}")

    torch.manual_seed(12345)  # the restored RNG state must override this
    s = Setup(job["kind"], dtype=torch.bfloat16 if bf16 else None)
    if job["kind"] == "dcp":
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(s.model, s.opt, model_state_dict=model_sd, optim_state_dict=optim)
        torch.set_rng_state(rng["cpu_rng_state"])
    else:
        s.model.load_state_dict(model_sd)
        s.opt.load_state_dict(optim)
        if s.scaler.is_enabled():
            s.scaler.load_state_dict(ck["scaler"])
        torch.set_rng_state(rng["cpu"])
        if ck["step"] != STEPS:
            problems.append(f"step counter {ck['step']!r}")
    s.sched.load_state_dict(ck["scheduler"])
    losses = [s.train_step(i) for i in range(STEPS, 2 * STEPS)]
    ref = load(job["ref"])
    if bf16:
        if not all(math.isfinite(x) for x in losses):
            problems.append(f"losses {losses}")
        return problems, len(losses)
    if losses != ref["losses"]:
        problems.append(f"losses {losses}, uninterrupted run {ref['losses']}")
    got = s.params()
    for n, p in ref["params"].items():
        if n not in got:
            problems.append(f"{n}: missing")
        elif not torch.equal(got[n], p):
            problems.append(f"{n}: differs from the uninterrupted run (max abs diff "
                            f"{(got[n] - p).abs().max().item():.3g})")
    return problems, len(ref["params"])


def check_optimizers(job):
    problems = []
    src, out = load(job["ref"]), load(job["ckpt"])
    makers = optimizers()
    for name, make in makers.items():
        runs = []
        for ck in (src, out):
            torch.manual_seed(0)
            m = MLP()
            m.load_state_dict(ck[name]["model"])
            opt = make(m)
            opt.load_state_dict(ck[name]["optimizer"])
            mlp_step(m, opt, 7)
            runs.append(m.state_dict())
        for k, v in runs[0].items():
            if not torch.equal(v, runs[1][k]):
                problems.append(f"{name}: {k} differs after one more step")
    return problems, len(makers)


def same(a, b, path, problems):
    if type(a) is not type(b):
        problems.append(f"{path}: {type(b).__name__}, want {type(a).__name__}")
    elif isinstance(a, dict):
        if list(a) != list(b):
            problems.append(f"{path}: keys {list(b)}, want {list(a)}")
        for k in a:
            if k in b:
                same(a[k], b[k], f"{path}.{k}", problems)
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            problems.append(f"{path}: {len(b)} items, want {len(a)}")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}.{i}", problems)
    elif isinstance(a, float):
        if struct.pack("<d", a) != struct.pack("<d", b):
            problems.append(f"{path}: {b!r}, want {a!r}")
    elif torch.is_tensor(a):
        if a.dtype != b.dtype or not torch.equal(a, b):
            problems.append(f"{path}: tensor differs")
    elif a != b:
        problems.append(f"{path}: {b!r}, want {a!r}")


def check_schedulers(job):
    problems = []
    src, out = load(job["ref"]), load(job["ckpt"])
    same(src, out, "", problems)
    if not isinstance(out.get("multistep", {}).get("milestones"), Counter):
        problems.append("multistep milestones are not a Counter")
    return problems, len(src)


for job in json.load(open(sys.argv[1])):
    try:
        fn = {"optimizers": check_optimizers, "schedulers": check_schedulers}.get(job["kind"], resume)
        problems, checked = fn(job)
    except Exception as e:  # a failure to load or resume is a finding of that job
        problems, checked = [f"{type(e).__name__}: {e}"], 0
    print(json.dumps({"name": job["name"], "problems": problems, "checked": checked}), flush=True)
