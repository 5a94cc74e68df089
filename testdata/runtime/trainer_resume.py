#!/usr/bin/env python3
"""A real transformers Trainer run, and its resume under FSDP2 from what ckpt converted.

Usage (in the oracle chroot):
  python3 trainer_resume.py train MODEL_TYPE OUT_DIR
      runs transformers' Trainer (5.12, CPU) for two AdamW steps on a tiny random model of
      MODEL_TYPE with a constant learning rate and saves OUT_DIR/checkpoint-2/ as the Trainer
      does: model.safetensors (keys sorted by name), optimizer.pt (the Trainer's two groups,
      decay then no-decay, each in model.named_parameters() order), scheduler.pt,
      rng_state.pth, trainer_state.json, config.json.
  python3 trainer_resume.py check CHECKPOINT CONVERTED WORK_DIR
      CONVERTED is `ckpt convert --to tpu --topology v5p-8 --format dcp CHECKPOINT`: one DCP
      holding {"model": the weights, "optimizer": optimizer.pt's state, …} for the 4 devices.
      Four gloo CPU processes (fork; file:// rendezvous in WORK_DIR) each build the model from
      config.json, shard it with FSDP2 (fully_shard of every decoder layer and of the model
      on a 4-rank mesh, the fsdp=4 of a v5p-8), build AdamW with the Trainer's groups and the
      saved hyperparameters, and dcp.load the converted checkpoint into {"model":
      model.state_dict(), "optimizer": the optimizer's index-form state with DTensor
      moments}. Each rank checks, bit for bit, that every local shard of every weight and of
      its exp_avg / exp_avg_sq is the slice of the Trainer's files FSDP2 gives it, and that
      every piece stored in __R_0.distcp is rank R's own; then it takes three optimizer
      steps on its micro-batch. One process (no process group) takes the same three steps
      from the Trainer's own files on the original layout — the unsharded model with the
      whole batch — and the parameters are compared.

The two runs compute the same arithmetic in another order: FSDP2 averages the four ranks'
gradients of their micro-batches (a reduce-scatter), the reference takes the gradient of the
mean over the whole batch, so sums are associated differently. The tolerance is float32
reduction-order error, |a - b| <= 1e-5 + 1e-4 |b| after three steps of lr 1e-3 (Adam's
update is about lr per element whatever the gradient's scale, so an error in the moments or a
moment tied to the wrong parameter moves a parameter by ~1e-3). A control run whose k_proj and
v_proj moments are swapped in the reference (same shapes: the tie shapes cannot check) must
differ by more than the tolerance, or the comparison would not tell a wrong tie. Prints
{"ok": …, "errors": […], …}."""

import io
import json
import os
import pickle
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402

torch.set_num_threads(1)

WORLD = 4
STEPS = 3
ATOL, RTOL = 1e-5, 1e-4

CONFIGS = {
    # GQA (k_proj and v_proj the same shape), biases on q/k/v (the no-decay group holds
    # biases and norms, interleaved with the decayed weights in the model's order).
    "qwen2": dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False),
    "llama": dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False, attention_bias=True),
}


def batches(vocab, n, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (WORLD, 8), generator=g) for _ in range(n)]


def train(model_type, out):
    from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments

    cfg = AutoConfig.for_model(model_type, **CONFIGS[model_type])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            ids = (torch.arange(i, i + 8) * 7) % cfg.vocab_size
            return {"input_ids": ids, "labels": ids}

    args = TrainingArguments(output_dir=out, max_steps=2, save_steps=2, per_device_train_batch_size=4,
                             learning_rate=1e-3, weight_decay=0.1, lr_scheduler_type="constant", report_to=[],
                             use_cpu=True, seed=0, logging_strategy="no", save_only_model=False)
    Trainer(model=model, args=args, train_dataset=Tokens()).train()
    print(json.dumps({"checkpoint": os.path.join(out, "checkpoint-2")}))


def trainer_groups(model):
    from transformers import Trainer
    decay = set(Trainer.get_decay_parameter_names(None, model))
    named = list(model.named_parameters())
    return [[p for n, p in named if n in decay], [p for n, p in named if n not in decay]]


def make_optimizer(model, saved_groups):
    """AdamW with the Trainer's groups and the saved hyperparameters; the single-tensor
    implementation on both sides (fused and foreach kernels take DTensors differently)."""
    groups = []
    for params, g in zip(trainer_groups(model), saved_groups):
        groups.append({"params": params, **{k: v for k, v in g.items() if k not in ("params", "foreach", "fused", "initial_lr")}})
    return torch.optim.AdamW(groups, foreach=False, fused=False)


def loss_of(model, ids):
    return model(input_ids=ids, labels=ids).loss


def bits(t):
    t = t.detach().contiguous()
    return bytes(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b""


def reference(ckpt, data, swap=None):
    """Three steps from the Trainer's files on the original layout (one process)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from safetensors.torch import load_file

    cfg = AutoConfig.from_pretrained(ckpt)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    model.load_state_dict(load_file(os.path.join(ckpt, "model.safetensors")), strict=not cfg.tie_word_embeddings)
    if model.config.tie_word_embeddings:
        model.tie_weights()
    osd = torch.load(os.path.join(ckpt, "optimizer.pt"), weights_only=True)
    opt = make_optimizer(model, osd["param_groups"])
    if swap:
        a, b = swap
        osd["state"][a], osd["state"][b] = osd["state"][b], osd["state"][a]
    opt.load_state_dict(osd)
    for ids in data:
        loss_of(model, ids).backward()
        opt.step()
        opt.zero_grad()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def rank_main(rank, ckpt, out, work, data):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    from transformers import AutoConfig, AutoModelForCausalLM
    from safetensors.torch import load_file

    dist.init_process_group("gloo", init_method="file://" + os.path.join(work, "rdzv"), rank=rank, world_size=WORLD)
    errors = []
    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    cfg = AutoConfig.from_pretrained(ckpt)
    torch.manual_seed(1)  # other values than the checkpoint's: everything must come from the load
    model = AutoModelForCausalLM.from_config(cfg)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    osd = torch.load(os.path.join(ckpt, "optimizer.pt"), weights_only=True)
    opt = make_optimizer(model, osd["param_groups"])
    names = {p: n for n, p in model.named_parameters()}
    order = [names[p] for g in opt.param_groups for p in g["params"]]
    msd = model.state_dict()
    ostate = {}
    for i, n in enumerate(order):
        p = msd[n]
        ostate[i] = {"step": torch.tensor(-1.0), "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
    target = {"model": msd, "optimizer": {"state": ostate, "param_groups": opt.state_dict()["param_groups"]}}
    dcp.load(target, checkpoint_id=out)
    # Bit for bit: each local shard is FSDP2's slice of the Trainer's tensor.
    weights = load_file(os.path.join(ckpt, "model.safetensors"))
    loaded = 0
    for n, v in target["model"].items():
        if n not in weights:
            continue
        full = weights[n]
        chunk = torch.chunk(full, WORLD, 0)
        mine = chunk[rank] if rank < len(chunk) else full.narrow(0, full.shape[0], 0)
        if bits(v.to_local()) != bits(mine) or list(v.to_local().shape) != list(mine.shape):
            errors.append("rank %d: weight %s: local shard differs" % (rank, n))
        loaded += 1
    for i, n in enumerate(order):
        st = osd["state"][i]
        for k in ("exp_avg", "exp_avg_sq"):
            full = st[k]
            chunk = torch.chunk(full, WORLD, 0)
            mine = chunk[rank] if rank < len(chunk) else full.narrow(0, full.shape[0], 0)
            got = target["optimizer"]["state"][i][k]
            if not isinstance(got, DTensor) or bits(got.to_local()) != bits(mine):
                errors.append("rank %d: %s of %s (id %d): local shard differs" % (rank, k, n, i))
            loaded += 1
        if float(target["optimizer"]["state"][i]["step"]) != float(st["step"]):
            errors.append("rank %d: step of id %d is %s, want %s" % (rank, i, target["optimizer"]["state"][i]["step"], st["step"]))
    # This rank's file holds only its own pieces.
    with open(os.path.join(out, ".metadata"), "rb") as f:
        md = pickle.load(f)  # ckpt's output under test: trusted here
    own = 0
    for idx, info in md.storage_data.items():
        if info.relative_path != "__%d_0.distcp" % rank or idx.offset is None:
            continue
        tm = md.state_dict_metadata[idx.fqn]
        if not hasattr(tm, "chunks") or len(tm.size) == 0:
            continue
        n = tm.size[0]
        per = -(-n // WORLD)
        if len(tm.chunks) > 1 and idx.offset[0] != per * rank:
            errors.append("rank %d's file holds %s at %s, not its piece" % (rank, idx.fqn, list(idx.offset)))
        own += 1
    # Resume: the loaded values into the model and the optimizer, three steps.
    model.load_state_dict(target["model"])
    opt.load_state_dict(target["optimizer"])
    for ids in data:
        loss_of(model, ids[rank:rank + 1]).backward()
        opt.step()
        opt.zero_grad()
    after = {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}
    if rank == 0:
        torch.save(after, os.path.join(work, "resumed.pt"))
    with open(os.path.join(work, "rank%d.json" % rank), "w") as f:
        json.dump({"rank": rank, "loaded": loaded, "own_pieces": own, "errors": errors}, f)
    dist.barrier()
    dist.destroy_process_group()


def check(ckpt, out, work):
    import torch.multiprocessing as mp
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(ckpt)
    data = batches(cfg.vocab_size, STEPS, 5)
    mp.start_processes(rank_main, args=(ckpt, out, work, data), nprocs=WORLD, start_method="fork")
    res = {"ranks": [], "errors": []}
    for r in range(WORLD):
        with open(os.path.join(work, "rank%d.json" % r)) as f:
            rr = json.load(f)
        res["errors"] += rr.pop("errors")
        res["ranks"].append(rr)
    resumed = torch.load(os.path.join(work, "resumed.pt"), weights_only=True)
    want = reference(ckpt, data)
    from safetensors.torch import load_file
    start = load_file(os.path.join(ckpt, "model.safetensors"))
    worst, moved = 0.0, 0.0
    for n, b in want.items():
        a = resumed[n]
        bad = (a - b).abs() > ATOL + RTOL * b.abs()
        worst = max(worst, float((a - b).abs().max()))
        if n in start:
            moved = max(moved, float((b - start[n]).abs().max()))
        if bad.any():
            res["errors"].append("%s: resumed differs from the reference by %g" % (n, float((a - b).abs().max())))
    # Control: the reference with two same-shaped parameters' moments swapped.
    osd = torch.load(os.path.join(ckpt, "optimizer.pt"), weights_only=True)
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_config(cfg)
    names = [n for g in make_optimizer(m, osd["param_groups"]).param_groups for n in
             [{p: k for k, p in m.named_parameters()}[p] for p in g["params"]]]
    k = names.index("model.layers.0.self_attn.k_proj.weight")
    v = names.index("model.layers.0.self_attn.v_proj.weight")
    swapped = reference(ckpt, data, swap=(k, v))
    control = max(float((swapped[n] - want[n]).abs().max()) for n in want)
    if control <= ATOL + RTOL:
        res["errors"].append("control: swapping k_proj's and v_proj's moments changes the parameters by %g only" % control)
    res.update(max_diff=worst, moved=moved, control=control, params=len(want), ok=not res["errors"])
    print(json.dumps(res))


def main():
    if sys.argv[1] == "train":
        train(sys.argv[2], sys.argv[3])
    else:
        check(sys.argv[2], sys.argv[3], sys.argv[4])


if __name__ == "__main__":
    main()
