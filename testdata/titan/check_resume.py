#!/usr/bin/env python3
"""Checks that a TorchTitan checkpoint ckpt converted for a 4-device mesh resumes training.

Usage (in the oracle chroot, from the repository root):

    python3 testdata/titan/check_resume.py LAYOUT ORIG OUT WORK [FORM]

ORIG is a step-N folder gen.py wrote on LAYOUT ("single": one process; "fsdp2": FSDP2 on
2 gloo ranks); OUT is `ckpt convert --format dcp` of it for a 4-device mesh (fsdp=4: the
v5p-8's 4 devices); FORM is the optimizer state's form, "flat" (torchtitan's) or "nested".
Ranks are torch.multiprocessing processes (fork: the parent runs no autograd before it
forks) with a file:// rendezvous in WORK.

  1. The reference: LAYOUT's ranks build torchtitan's llama3 (titan.py), load ORIG through
     CheckpointManager.load (every state, the dataloader's too: the rank count is the
     one it was saved with) and take 3 training steps on titan.batch's global batches
     (4 sequences, each rank its share).
  2. The target: 4 gloo ranks build the same model with FSDP2 on a 4-rank mesh (dp_shard=4,
     fully_shard on each TransformerBlock then the model, as torchtitan's apply_fsdp) and
     load OUT through CheckpointManager.load with exclude_from_loading=["dataloader"]
     (torchtitan's way to resume on another data-parallel degree; ckpt drops the saved
     per-rank sampler state, which means nothing on 4 ranks). Every parameter and its
     exp_avg / exp_avg_sq, gathered whole (full_tensor), must equal ORIG's bit for bit;
     then the same 3 steps.
  3. OUT/.metadata: every weight and moment is split in 4 chunks, chunk r (by offset) in
     __r_0.distcp; the scheduler and train-state values equal ORIG's; the dataloader is not
     in OUT.
  4. The parameters after the 3 steps equal the reference's within float32 reduction-order
     tolerance: the two runs sum the same gradients in another order (4 ranks of one
     sequence against LAYOUT's split, reduce-scatter over 4 ranks against 2 or none), so
     gradients differ in their last bits, and Adam's normalized update (lr·m/(√v+ε), lr
     ≈ 8e-4) passes that on scaled by lr: |Δ| ≤ ATOL + RTOL·|p| with ATOL = 1e-6 and RTOL
     = 1e-5 bounds it with room, while a wrong moment, step or learning rate moves some
     parameter by about lr (1e-4 and more) after 3 steps.

Prints {"ok": …, "errors": […], "max_diff": …, "losses": {…}, …}.
"""

import json
import os
import pickle
import sys
import warnings

warnings.filterwarnings("ignore")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

import titan  # noqa: E402

torch.set_num_threads(1)

ROWS = 4
STEPS = (3, 4, 5)
ATOL, RTOL = 1e-6, 1e-5
TARGET = 4


def full(t):
    return t.full_tensor() if isinstance(t, DTensor) else t.detach().clone()


def build(rank, world, form, mesh=None):
    torch.manual_seed(1)  # not the saved weights: loading must overwrite every one
    model = titan.Transformer(titan.Args())
    if mesh is not None:
        from torch.distributed.fsdp import fully_shard

        for block in model.layers.values():
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    optimizers = titan.build_optimizers([model], flatten=form == "flat")
    schedulers = titan.build_lr_schedulers(optimizers)
    return model, optimizers, schedulers, titan.ParallelAwareDataloader(rank, world), titan.TrainState()


def snapshot(model, optimizers):
    """FQN → whole parameter, and FQN.exp_avg / FQN.exp_avg_sq / FQN.step → whole state."""
    out = {}
    opt = optimizers.optimizers[0]
    for name, p in model.named_parameters():
        out[name] = full(p)
        for k, v in opt.state[p].items():
            out["%s.%s" % (name, k)] = full(v)
    return out


def run(rank, world, path, work, form, tag, exclude):
    if world > 1:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(work, "rdzv-" + tag), rank=rank, world_size=world)
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_shard",))
    else:
        mesh = None
    model, optimizers, schedulers, loader, trainer = build(rank, world, form, mesh)
    st = titan.states(trainer, [model], optimizers, loader, schedulers)
    titan.load(st, path, exclude=exclude)
    loaded = snapshot(model, optimizers)
    res = {"step": trainer.step, "ntokens_seen": trainer.ntokens_seen, "last_epoch": schedulers.schedulers[0].last_epoch,
           "lr": optimizers.optimizers[0].param_groups[0]["lr"], "losses": []}
    per = ROWS // world
    for step in STEPS:
        inputs, labels = titan.batch(step, ROWS)
        loss = titan.train_step(model, optimizers, schedulers, inputs[rank * per:(rank + 1) * per], labels[rank * per:(rank + 1) * per])
        if world > 1:
            dist.all_reduce(loss)
            loss /= world
        res["losses"].append(loss.item())
    after = {name: full(p) for name, p in model.named_parameters()}
    if rank == 0:
        torch.save({"loaded": loaded, "after": after, "res": res}, os.path.join(work, tag + ".pt"))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def bits(t):
    t = t.detach().contiguous()
    return bytes(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b""


def whole(path, work, name):
    """The checkpoint at path as one plain state dict (torch's dcp_to_torch_save)."""
    pt = os.path.join(work, name + ".pt")
    dcp_to_torch_save(path, pt)
    return torch.load(pt, weights_only=False)


def check_metadata(out, orig, errors):
    with open(os.path.join(out, ".metadata"), "rb") as f:
        md = pickle.load(f)  # ckpt's output under test: trusted here
    where = {}
    for idx, info in md.storage_data.items():
        where[(idx.fqn, tuple(idx.offset) if idx.offset is not None else None)] = info.relative_path
    split = 0
    for fqn, m in md.state_dict_metadata.items():
        if not hasattr(m, "chunks"):
            continue
        weight = fqn in orig and isinstance(orig[fqn], torch.Tensor)
        moment = fqn.startswith("optimizer.") and (fqn.endswith(".exp_avg") or fqn.endswith(".exp_avg_sq"))
        if not weight and not moment:
            continue
        chunks = sorted(m.chunks, key=lambda c: list(c.offsets))
        if len(chunks) != TARGET:
            errors.append("%s: %d chunks, want %d" % (fqn, len(chunks), TARGET))
            continue
        for r, c in enumerate(chunks):
            file = where.get((fqn, tuple(c.offsets)))
            if file != "__%d_0.distcp" % r:
                errors.append("%s: chunk at %s in %s, want __%d_0.distcp" % (fqn, list(c.offsets), file, r))
        split += 1
    return split


def main():
    layout, orig_path, out_path, work = sys.argv[1:4] + [os.path.abspath(sys.argv[4])]
    form = sys.argv[5] if len(sys.argv) > 5 else "flat"
    world = {"single": 1, "fsdp2": 2}[layout]
    errors = []
    mp.start_processes(run, args=(world, orig_path, work, form, "ref", ()), nprocs=world, start_method="fork")
    mp.start_processes(run, args=(TARGET, out_path, work, form, "tgt", (titan.DATALOADER,)), nprocs=TARGET, start_method="fork")
    ref = torch.load(os.path.join(work, "ref.pt"), weights_only=False)
    tgt = torch.load(os.path.join(work, "tgt.pt"), weights_only=False)

    orig = whole(orig_path, work, "orig")
    out = whole(out_path, work, "out")
    # 2. What the 4 ranks loaded is the original, bit for bit (weights, moments, steps).
    for k, want in ref["loaded"].items():
        got = tgt["loaded"].get(k)
        if got is None or got.dtype != want.dtype or got.shape != want.shape or bits(got) != bits(want):
            errors.append("%s: loaded on 4 ranks differs from the original" % k)
    for k in ("step", "ntokens_seen", "last_epoch", "lr"):
        if ref["res"][k] != tgt["res"][k]:
            errors.append("%s: %r on 4 ranks, %r on the original layout" % (k, tgt["res"][k], ref["res"][k]))
    # The reference loaded ORIG itself: its snapshot is ORIG's values.
    weights = [k for k, v in orig.items() if isinstance(v, torch.Tensor)]
    for k in weights:
        if bits(ref["loaded"][k]) != bits(orig[k]):
            errors.append("%s: the reference did not load the original" % k)
    # 3. The output holds every tensor of ORIG bit for bit, split over the 4 ranks; the
    # training state beside it as saved, the dataloader left out.
    compared = [0]

    def same(got, want, path):
        if isinstance(want, torch.Tensor):
            compared[0] += 1
            if not isinstance(got, torch.Tensor) or got.dtype != want.dtype or got.shape != want.shape or bits(got) != bits(want):
                errors.append("%s differs in the output" % path)
        elif isinstance(want, dict):
            if not isinstance(got, dict) or set(got) != set(want):
                errors.append("%s: keys %s in the output, %s saved" % (path, sorted(got) if isinstance(got, dict) else got, sorted(want)))
                return
            for k, v in want.items():
                same(got[k], v, "%s.%s" % (path, k))
        elif isinstance(want, (list, tuple)):
            if not isinstance(got, (list, tuple)) or len(got) != len(want):
                errors.append("%s: %r in the output, %r saved" % (path, got, want))
                return
            for i, (g, w) in enumerate(zip(got, want)):
                same(g, w, "%s.%d" % (path, i))
        elif got != want:
            errors.append("%s: %r in the output, %r saved" % (path, got, want))

    if titan.DATALOADER in out:
        errors.append("the dataloader's per-rank state is in the output")
    same(out, {k: v for k, v in orig.items() if k != titan.DATALOADER}, "")
    split = check_metadata(out_path, orig, errors)
    # 4. Three steps from there agree with the original layout's.
    max_diff = 0.0
    for k, want in ref["after"].items():
        got = tgt["after"][k]
        d = (got - want).abs()
        max_diff = max(max_diff, d.max().item())
        bad = d > ATOL + RTOL * want.abs()
        if bad.any():
            errors.append("%s after 3 steps: %d elements beyond tolerance (max |Δ| %.3g)" % (k, bad.sum().item(), d.max().item()))
    moved = max((ref["after"][k] - ref["loaded"][k]).abs().max().item() for k in ref["after"])
    print(json.dumps({"ok": not errors, "errors": errors, "compared": compared[0], "split": split, "max_diff": max_diff,
                      "moved": moved, "losses": {"original": ref["res"]["losses"], "target": tgt["res"]["losses"]}}))


if __name__ == "__main__":
    main()
