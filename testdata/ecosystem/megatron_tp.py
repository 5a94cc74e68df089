"""One model saved by Megatron-LM's legacy checkpointing (ckpt_format torch) at several tensor
× pipeline parallel sizes, with the distributed optimizer: a byte-faithful replica of what
Megatron writes, built from its source (Megatron-LM is not packaged in Debian):

  megatron/training/checkpointing.py    get_checkpoint_name (mp_rank_TT[_PPP]), generate_state_dict
                                        (args, checkpoint_version 3.0, iteration, model,
                                        optimizer, opt_param_scheduler, rng_state),
                                        save_checkpoint (distrib_optim.pt beside each rank file)
  megatron/core/tensor_parallel/layers.py
                                        ColumnParallelLinear (weight and bias split on dim 0),
                                        RowParallelLinear (weight split on dim 1, bias whole),
                                        VocabParallelEmbedding (rows split over the padded vocab)
  megatron/core/transformer/attention.py
                                        linear_qkv rows per query group: its query heads, one
                                        key head, one value head ([ng, (np/ng + 2) * hn])
  megatron/core/transformer/mlp.py      gated linear unit: each rank's fc1 output chunked in two,
                                        its gate half then its up half
  megatron/core/tokenizers/utils/build_tokenizer.py
                                        vocab_size_with_padding (make_vocab_size_divisible_by × TP)
  megatron/core/transformer/transformer_layer.py
                                        pipeline stages number their layers from 0; the global
                                        index adds the layers of the stages before
  megatron/core/models/common/language_module/language_module.py, megatron/legacy/model/gpt_model.py
                                        tied embeddings with PP > 1: the last stage holds a copy
                                        (output_layer.weight / word_embeddings_for_head.weight),
                                        both copies flagged shared_embedding
  megatron/core/optimizer/distrib_optimizer.py
                                        _compute_per_buffer_param_layout (parameters in reverse
                                        order, starts aligned to 64 elements, a bucket closed at
                                        bucket_size elements and around a shared embedding, bucket
                                        ends padded to lcm(DP, 128)), get_parameter_state_dp_zero
                                        (per buffer: param, exp_avg, exp_avg_sq gathered over the
                                        DP ranks, bucket padding dropped, "numel_unpadded"),
                                        state_dict (param_groups without params, with step)
  megatron/training/training.py         resolve_ddp_bucket_size (no bucketing past stage 0 or
                                        without overlap_grad_reduce)
  megatron/core/optimizer/__init__.py   _get_param_groups with get_standard_config_overrides:
                                        group 0 the default, group 1 wd_mult 0 (biases, 1-D)

The truth is the TP=1 model: fp32 main parameters trained three AdamW steps on the CPU, the
bf16 weights Megatron keeps cast from them. Each layout splits that one model exactly as its
tensor-parallel layers hold it (only the vocabulary padding rows, which Megatron pads per
layout, differ), so every layout merges back to the same tensors.
"""
import argparse
import io
import math
import os
import random
import shutil
from collections import OrderedDict

import numpy as np
import torch

DP = 2  # data-parallel ranks of the run (gathered into each rank's distrib_optim.pt)
STEPS = 3


class Config:
    def __init__(self, family, layers, hidden, ffn, heads, groups, vocab, divisible, swiglu, bias, norm,
                 tied, qk_norm, position, bucket):
        self.family, self.layers, self.hidden, self.ffn = family, layers, hidden, ffn
        self.heads, self.groups, self.vocab, self.divisible = heads, groups, vocab, divisible
        self.swiglu, self.bias, self.norm, self.tied, self.qk_norm = swiglu, bias, norm, tied, qk_norm
        self.position, self.bucket = position, bucket
        self.kv = hidden // heads

    def padded(self, tp):
        return int(math.ceil(self.vocab / (self.divisible * tp)) * self.divisible * tp)


# A Llama-style mcore GPTModel (Transformer Engine spec: norms fused into linear_qkv and
# linear_fc1, q/k layernorm), grouped-query attention, SwiGLU, untied output layer, RoPE;
# overlap_grad_reduce with small buckets (several on stage 0).
LLAMA = Config("mcore", layers=4, hidden=16, ffn=24, heads=4, groups=2, vocab=50, divisible=8, swiglu=True,
               bias=False, norm="RMSNorm", tied=False, qk_norm=True, position="rope", bucket=400)
# A GPT-2-style legacy model (megatron.legacy.model): LayerNorm and linear biases, learned
# positions, multi-head attention, GeLU, tied embeddings; one bucket per stage.
GPT = Config("legacy", layers=2, hidden=16, ffn=32, heads=2, groups=2, vocab=50, divisible=8, swiglu=False,
             bias=True, norm="LayerNorm", tied=True, qk_norm=False, position="learned_absolute", bucket=None)


# The models of the fixtures, with the seeds their truth is drawn from.
MODELS = {"llama": (LLAMA, 11), "gpt": (GPT, 12)}


def layer_entries(cfg, i):
    """One transformer layer's entries in registration order (state_dict order): (name,
    kind, shape); kind says how tensor parallelism holds it."""
    h, kv, f = cfg.hidden, cfg.kv, cfg.ffn
    qkv_rows = cfg.groups * (cfg.heads // cfg.groups + 2) * kv
    fc1_rows = 2 * f if cfg.swiglu else f
    out = []
    if cfg.family == "mcore":
        p = f"decoder.layers.{i}."
        out.append((p + "self_attention.core_attention._extra_state", "extra", None))
        out.append((p + "self_attention.linear_proj.weight", "row", (h, cfg.heads * kv)))
        if cfg.bias:
            out.append((p + "self_attention.linear_proj.bias", "rep", (h,)))
        out.append((p + "self_attention.linear_proj._extra_state", "extra", None))
        out.append((p + "self_attention.linear_qkv.layer_norm_weight", "rep", (h,)))
        if cfg.norm == "LayerNorm":
            out.append((p + "self_attention.linear_qkv.layer_norm_bias", "rep", (h,)))
        out.append((p + "self_attention.linear_qkv.weight", "qkv", (qkv_rows, h)))
        if cfg.bias:
            out.append((p + "self_attention.linear_qkv.bias", "qkv", (qkv_rows,)))
        out.append((p + "self_attention.linear_qkv._extra_state", "extra", None))
        if cfg.qk_norm:
            out.append((p + "self_attention.q_layernorm.weight", "rep", (kv,)))
            out.append((p + "self_attention.k_layernorm.weight", "rep", (kv,)))
        out.append((p + "mlp.linear_fc1.layer_norm_weight", "rep", (h,)))
        if cfg.norm == "LayerNorm":
            out.append((p + "mlp.linear_fc1.layer_norm_bias", "rep", (h,)))
        out.append((p + "mlp.linear_fc1.weight", "fc1", (fc1_rows, h)))
        if cfg.bias:
            out.append((p + "mlp.linear_fc1.bias", "fc1", (fc1_rows,)))
        out.append((p + "mlp.linear_fc1._extra_state", "extra", None))
        out.append((p + "mlp.linear_fc2.weight", "row", (h, f)))
        if cfg.bias:
            out.append((p + "mlp.linear_fc2.bias", "rep", (h,)))
        out.append((p + "mlp.linear_fc2._extra_state", "extra", None))
        return out
    p = f"language_model.encoder.layers.{i}."
    norm_bias = cfg.norm == "LayerNorm"
    out.append((p + "input_norm.weight", "rep", (h,)))
    if norm_bias:
        out.append((p + "input_norm.bias", "rep", (h,)))
    out.append((p + "self_attention.query_key_value.weight", "qkv", (qkv_rows, h)))
    if cfg.bias:
        out.append((p + "self_attention.query_key_value.bias", "qkv", (qkv_rows,)))
    out.append((p + "self_attention.dense.weight", "row", (h, cfg.heads * kv)))
    if cfg.bias:
        out.append((p + "self_attention.dense.bias", "rep", (h,)))
    out.append((p + "post_attention_norm.weight", "rep", (h,)))
    if norm_bias:
        out.append((p + "post_attention_norm.bias", "rep", (h,)))
    out.append((p + "mlp.dense_h_to_4h.weight", "fc1", (fc1_rows, h)))
    if cfg.bias:
        out.append((p + "mlp.dense_h_to_4h.bias", "fc1", (fc1_rows,)))
    out.append((p + "mlp.dense_4h_to_h.weight", "row", (h, f)))
    if cfg.bias:
        out.append((p + "mlp.dense_4h_to_h.bias", "rep", (h,)))
    return out


def names(cfg):
    """The global (TP=1) model's entries in order, split as (first-stage entries, per-layer
    entries, last-stage entries)."""
    h = cfg.hidden
    if cfg.family == "mcore":
        first = [("embedding.word_embeddings.weight", "vocab", (cfg.vocab, h))]
        if cfg.position == "learned_absolute":
            first.append(("embedding.position_embeddings.weight", "rep", (64, h)))
        last = [("decoder.final_layernorm.weight", "rep", (h,))]
        if cfg.norm == "LayerNorm":
            last.append(("decoder.final_layernorm.bias", "rep", (h,)))
        if not cfg.tied:
            last.append(("output_layer.weight", "vocab", (cfg.vocab, h)))
    else:
        first = [("language_model.embedding.word_embeddings.weight", "vocab", (cfg.vocab, h))]
        if cfg.position == "learned_absolute":
            first.append(("language_model.embedding.position_embeddings.weight", "rep", (64, h)))
        last = [("language_model.encoder.final_norm.weight", "rep", (h,))]
        if cfg.norm == "LayerNorm":
            last.append(("language_model.encoder.final_norm.bias", "rep", (h,)))
        if not cfg.tied:
            last.append(("language_model.output_layer.weight", "vocab", (cfg.vocab, h)))
    return first, [layer_entries(cfg, i) for i in range(cfg.layers)], last


def no_decay(name, shape):
    """get_standard_config_overrides: biases and 1-D parameters take wd_mult 0."""
    return name.endswith(".bias") or len(shape) == 1


class Truth:
    """The TP=1 model after STEPS AdamW steps: fp32 main parameters and their moments, at
    the real vocabulary size."""

    def __init__(self, cfg, seed):
        self.cfg = cfg
        g = torch.Generator().manual_seed(seed)
        first, layers, last = names(cfg)
        self.order = [e for e in first + sum(layers, []) + last if e[1] != "extra"]
        self.main = OrderedDict()
        for name, kind, shape in self.order:
            t = torch.randn(shape, generator=g) * 0.5
            if kind == "rep" and len(shape) == 1 and "norm" in name and "bias" not in name:
                t = 1 + t * 0.1
            self.main[name] = torch.nn.Parameter(t)
        decay = [p for (n, _, s), p in zip(self.order, self.main.values()) if not no_decay(n, s)]
        nodecay = [p for (n, _, s), p in zip(self.order, self.main.values()) if no_decay(n, s)]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
        for _ in range(STEPS):
            for p in self.main.values():
                p.grad = torch.randn(p.shape, generator=g)
            opt.step()
        self.opt = opt
        self.state = {n: opt.state[p] for n, p in self.main.items()}
        self.groups = [[n for n, _, s in self.order if not no_decay(n, s)], [n for n, _, s in self.order if no_decay(n, s)]]
        # Megatron's param_groups as DistributedOptimizer.state_dict saves them: the inner
        # optimizer's groups (built by _get_param_groups, Adam's options filled in), params
        # removed, step added.
        megatron = [{"wd_mult": 1.0, "lr_mult": 1.0, "is_expert_parallel": False, "default_config": True,
                     "is_decoupled_lr": False, "max_lr": 3e-4, "min_lr": 3e-5},
                    {"wd_mult": 0.0, "lr_mult": 1.0, "is_expert_parallel": False, "default_config": True,
                     "is_decoupled_lr": False, "max_lr": 3e-4, "min_lr": 3e-5}]
        self.megatron = megatron
        shards = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
        inner = torch.optim.AdamW([dict(m, params=[s]) for m, s in zip(megatron, shards)], lr=3e-4,
                                  betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
        self.param_groups = inner.state_dict()["param_groups"]
        for pg, wd in zip(self.param_groups, (0.1, 0.0)):
            del pg["params"]
            pg["weight_decay"] = wd
            pg["step"] = STEPS

    def global_value(self, name, key):
        return self.main[name].detach() if key == "param" else self.state[name][key]


def full(truth, name, kind, key, padded, g):
    """The tensor the whole (TP=1-sized) layer holds for one layout: vocab tables padded to
    the layout's padded vocabulary with rows of their own."""
    t = truth.global_value(name, key)
    if kind == "vocab" and padded > t.shape[0]:
        pad = torch.randn((padded - t.shape[0],) + tuple(t.shape[1:]), generator=g)
        if key == "exp_avg_sq":
            pad = pad.abs()
        t = torch.cat([t, pad])
    return t


def split(cfg, kind, t, tp, r):
    """Tensor-parallel rank r's part of the whole tensor t, as Megatron's layers hold it."""
    if kind in ("rep",) or tp == 1:
        return t.clone()
    if kind in ("vocab", "qkv"):
        return t.chunk(tp, dim=0)[r].clone()
    if kind == "row":
        return t.chunk(tp, dim=1)[r].clone()
    if kind == "fc1":
        if cfg.swiglu:
            gate, up = t.chunk(2, dim=0)
            return torch.cat([gate.chunk(tp, dim=0)[r], up.chunk(tp, dim=0)[r]]).clone()
        return t.chunk(tp, dim=0)[r].clone()
    raise ValueError(kind)


def local_name(cfg, name, offset):
    """The name a stage gives a global entry: its layer numbered from the stage's first."""
    marker = "decoder.layers." if cfg.family == "mcore" else "language_model.encoder.layers."
    if not name.startswith(marker):
        return name
    i, rest = name[len(marker):].split(".", 1)
    return f"{marker}{int(i) - offset}.{rest}"


def head_name(cfg):
    return "output_layer.weight" if cfg.family == "mcore" else "word_embeddings_for_head.weight"


def embedding_name(cfg):
    return "embedding.word_embeddings.weight" if cfg.family == "mcore" else "language_model.embedding.word_embeddings.weight"


def stage_entries(cfg, pp, p):
    """Stage p's global entries in its registration order, and its layer offset."""
    first, layers, last = names(cfg)
    per = cfg.layers // pp
    out = list(first) if p == 0 else []
    for i in range(p * per, (p + 1) * per):
        out += layers[i]
    if p == pp - 1:
        out += last
        if cfg.tied and pp > 1:
            out.append((head_name(cfg), "head", (cfg.vocab, cfg.hidden)))
    return out, p * per


def nest_legacy(sd):
    """megatron.legacy GPTModel.state_dict_for_save_checkpoint: language_model → embedding
    (word_embeddings, position_embeddings), encoder (flat keys), output_layer; and
    word_embeddings_for_head beside it."""
    out = OrderedDict()
    for k, v in sd.items():
        if k.startswith("word_embeddings_for_head."):
            out.setdefault("word_embeddings_for_head", OrderedDict())[k.split(".", 1)[1]] = v
            continue
        lm = out.setdefault("language_model", OrderedDict())
        rest = k[len("language_model."):]
        if rest.startswith("embedding."):
            _, sub, param = rest.split(".")
            lm.setdefault("embedding", OrderedDict()).setdefault(sub, OrderedDict())[param] = v
        elif rest.startswith("encoder."):
            lm.setdefault("encoder", OrderedDict())[rest[len("encoder."):]] = v
        else:
            lm.setdefault("output_layer", OrderedDict())[rest.split(".", 1)[1]] = v
    return out


def pad_to(x, d):
    return int(math.ceil(x / d) * d)


def param_layout(params, bucket_size, dp, align=64):
    """DistributedOptimizer._compute_per_buffer_param_layout: params [(name, numel,
    shared_embedding)] in model order → {name: (start, end, bucket)}, the buckets' (start,
    end) and unpadded sizes. align is the parameter start alignment: 64 since Megatron-LM of
    July 2024 (pad_param_start), 1 before (ParamAndGradBuffer of April 2024, which padded
    bucket ends to a multiple of DP only)."""
    index, buckets, unpadded = {}, [], []
    param_start = bucket_start = 0
    bucket_params, bucket_id = 0, 0
    param_end = 0

    def finalize(param_end, bucket_start, bucket_id):
        unpadded.append(param_end - bucket_start)
        end = pad_to(param_end, math.lcm(dp, 128) if align > 1 else dp)
        buckets.append((bucket_start, end))
        return end, bucket_id + 1

    for name, numel, shared in reversed(params):
        param_start = pad_to(param_start, align)
        if shared and bucket_params > 0:
            bucket_start, bucket_id = finalize(param_start, bucket_start, bucket_id)
            bucket_params = 0
            param_start = bucket_start
        param_end = param_start + numel
        index[name] = (param_start, param_end, bucket_id)
        bucket_params += 1
        if (bucket_size is not None and param_end - bucket_start >= bucket_size) or shared:
            bucket_start, bucket_id = finalize(param_end, bucket_start, bucket_id)
            bucket_params = 0
            param_start = bucket_start
        else:
            param_start = param_end
    if bucket_params > 0:
        finalize(param_end, bucket_start, bucket_id)
    return index, buckets, unpadded


def coalesced(params, bucket_size, dp, align=64):
    """Where get_parameter_state_dp_zero's saved buffer holds each parameter (its buckets
    back to back, each without its end padding), and the buffer's size."""
    index, buckets, unpadded = param_layout(params, bucket_size, dp, align)
    offsets = [sum(unpadded[:b]) for b in range(len(buckets))]
    starts = [index[name][0] - buckets[index[name][2]][0] + offsets[index[name][2]] for name, _, _ in params]
    return starts, sum(unpadded)


def distrib_optim(params, tensors, bucket_size, grad_dtype):
    """get_parameter_state_dp_zero for one buffer: each bucket's DP shards gathered and
    concatenated, cut to its unpadded size, the buckets back to back."""
    index, buckets, unpadded = param_layout(params, bucket_size, DP)
    world = {}
    for key in ("param", "exp_avg", "exp_avg_sq"):
        buf = torch.zeros(buckets[-1][1])
        for name, (start, end, _) in index.items():
            buf[start:end] = tensors[name][key].reshape(-1)
        parts = []
        for (start, end), n in zip(buckets, unpadded):
            shards = list(buf[start:end].chunk(DP))  # each DP rank's contiguous shard
            parts.append(torch.cat(shards)[:n])
        world[key] = torch.cat(parts)
    world["numel_unpadded"] = sum(unpadded)
    return {"buckets_coalesced": True, 0: {(torch.bfloat16, grad_dtype): world}}


def float16_optimizer(truth, params, tensors):
    """Float16OptimizerWithFloat16Params.state_dict() (megatron/core/optimizer/optimizer.py),
    the optimizer without --use-distributed-optimizer: the torch AdamW state over the rank's
    fp32 main copies, its param groups as _get_param_groups builds them (each group's
    parameters in model order, ids numbering them group after group), and the main copies
    per group as fp32_from_fp16_params."""
    groups = [[], []]
    for local, _, _ in params:
        groups[1 if no_decay(local, tensors[local]["param"].shape) else 0].append(local)
    main = {n: torch.nn.Parameter(tensors[n]["param"].clone()) for n in tensors}
    opt = torch.optim.AdamW([dict(m, params=[main[n] for n in g]) for m, g in zip(truth.megatron, groups)],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    for n, p in main.items():
        opt.state[p] = {"step": torch.tensor(float(STEPS)), "exp_avg": tensors[n]["exp_avg"].clone(),
                        "exp_avg_sq": tensors[n]["exp_avg_sq"].clone()}
    sd = opt.state_dict()
    for pg, wd in zip(sd["param_groups"], (0.1, 0.0)):
        pg["weight_decay"] = wd  # as the scheduler sets it from wd_mult
    return {"optimizer": sd, "fp32_from_fp16_params": [[main[n].detach() for n in g] for g in groups]}


def args(cfg, tp, pp, rank, vocab_size=None, **override):
    a = argparse.Namespace(
        num_layers=cfg.layers, hidden_size=cfg.hidden, ffn_hidden_size=cfg.ffn, num_attention_heads=cfg.heads,
        kv_channels=cfg.kv, group_query_attention=cfg.groups != cfg.heads, num_query_groups=cfg.groups,
        max_position_embeddings=64, position_embedding_type=cfg.position, normalization=cfg.norm, swiglu=cfg.swiglu,
        add_bias_linear=cfg.bias, add_qkv_bias=cfg.bias, qk_layernorm=cfg.qk_norm,
        untie_embeddings_and_output_weights=not cfg.tied, vocab_size=cfg.vocab if vocab_size is None else vocab_size,
        make_vocab_size_divisible_by=cfg.divisible, padded_vocab_size=cfg.padded(tp),
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=None,
        context_parallel_size=1, expert_model_parallel_size=1, num_experts=None, world_size=tp * pp * DP,
        data_parallel_size=DP, rank=rank, local_rank=rank % 8, params_dtype=torch.bfloat16, bf16=True, fp16=False,
        use_distributed_optimizer=True, overlap_grad_reduce=cfg.bucket is not None, ddp_bucket_size=cfg.bucket,
        ddp_num_buckets=None, accumulate_allreduce_grads_in_fp32=cfg.family == "mcore", ckpt_format="torch",
        use_legacy_models=cfg.family == "legacy", transformer_impl="transformer_engine" if cfg.family == "mcore" else "local",
        optimizer="adam", lr=3e-4, min_lr=3e-5, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95, seed=1234,
        tokenizer_type="HuggingFaceTokenizer", iteration=STEPS, consumed_train_samples=STEPS * 16, no_save_optim=None,
        no_save_rng=None)
    for k, v in override.items():
        setattr(a, k, v)
    return a


def rng_state(seed, tp_rank):
    """get_rng_state (data_parallel_random_init off): one entry; the tensor-parallel
    tracker seeded per TP rank as model_parallel_cuda_manual_seed seeds it."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    cpu = torch.get_rng_state()
    tracker = torch.Generator().manual_seed(seed + 2718 + tp_rank).get_state()
    return [{"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(), "torch_rng_state": cpu,
             "cuda_rng_state": cpu.clone(), "rng_tracker_states": {"model-parallel-rng": tracker}}]


def scheduler():
    return {"max_lr": 3e-4, "lr_warmup_steps": 1, "num_steps": STEPS, "lr_decay_style": "cosine",
            "lr_decay_steps": 1000, "min_lr": 3e-5, "start_wd": 0.1, "end_wd": 0.1, "wd_incr_style": "constant"}


def save(root, cfg, truth, tp, pp, seed=5, tamper=None, distributed=True, **arg_override):
    """Megatron's save_checkpoint at iteration STEPS for a TP × PP run of cfg's model, each
    (TP, PP) rank written by its DP rank 0, with the distributed optimizer (distrib_optim.pt)
    or without (the optimizer state in model_optim_rng.pt). tamper(rank_name, state) may alter
    a rank's state before it is saved (hostile fixtures)."""
    if not distributed:
        arg_override["use_distributed_optimizer"] = False
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(STEPS))
    g = torch.Generator().manual_seed(seed)
    padded = cfg.padded(tp)
    whole = {}
    for name, kind, _ in truth.order:
        whole[name] = {k: full(truth, name, kind, k, padded, g) for k in ("param", "exp_avg", "exp_avg_sq")}
    grad_dtype = torch.float32 if cfg.family == "mcore" else torch.bfloat16
    for p in range(pp):
        entries, offset = stage_entries(cfg, pp, p)
        bucket = cfg.bucket if p == 0 else None  # resolve_ddp_bucket_size / per_chunk_bucket_sizes
        for r in range(tp):
            rank_name = f"mp_rank_{r:02d}" if pp == 1 else f"mp_rank_{r:02d}_{p:03d}"
            sd = OrderedDict()
            params, tensors = [], {}
            for name, kind, _ in entries:
                local = local_name(cfg, name, offset)
                if kind == "extra":
                    sd[local] = io.BytesIO()  # Transformer Engine without FP8: nothing to keep
                    continue
                src, how = (embedding_name(cfg), "vocab") if kind == "head" else (name, kind)
                parts = {k: split(cfg, how, whole[src][k], tp, r) for k in whole[src]}
                sd[local] = parts["param"].to(torch.bfloat16)
                shared = cfg.tied and pp > 1 and (kind == "head" or name == embedding_name(cfg))
                params.append((local, parts["param"].numel(), shared))
                tensors[local] = parts
            model = nest_legacy(sd) if cfg.family == "legacy" else sd
            rank = p * tp * DP + r  # Megatron's default order: tp-dp-pp
            state = OrderedDict()
            state["args"] = args(cfg, tp, pp, rank, **arg_override)
            state["checkpoint_version"] = 3.0
            state["iteration"] = STEPS
            state["model"] = model
            if distributed:
                state["optimizer"] = {"optimizer": {"param_groups": [dict(pg) for pg in truth.param_groups]}}
            else:
                state["optimizer"] = float16_optimizer(truth, params, tensors)
            state["opt_param_scheduler"] = scheduler()
            state["rng_state"] = rng_state(1234 + p * 100, r)
            state["num_floating_point_operations_so_far"] = 123456789
            if tamper:
                tamper(rank_name, state)
            d = os.path.join(root, f"iter_{STEPS:07d}", rank_name)
            os.makedirs(d)
            torch.save(state, os.path.join(d, "model_optim_rng.pt"))
            if distributed:
                torch.save(distrib_optim(params, tensors, bucket, grad_dtype), os.path.join(d, "distrib_optim.pt"))


def expected(cfg, truth):
    """What the saves merge to: the TP=1 model at the real vocabulary size (bf16 weights as
    Megatron keeps them), and the optimizer state by parameter name as
    torch.distributed.checkpoint's get_optimizer_state_dict gives it (the fp32 main parameter
    as fp32_param, Megatron's name for it)."""
    model = OrderedDict((n, p.detach().to(torch.bfloat16)) for n, p in truth.main.items())
    state = OrderedDict()
    for n in truth.main:
        st = truth.state[n]
        state[n] = OrderedDict([("step", st["step"]), ("fp32_param", truth.main[n].detach()),
                                ("exp_avg", st["exp_avg"]), ("exp_avg_sq", st["exp_avg_sq"])])
    return {"model": model, "optimizer": {"state": state}}
