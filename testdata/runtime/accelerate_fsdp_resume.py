#!/usr/bin/env python3
"""An accelerate save_state folder of an FSDP2 run, and its resume from what ckpt converted.

Usage (in the oracle chroot):
  python3 accelerate_fsdp_resume.py save OUT_DIR
      two gloo CPU ranks train a tiny random transformers Qwen2 under FSDP2 (fully_shard of
      every decoder layer and of the model, as accelerate's fsdp2_prepare_model wraps a
      transformers model) with AdamW and a LambdaLR schedule for two steps, then write
      OUT_DIR as Accelerator.save_state does under FSDP's SHARDED_STATE_DICT, with
      accelerate 1.14's own functions: save_fsdp_model (pytorch_model_fsdp_0/, a DCP of
      {"model": get_model_state_dict}), save_fsdp_optimizer (optimizer_0/, a DCP of
      {"optimizer": get_optimizer_state_dict}, parameters by name) and
      save_accelerator_state (scheduler.bin, random_states_R.pkl per rank).
      accelerate itself runs FSDP only on GPUs (AcceleratorState sets DistributedType.FSDP in
      its multi-GPU branch, never for MULTI_CPU), so the run is made here with torch's
      fully_shard and accelerate's FullyShardedDataParallelPlugin(fsdp_version=2,
      state_dict_type="SHARDED_STATE_DICT") is given to its save functions, which read
      nothing else of the Accelerator for a sharded state dict.
  python3 accelerate_fsdp_resume.py check SRC CONVERTED WORK_DIR
      CONVERTED is `ckpt convert --to tpu --topology v5p-8 --format dcp SRC`: one DCP of
      {"model": …, "optimizer_0": {"optimizer": …}, "scheduler": …, "random_states_R": …}
      for 4 devices. Four gloo processes shard the same model with FSDP2 on a 4-rank mesh
      and dcp.load the converted folder into {"model": get_model_state_dict,
      "optimizer_0": {"optimizer": get_optimizer_state_dict}} (the layout accelerate's
      load_fsdp_optimizer reads, one level down); every local shard of every weight and of
      its exp_avg / exp_avg_sq must equal, bit for bit, FSDP2's slice of the values SRC
      holds (read whole with dcp_to_torch_save), and every piece in __R_0.distcp be rank
      R's. Each rank then takes three steps on its micro-batch. The reference is the
      original layout: two gloo ranks load SRC with accelerate's own load_fsdp_model and
      load_fsdp_optimizer (given what they read of an Accelerator: its process index and
      count, wait_for_everyone a barrier) and take the same three steps on the same global batch (two
      samples a rank). Parameters must agree within float32 reduction order, |a - b| <=
      1e-5 + 1e-4 |b| (the gradients are averaged over 4 ranks instead of 2); a control
      with two same-shaped parameters' moments swapped must differ by more. Prints
      {"ok": …, "errors": […], …}."""

import json
import os
import pickle
import sys
import tempfile
import types
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402

torch.set_num_threads(1)

ATOL, RTOL = 1e-5, 1e-4
STEPS = 3
GLOBAL = 4  # samples a step: 2 ranks × 2 at save and in the reference, 4 ranks × 1 resumed
CONFIG = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)


def plugin():
    from accelerate import FullyShardedDataParallelPlugin
    return FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type="SHARDED_STATE_DICT")


def build(seed, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model("qwen2", **CONFIG)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, cfg, mesh


def optimizer(model, lr=1e-3):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    return opt, sched


def batches(vocab, n, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (GLOBAL, 8), generator=g) for _ in range(n)]


def steps(model, opt, sched, data, rank, world):
    per = GLOBAL // world
    for ids in data:
        mine = ids[rank * per:(rank + 1) * per]
        model(input_ids=mine, labels=mine).loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()


def init(rank, world, work, name, accelerate=False):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + os.path.join(work, name), rank=rank, world_size=world)
    if accelerate:
        # accelerate's functions log through its state: the process group above is its.
        from accelerate import PartialState
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
        PartialState(cpu=True)


def save_rank(rank, out, work):
    import torch.distributed as dist
    from accelerate.checkpointing import save_accelerator_state
    from accelerate.utils import save_fsdp_model, save_fsdp_optimizer
    init(rank, 2, work, "rdzv-save", accelerate=True)
    model, cfg, _ = build(0, 2)
    opt, sched = optimizer(model)
    steps(model, opt, sched, batches(cfg.vocab_size, 2, 3), rank, 2)
    p = plugin()
    save_fsdp_model(p, None, model, out, 0)
    save_fsdp_optimizer(p, None, opt, model, out, 0)
    # Accelerator.save_state then saves the rest, the models and optimizers left out.
    save_accelerator_state(out, [], [], [sched] if rank == 0 else [], [], rank, 2)
    dist.barrier()
    dist.destroy_process_group()


def save(out):
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as work:
        mp.start_processes(save_rank, args=(out, work), nprocs=2, start_method="fork")
    print(json.dumps({"saved": sorted(os.listdir(out))}))


def whole(path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    with tempfile.TemporaryDirectory() as d:
        dcp_to_torch_save(path, os.path.join(d, "x.pt"))
        return torch.load(os.path.join(d, "x.pt"), weights_only=False)


def bits(t):
    t = t.detach().contiguous()
    return bytes(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b""


def mine(full, rank, world):
    chunks = torch.chunk(full, world, 0)
    return chunks[rank] if rank < len(chunks) else full.narrow(0, full.shape[0], 0)


def reference_rank(rank, src, work, data, swap):
    """The original layout: 2 ranks, accelerate's own loaders, three steps — then again
    with the moments of the two parameters swap names exchanged (the control)."""
    import torch.distributed as dist
    from accelerate.utils import load_fsdp_model, load_fsdp_optimizer
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
    init(rank, 2, work, "rdzv-ref", accelerate=True)
    # What the loaders read of the Accelerator, for these two ranks.
    acc = types.SimpleNamespace(wait_for_everyone=dist.barrier, process_index=rank, num_processes=2,
                                is_main_process=rank == 0, is_fsdp2=True)
    for control in (False, True):
        model, cfg, _ = build(1, 2)
        opt, sched = optimizer(model)
        p = plugin()
        load_fsdp_model(p, acc, model, src, 0)
        load_fsdp_optimizer(p, acc, opt, model, src, 0)
        if control:
            osd = get_optimizer_state_dict(model, opt)
            a, b = swap
            osd["state"][a], osd["state"][b] = osd["state"][b], osd["state"][a]
            set_optimizer_state_dict(model, opt, osd)
        steps(model, opt, sched, data, rank, 2)
        after = {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}
        if rank == 0:
            torch.save(after, os.path.join(work, "reference-%s.pt" % control))
    dist.barrier()
    dist.destroy_process_group()


def resumed_rank(rank, src, out, work, data):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                         set_model_state_dict, set_optimizer_state_dict)
    from torch.distributed.tensor import DTensor
    init(rank, 4, work, "rdzv-resume")
    errors = []
    model, cfg, _ = build(1, 4)
    opt, sched = optimizer(model)
    target = {"model": get_model_state_dict(model), "optimizer_0": {"optimizer": get_optimizer_state_dict(model, opt)}}
    dcp.load(target, checkpoint_id=out)
    weights = whole(os.path.join(src, "pytorch_model_fsdp_0"))["model"]
    moments = whole(os.path.join(src, "optimizer_0"))["optimizer"]["state"]
    loaded = 0
    for n, v in target["model"].items():
        if not isinstance(v, DTensor) or bits(v.to_local()) != bits(mine(weights[n], rank, 4)):
            errors.append("rank %d: weight %s: local shard differs" % (rank, n))
        loaded += 1
    for n, st in target["optimizer_0"]["optimizer"]["state"].items():
        for k in ("exp_avg", "exp_avg_sq"):
            if not isinstance(st[k], DTensor) or bits(st[k].to_local()) != bits(mine(moments[n][k], rank, 4)):
                errors.append("rank %d: %s of %s: local shard differs" % (rank, k, n))
            loaded += 1
        if float(st["step"]) != float(moments[n]["step"]):
            errors.append("rank %d: step of %s is %s, want %s" % (rank, n, st["step"], moments[n]["step"]))
    with open(os.path.join(out, ".metadata"), "rb") as f:
        md = pickle.load(f)  # ckpt's output under test: trusted here
    own = 0
    for idx, info in md.storage_data.items():
        tm = md.state_dict_metadata[idx.fqn]
        if info.relative_path != "__%d_0.distcp" % rank or not hasattr(tm, "chunks") or len(tm.chunks) < 2:
            continue
        if idx.offset[0] != -(-tm.size[0] // 4) * rank:
            errors.append("rank %d's file holds %s at %s, not its piece" % (rank, idx.fqn, list(idx.offset)))
        own += 1
    set_model_state_dict(model, target["model"])
    set_optimizer_state_dict(model, opt, target["optimizer_0"]["optimizer"])
    steps(model, opt, sched, data, rank, 4)
    after = {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}
    if rank == 0:
        torch.save(after, os.path.join(work, "resumed.pt"))
    with open(os.path.join(work, "rank%d.json" % rank), "w") as f:
        json.dump({"rank": rank, "loaded": loaded, "own_pieces": own, "errors": errors}, f)
    dist.barrier()
    dist.destroy_process_group()


def check(src, out, work):
    import torch.multiprocessing as mp
    data = batches(CONFIG["vocab_size"], STEPS, 5)
    mp.start_processes(resumed_rank, args=(src, out, work, data), nprocs=4, start_method="fork")
    swap = ("model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight")
    mp.start_processes(reference_rank, args=(src, work, data, swap), nprocs=2, start_method="fork")
    res = {"ranks": [], "errors": []}
    for r in range(4):
        with open(os.path.join(work, "rank%d.json" % r)) as f:
            rr = json.load(f)
        res["errors"] += rr.pop("errors")
        res["ranks"].append(rr)
    resumed = torch.load(os.path.join(work, "resumed.pt"), weights_only=True)
    want = torch.load(os.path.join(work, "reference-False.pt"), weights_only=True)
    swapped = torch.load(os.path.join(work, "reference-True.pt"), weights_only=True)
    start = whole(os.path.join(src, "pytorch_model_fsdp_0"))["model"]
    worst = moved = 0.0
    for n, b in want.items():
        a = resumed[n]
        worst = max(worst, float((a - b).abs().max()))
        moved = max(moved, float((b - start[n]).abs().max()))
        if ((a - b).abs() > ATOL + RTOL * b.abs()).any():
            res["errors"].append("%s: resumed differs from the reference by %g" % (n, float((a - b).abs().max())))
    control = max(float((swapped[n] - want[n]).abs().max()) for n in want)
    if control <= ATOL + RTOL:
        res["errors"].append("control: swapping k_proj's and v_proj's moments changes the parameters by %g only" % control)
    res.update(max_diff=worst, moved=moved, control=control, params=len(want), ok=not res["errors"])
    print(json.dumps(res))


def main():
    if sys.argv[1] == "save":
        save(sys.argv[2])
    else:
        check(sys.argv[2], sys.argv[3], sys.argv[4])


if __name__ == "__main__":
    main()
