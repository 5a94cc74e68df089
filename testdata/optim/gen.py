#!/usr/bin/env python3
"""Generate the training-state fixtures in testdata/optim/ (see README.md).

Run it inside the oracle chroot (real PyTorch 2.14, transformers 5.12):

    scripts/oracle python testdata/optim/gen.py

For each training setup of common.py (llama: AdamW in two groups + warmup-cosine +
GradScaler; mlp: SGD momentum + StepLR; dcp: FSDP2 with AdamW in two groups + MultiStepLR,
saved with torch.distributed.checkpoint) it trains STEPS steps, saves the full training
state, keeps training to 2*STEPS steps in the same process and saves the parameters and
losses of that uninterrupted run as NAME.ref.pt.  optimizers.pt and schedulers.pt hold the
state of every optimizer and LR scheduler kind ckpt knows, written by torch itself.
Output is deterministic (fixed seeds, one thread, deterministic algorithms).
"""

import os
import shutil
import sys

sys.dont_write_bytecode = True  # no __pycache__ in testdata
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import HERE, STEPS, MLP, Setup, mlp_step, optimizers, tag_storages_as  # noqa: E402

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.filesystem import FileSystemWriter  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict  # noqa: E402


class Writer(FileSystemWriter):
    """FileSystemWriter with a fixed save_id (a random UUID otherwise), so .metadata is
    reproducible."""

    def storage_meta(self):
        meta = super().storage_meta()
        meta.save_id = "00000000-0000-4000-8000-000000000000"
        return meta


def cuda_rng():
    """What torch.cuda.get_rng_state_all() returns on one GPU: a list of one 16-byte CPU
    ByteTensor (Philox seed and offset)."""
    return [torch.arange(16, dtype=torch.uint8)]


def ref(setup, path):
    losses = [setup.train_step(i) for i in range(STEPS, 2 * STEPS)]
    torch.save({"params": setup.params(), "losses": losses}, path)


def fx_torch(kind):
    """NAME_cuda.pt: the training state after STEPS steps as a CUDA run saves it."""
    torch.manual_seed(0)
    s = Setup(kind)
    for i in range(STEPS):
        s.train_step(i)
    ck = {
        "model": s.model.state_dict(),
        "optimizer": s.opt.state_dict(),
        "scheduler": s.sched.state_dict(),
        "scaler": s.scaler.state_dict(),
        "epoch": 1,
        "step": STEPS,
        "rng": {"cpu": torch.get_rng_state(), "cuda": cuda_rng()},
    }
    keep = [ck["rng"]["cpu"], *ck["rng"]["cuda"]]
    keep += [st["step"] for st in s.opt.state.values() if torch.is_tensor(st.get("step"))]
    with tag_storages_as("cuda:0", keep_cpu=keep):
        torch.save(ck, os.path.join(HERE, f"{kind}_cuda.pt"))
    if kind == "mlp":
        # The same state saved with DCP as plain state dicts: the optimizer's int ids
        # become digit strings ("0"), the empty (disabled) scaler state is left out.
        path = os.path.join(HERE, "mlp_dcp")
        shutil.rmtree(path, ignore_errors=True)
        dcp.save(ck, storage_writer=Writer(path))
    ref(s, os.path.join(HERE, f"{kind}.ref.pt"))


def fx_dcp():
    """dcp/: an FSDP2 (fully_shard, one gloo rank) run: model and optimizer from
    get_state_dict (DTensors; FQN-keyed optimizer state), plus the MultiStepLR state,
    the step counter and the CPU RNG state, saved by dcp.save.  One rank gives the same
    numbers as an unwrapped model, so the reference run continues the FSDP2 one."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", init_method="file:///tmp/ckpt-optim-rdv", rank=0, world_size=1)
    torch.manual_seed(0)
    s = Setup("dcp", wrap=fully_shard)
    for i in range(STEPS):
        s.train_step(i)
    msd, osd = get_state_dict(s.model, s.opt)
    path = os.path.join(HERE, "dcp")
    shutil.rmtree(path, ignore_errors=True)
    dcp.save({"model": msd, "optim": osd, "scheduler": s.sched.state_dict(), "step": STEPS,
              "rng": {"cpu_rng_state": torch.get_rng_state()}}, storage_writer=Writer(path))
    ref(s, os.path.join(HERE, "dcp.ref.pt"))
    dist.destroy_process_group()


def fx_optimizers():
    """optimizers.pt: {name: {"model", "optimizer"}} after 2 steps of every optimizer on
    the MLP (BatchNorm buffers in the model state dict), several with two groups."""
    out = {}
    for name, make in optimizers().items():
        torch.manual_seed(0)
        m = MLP()
        opt = make(m)
        for i in range(2):
            mlp_step(m, opt, i)
        out[name] = {"model": m.state_dict(), "optimizer": opt.state_dict()}
    steps = [st["step"] for o in out.values() for st in o["optimizer"]["state"].values()
             if torch.is_tensor(st.get("step"))]
    with tag_storages_as("cuda:0", keep_cpu=steps):
        torch.save(out, os.path.join(HERE, "optimizers.pt"))


def fx_schedulers():
    """schedulers.pt: the state_dict of every LR scheduler kind after 3 steps, and of an
    enabled and a disabled GradScaler."""
    from torch.optim import lr_scheduler as L
    from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup

    def opt():
        return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9)

    makers = {
        "lambda": lambda o: L.LambdaLR(o, lambda e: 0.9 ** e),
        "step": lambda o: L.StepLR(o, step_size=2, gamma=0.3),
        "multistep": lambda o: L.MultiStepLR(o, milestones=[1, 3, 3, 7], gamma=0.1),
        "cosine": lambda o: L.CosineAnnealingLR(o, T_max=7, eta_min=1e-4),
        "onecycle": lambda o: L.OneCycleLR(o, max_lr=1.0, total_steps=20),
        "linear": lambda o: L.LinearLR(o, start_factor=1 / 3, total_iters=5),
        "sequential": lambda o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.1, total_iters=2),
                                                   L.ExponentialLR(o, gamma=0.7)], milestones=[2]),
        "plateau": lambda o: L.ReduceLROnPlateau(o, patience=0, factor=0.3),
        "hf_cosine": lambda o: get_cosine_schedule_with_warmup(o, 2, 10),
        "hf_linear": lambda o: get_linear_schedule_with_warmup(o, 2, 10),
    }
    out = {}
    for name, make in makers.items():
        o = opt()
        s = make(o)
        for i in range(3):
            o.step()
            s.step(1.0 / (i + 1)) if name == "plateau" else s.step()
        out[name] = s.state_dict()
    on = torch.amp.GradScaler("cpu", init_scale=2.0 ** 14, growth_interval=3)
    out["scaler_enabled"] = on.state_dict()
    out["scaler_disabled"] = torch.amp.GradScaler("cpu", enabled=False).state_dict()
    torch.save(out, os.path.join(HERE, "schedulers.pt"))


if __name__ == "__main__":
    fx_torch("llama")
    fx_torch("mlp")
    fx_dcp()
    fx_optimizers()
    fx_schedulers()
