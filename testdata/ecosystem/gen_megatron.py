#!/usr/bin/env python3
"""Megatron-LM and NeMo checkpoints, as byte-faithful replicas: neither Megatron-LM nor NeMo
is packaged in Debian, so this script writes, with torch.save, torch's DCP and tarfile, the
dicts and file layouts their source saves:

  Megatron-LM (megatron/training/checkpointing.py: get_checkpoint_name,
  get_checkpoint_tracker_filename, generate_state_dict, get_rng_state;
  megatron/core/dist_checkpointing/serialization.py save, save_common and the
  metadata.json its config writes; ShardedObject.unique_key):
    megatron/legacy/       latest_checkpointed_iteration.txt "100",
                           iter_0000100/mp_rank_00/model_optim_rng.pt (ckpt_format torch,
                           one rank): args (argparse.Namespace), checkpoint_version 3.0,
                           iteration, model (an mcore GPTModel state dict with Transformer
                           Engine _extra_state), optimizer (Float16OptimizerWithFloat16Params:
                           the torch Adam state dict, fp32_from_fp16_params, grad_scaler),
                           opt_param_scheduler, rng_state (random, numpy, torch, CUDA and
                           tracker states), num_floating_point_operations_so_far
    megatron/llama_tp1/, llama_tp2pp2/, gpt_tp1/, gpt_tp2pp2/
                           one model each (a Llama-style mcore GPTModel; a GPT-2-style
                           megatron.legacy model with tied embeddings) saved at TP=1 and at
                           TP=2 × PP=2 with the distributed optimizer: iter_0000003/
                           mp_rank_TT[_PPP]/model_optim_rng.pt and distrib_optim.pt, each rank
                           holding its slices of the same model (see megatron_tp.py, which cites
                           the Megatron source it follows)
    megatron/gpt_tp2pp2_nodist/
                           the GPT model at TP=2 × PP=2 without the distributed optimizer: each
                           rank's AdamW state by position in its model_optim_rng.pt
    megatron/gpt_tp2/      the GPT model at TP=2 without pipeline parallelism (mp_rank_TT
                           folders; the tied embeddings on one stage)
    megatron/hostile/      TP=2 × PP=2 saves of the Llama model that do not merge: a replicated
                           norm that differs on one rank (replica/), args whose query groups do
                           not divide over the ranks (qkv_groups/), one rank whose args disagree
                           (args/)
    megatron/torch_dist/   latest_checkpointed_iteration.txt "200", iter_0000200/: a DCP of
                           the sharded entries (layers stacked on a leading axis, optimizer
                           moments, ShardedObjects as bytes items named KEY/shard_OFF_SHAPE),
                           common.pt (the rest) and metadata.json
  NeMo 2 (nemo/lightning/io/mixin.py, nemo/lightning/pytorch/strategies/megatron_strategy.py,
  MegatronCheckpointIO): nemo2/ with context/ (io.json, model.yaml) and weights/ (the
  Megatron torch_dist layout of the Lightning checkpoint dict, keys "module.…")
  NeMo 1 (nemo/core/connectors/save_restore_connector.py _make_nemo_file_from_folder:
  tarfile.open(path, "w:") with arcname "."; older releases "w:gz"):
    nemo1/model.nemo       ./model_config.yaml, ./model_weights.ckpt (a state dict)
    nemo1/tp2.nemo         ./model_config.yaml, ./mp_rank_0{0,1}/model_weights.ckpt
    nemo1/model_gz.nemo    the same as model.nemo, gzip'd

    scripts/oracle python testdata/ecosystem/gen_megatron.py [NAME...]

(NAME: legacy, parallel, torch_dist, nemo2, nemo1; all by default) and megatron.json: for
each, torch's listing of what the library's own loader gives — torch.load of the rank file,
dist_checkpointing's merge of common.pt and the DCP (loaded with dcp_to_torch_save), tarfile +
torch.load of a .nemo's weights — and the bytes of every io.BytesIO, hex; for the parallel
saves ("llama", "gpt"), the TP=1 model and its optimizer state by parameter name they merge to
(megatron_tp.expected) and the names of each param group.
"""
import argparse
import io
import json
import os
import random
import shutil
import sys
import tarfile
import tempfile

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

sys.path.insert(0, os.path.dirname(__file__))
from common import listing  # noqa: E402
import megatron_tp  # noqa: E402

OUT = "testdata/ecosystem/megatron"
HIDDEN, FFN, VOCAB, LAYERS = 8, 16, 32, 2


def args(tp, pp):
    """Megatron's parsed arguments (a subset of what arguments.py defines, as saved)."""
    return argparse.Namespace(num_layers=LAYERS, hidden_size=HIDDEN, ffn_hidden_size=FFN, num_attention_heads=2,
                              max_position_embeddings=64, padded_vocab_size=VOCAB, tensor_model_parallel_size=tp,
                              pipeline_model_parallel_size=pp, params_dtype=torch.bfloat16, bf16=True, fp16=False,
                              use_distributed_optimizer=False, ckpt_format="torch", lr=3e-4, seed=1234,
                              tokenizer_type="GPT2BPETokenizer", data_path=["/data/corpus_text_document"])


def extra_state(fp8):
    """Transformer Engine's get_extra_state: a BytesIO of torch.save(fp8 meta), or empty."""
    buf = io.BytesIO()
    if fp8:
        torch.save({"scale_fwd": torch.ones(3), "amax_history_fwd": torch.zeros(4, 3)}, buf)
    return buf


def layer_params(layer, tp):
    """One mcore TransformerLayer's parameters on one tensor-parallel rank."""
    pre = f"decoder.layers.{layer}."
    return {
        pre + "self_attention.linear_qkv.layer_norm_weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        pre + "self_attention.linear_qkv.weight": torch.randn(3 * HIDDEN // tp, HIDDEN, dtype=torch.bfloat16),
        pre + "self_attention.linear_proj.weight": torch.randn(HIDDEN, HIDDEN // tp, dtype=torch.bfloat16),
        pre + "mlp.linear_fc1.weight": torch.randn(FFN // tp, HIDDEN, dtype=torch.bfloat16),
        pre + "mlp.linear_fc2.weight": torch.randn(HIDDEN, FFN // tp, dtype=torch.bfloat16),
    }


def model(tp, layers, first, last):
    sd = {}
    if first:
        sd["embedding.word_embeddings.weight"] = torch.randn(VOCAB // tp, HIDDEN, dtype=torch.bfloat16)
    for layer in layers:
        for k, v in layer_params(layer, tp).items():
            sd[k] = v
            if k.endswith("linear_qkv.weight"):
                sd[k.removesuffix("weight") + "_extra_state"] = extra_state(fp8=layer == 0)
    if last:
        sd["decoder.final_layernorm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
        sd["output_layer.weight"] = torch.randn(VOCAB // tp, HIDDEN, dtype=torch.bfloat16)
    return sd


def optimizer(params):
    """Float16OptimizerWithFloat16Params.state_dict(): torch Adam over the fp32 main params."""
    main = [torch.nn.Parameter(p.float()) for p in params]
    adam = torch.optim.Adam(main, lr=3e-4, betas=(0.9, 0.95))
    for p in main:
        p.grad = torch.randn_like(p)
    adam.step()
    return {"optimizer": adam.state_dict(), "grad_scaler": None,
            "fp32_from_fp16_params": [[p.detach().clone() for p in main]]}


def rng_state():
    random.seed(1)
    np.random.seed(1)
    return [{"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
             "torch_rng_state": torch.get_rng_state(), "cuda_rng_state": torch.get_rng_state().clone(),
             "rng_tracker_states": {"model-parallel-rng": torch.get_rng_state().clone()}}]


def scheduler():
    return {"max_lr": 3e-4, "warmup_steps": 10, "num_steps": 100, "decay_style": "cosine",
            "decay_steps": 1000, "min_lr": 3e-5}


def rank_state(tp, pp, tp_rank, pp_rank, iteration):
    per = LAYERS // pp
    sd = model(tp, range(pp_rank * per, (pp_rank + 1) * per), pp_rank == 0, pp_rank == pp - 1)
    params = [v for k, v in sd.items() if isinstance(v, torch.Tensor)]
    state = {"args": args(tp, pp), "checkpoint_version": 3.0, "iteration": iteration, "model": sd,
             "optimizer": optimizer(params), "opt_param_scheduler": scheduler(), "rng_state": rng_state(),
             "num_floating_point_operations_so_far": 123456789}
    return state


def save_legacy(root, tracker, tp, pp, distrib_optim):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(tracker)
    folder = "release" if tracker == "release" else "iter_{:07d}".format(int(tracker))
    out = {}
    for pp_rank in range(pp):
        for tp_rank in range(tp):
            name = f"mp_rank_{tp_rank:02d}" if pp == 1 else f"mp_rank_{tp_rank:02d}_{pp_rank:03d}"
            d = os.path.join(root, folder, name)
            os.makedirs(d)
            torch.save(rank_state(tp, pp, tp_rank, pp_rank, 0 if tracker == "release" else int(tracker)),
                       os.path.join(d, "model_optim_rng.pt"))
            if distrib_optim:
                # DistributedOptimizer.save_parameter_state: per buffer, per dtype, the
                # gathered param / exp_avg / exp_avg_sq of the bucket.
                torch.save({"buckets_coalesced": True, 0: {(torch.bfloat16, torch.float32): {
                    "param": torch.randn(64), "exp_avg": torch.randn(64), "exp_avg_sq": torch.rand(64),
                    "numel_unpadded": 60}}}, os.path.join(d, "distrib_optim.pt"))
            out[name] = torch.load(os.path.join(d, "model_optim_rng.pt"), weights_only=False)
    return out[next(iter(out))] if len(out) == 1 else dict(sorted(out.items()))


def shard_key(key, offset, shape):
    """ShardedObject.unique_key."""
    return f"{key}/shard_{'.'.join(map(str, offset))}_{'.'.join(map(str, shape))}"


def save_dist(folder, sharded, common):
    """dist_checkpointing.save with the torch_dist strategy on one rank: the sharded entries
    through torch's DCP, the common state with torch.save, and the backend's metadata.json."""
    shutil.rmtree(folder, ignore_errors=True)
    dcp.save(sharded, checkpoint_id=folder)
    torch.save(common, os.path.join(folder, "common.pt"))
    with open(os.path.join(folder, "metadata.json"), "w") as f:
        json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                   "common_backend": "torch", "common_backend_version": 1}, f)


def merge(x1, x2):
    """megatron.core.dist_checkpointing.dict_utils.merge."""
    if isinstance(x1, dict) and isinstance(x2, dict):
        for k, v2 in x2.items():
            x1[k] = merge(x1[k], v2) if k in x1 else v2
    elif isinstance(x1, list) and isinstance(x2, list):
        assert len(x1) == len(x2)
        for i, v2 in enumerate(x2):
            x1[i] = merge(x1[i], v2)
    else:
        raise ValueError(f"duplicate {x1} {x2}")
    return x1


def load_dist(folder):
    common = torch.load(os.path.join(folder, "common.pt"), weights_only=False)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "ref.pt")
        dcp_to_torch_save(folder, p)
        return merge(common, torch.load(p, weights_only=False))


def stacked(prefix):
    """An mcore model's sharded state dict on one rank: each layer's parameters stacked on a
    leading axis under one key, _extra_state ShardedObjects per layer."""
    sd = {}
    per_layer = [layer_params(i, 1) for i in range(LAYERS)]
    for k in per_layer[0]:
        name = k.replace("decoder.layers.0.", "decoder.layers.")
        sd[prefix + name] = torch.stack([per_layer[i][k.replace(".0.", f".{i}.", 1)] for i in range(LAYERS)])
    for i in range(LAYERS):
        sd[shard_key(prefix + "decoder.layers.self_attention.linear_qkv._extra_state", (i,), (LAYERS,))] = extra_state(fp8=i == 0)
    sd[prefix + "embedding.word_embeddings.weight"] = torch.randn(VOCAB, HIDDEN, dtype=torch.bfloat16)
    sd[prefix + "decoder.final_layernorm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
    return sd


def megatron_dist(root):
    torch.manual_seed(7)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("200\n")
    sharded = stacked("")
    for k, v in list(sharded.items()):
        if isinstance(v, torch.Tensor):
            sharded["optimizer.state.exp_avg." + k] = torch.randn(v.shape)
            sharded["optimizer.state.exp_avg_sq." + k] = torch.rand(v.shape)
            sharded["optimizer.state.fp32_param." + k] = v.float()
    buf = io.BytesIO()
    torch.save(rng_state(), buf)
    sharded[shard_key("rng_state", (0, 0), (1, 1))] = buf
    common = {"args": args(1, 1), "checkpoint_version": 3.0, "iteration": 200,
              "optimizer": {"param_groups": [{"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1,
                                              "params": list(range(7)), "step": 200}]},
              "opt_param_scheduler": scheduler(), "num_floating_point_operations_so_far": 987654321}
    folder = os.path.join(root, "iter_0000200")
    save_dist(folder, sharded, common)
    return load_dist(folder)


def nemo2(root):
    torch.manual_seed(8)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "context"))
    with open(os.path.join(root, "context", "io.json"), "w") as f:
        json.dump({"root": {"type": "ref", "key": "trainer_context_1"},
                   "objects": {"trainer_context_1": {"type": {"type": "pyref", "module": "nemo.lightning.io.pl", "name": "TrainerContext"}}}}, f)
    with open(os.path.join(root, "context", "model.yaml"), "w") as f:
        f.write("_target_: nemo.collections.llm.gpt.model.base.GPTModel\nconfig:\n  num_layers: 2\n  hidden_size: 8\n")
    sharded = stacked("module.")
    common = {"epoch": 0, "global_step": 9, "pytorch-lightning_version": "2.4.0",
              "loops": {"fit_loop": {"epoch_progress": {"current": {"completed": 0}}}},
              "lr_schedulers": [{"last_epoch": 9, "base_lrs": [3e-4]}], "state_dict": {}, "hparams_name": "kwargs"}
    folder = os.path.join(root, "weights")
    save_dist(folder, sharded, common)
    return load_dist(folder)


CONFIG = """target: nemo.collections.nlp.models.language_modeling.megatron_gpt_model.MegatronGPTModel
precision: bf16
tensor_model_parallel_size: {tp}
pipeline_model_parallel_size: 1
num_layers: 2
hidden_size: 8
tokenizer:
  library: megatron
  type: GPT2BPETokenizer
"""


def nemo_file(path, tp, gz):
    """SaveRestoreConnector.save_to: the folder tarred with arcname "."."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "model_config.yaml"), "w") as f:
            f.write(CONFIG.format(tp=tp))
        weights = {}
        for r in range(tp):
            torch.manual_seed(20 + r)
            sd = {"model.language_model.embedding.word_embeddings.weight": torch.randn(VOCAB // tp, HIDDEN),
                  "model.language_model.encoder.layers.0.self_attention.query_key_value.weight": torch.randn(3 * HIDDEN // tp, HIDDEN),
                  "model.language_model.encoder.final_layernorm.weight": torch.ones(HIDDEN)}
            sub = d if tp == 1 else os.path.join(d, f"mp_rank_{r:02d}")
            os.makedirs(sub, exist_ok=True)
            torch.save(sd, os.path.join(sub, "model_weights.ckpt"))
            weights["model_weights.ckpt" if tp == 1 else f"mp_rank_{r:02d}/model_weights.ckpt"] = sd

        def clean(ti):
            ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "", ""
            return ti
        with tarfile.open(path, "w:gz" if gz else "w:") as tar:
            tar.add(d, arcname=".", filter=clean)
    # What NeMo's restore_from reads back: each weights member, torch.load'ed.
    out = {}
    with tarfile.open(path, "r:*") as tar:
        for m in tar.getmembers():
            if m.name.endswith("model_weights.ckpt"):
                sd = torch.load(io.BytesIO(tar.extractfile(m).read()), weights_only=True)
                out[m.name.removeprefix("./")] = sd
    return out["model_weights.ckpt"] if tp == 1 else {k.split("/")[0]: v for k, v in out.items()}


def byte_items(obj, prefix=""):
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(byte_items(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(byte_items(v, f"{prefix}.{i}" if prefix else str(i)))
    elif isinstance(obj, io.BytesIO):
        out[prefix] = obj.getvalue().hex()
    return out


def layouts():
    """Parameter layouts of the distributed optimizer's saved buffers (megatron_tp.coalesced)
    for random parameter lists: sizes, shared embeddings first or last, bucket sizes, both
    alignments."""
    rng = random.Random(21)
    out = []
    for case in range(40):
        n = rng.randint(1, 12)
        params = [(f"p{i}", rng.choice([1, 3, 64, 100, 128, 4096, rng.randint(1, 5000)]), False) for i in range(n)]
        if case % 4 == 1:
            params[0] = (params[0][0], params[0][1], True)
        if case % 4 == 2:
            params[-1] = (params[-1][0], params[-1][1], True)
        bucket = rng.choice([None, 1, 100, 1000, 5000, 40000000])
        align = 64 if case % 2 == 0 else 1
        starts, total = megatron_tp.coalesced(params, bucket, megatron_tp.DP, align)
        out.append({"numel": [p[1] for p in params], "shared": [p[2] for p in params], "bucket_size": bucket,
                    "align": align, "starts": starts, "total": total})
    return out


def parallel(expected):
    """The tensor × pipeline parallel saves of megatron_tp, their merged truth in expected."""
    expected["layouts"] = layouts()
    root = os.path.join(OUT, "hostile")
    shutil.rmtree(root, ignore_errors=True)
    for name, (cfg, seed) in megatron_tp.MODELS.items():
        truth = megatron_tp.Truth(cfg, seed)
        megatron_tp.save(os.path.join(OUT, name + "_tp1"), cfg, truth, 1, 1, seed=seed + 100)
        megatron_tp.save(os.path.join(OUT, name + "_tp2pp2"), cfg, truth, 2, 2, seed=seed + 200)
        expected[name] = {"tensors": listing(megatron_tp.expected(cfg, truth)), "groups": truth.groups}
        if name != "llama":
            megatron_tp.save(os.path.join(OUT, name + "_tp2pp2_nodist"), cfg, truth, 2, 2, seed=seed + 300,
                             distributed=False)
            megatron_tp.save(os.path.join(OUT, name + "_tp2"), cfg, truth, 2, 1, seed=seed + 400)
            continue

        def replica(rank, state):
            if rank == "mp_rank_01_000":
                w = state["model"]["decoder.layers.1.self_attention.linear_qkv.layer_norm_weight"]
                w[3] += 1

        def disagree(rank, state):
            if rank == "mp_rank_01_001":
                state["args"].num_layers = 6
        megatron_tp.save(os.path.join(root, "replica"), cfg, truth, 2, 2, seed=seed + 200, tamper=replica)
        megatron_tp.save(os.path.join(root, "qkv_groups"), cfg, truth, 2, 2, seed=seed + 200, num_query_groups=4)
        megatron_tp.save(os.path.join(root, "args"), cfg, truth, 2, 2, seed=seed + 200, tamper=disagree)


def main(which):
    path = "testdata/ecosystem/megatron.json"
    expected = {}
    if os.path.exists(path):
        with open(path) as f:
            expected = json.load(f)
    expected["torch"] = torch.__version__
    expected.pop("tp2pp2", None)
    loaded = {}
    if "legacy" in which:
        torch.manual_seed(3)
        loaded["legacy"] = save_legacy(os.path.join(OUT, "legacy"), "100", 1, 1, False)
    if "parallel" in which:
        parallel(expected)
    if "torch_dist" in which:
        loaded["torch_dist"] = megatron_dist(os.path.join(OUT, "torch_dist"))
    if "nemo2" in which:
        loaded["nemo2"] = nemo2(os.path.join(OUT, "nemo2"))
    if "nemo1" in which:
        os.makedirs(os.path.join(OUT, "nemo1"), exist_ok=True)
        loaded["nemo1/model.nemo"] = nemo_file(os.path.join(OUT, "nemo1", "model.nemo"), 1, False)
        loaded["nemo1/tp2.nemo"] = nemo_file(os.path.join(OUT, "nemo1", "tp2.nemo"), 2, False)
        nemo_file(os.path.join(OUT, "nemo1", "model_gz.nemo"), 1, True)
    for name, obj in loaded.items():
        expected[name] = {"tensors": listing(obj), "bytes": byte_items(obj)}
    with open(path, "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


main(sys.argv[1:] or ["legacy", "parallel", "torch_dist", "nemo2", "nemo1"])
