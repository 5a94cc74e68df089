"""A byte-faithful replica of torchtitan's checkpoint save and load path (v0.2.2).

torchtitan is not packaged in Debian, so the oracle cannot import it. What it writes is
rebuilt here from its source, class by class, so that the DCP folders these tests read are
the ones torchtitan's CheckpointManager writes:

  * torchtitan/models/llama3/model/model.py — the llama3 Transformer: tok_embeddings,
    layers (a ModuleDict keyed "0", "1", …) of TransformerBlock (attention.wq/wk/wv/wo,
    feed_forward.w1/w2/w3, attention_norm, ffn_norm: nn.RMSNorm), norm, output; freqs_cis
    a non-persistent buffer (not in the state dict);
  * components/checkpoint.py ModelWrapper — get_model_state_dict of every model part,
    merged;
  * components/optimizer.py OptimizersContainer — one optimizer per model part over
    [p for p in model.parameters() if p.requires_grad]; state_dict() is
    get_optimizer_state_dict(model, optimizer, StateDictOptions(
    flatten_optimizer_state_dict=True)) merged over the parts ("state.FQN.KEY",
    "param_groups.FQN.KEY"); build_optimizers' AdamW kwargs (lr, betas, eps,
    weight_decay, fused, foreach);
  * components/lr_scheduler.py LRSchedulersContainer — LambdaLR over
    functools.partial(linear_warmup_stable_decay, …) per optimizer; state_dict() is the
    first scheduler's;
  * components/dataloader.py ParallelAwareDataloader.state_dict — {"dp_rank_R":
    pickle.dumps(<the StatefulDataLoader's state>), "world_size": dp_world_size} (the
    StatefulDataLoader of torchdata, not packaged either, is stood in for by a dict of the
    same keys: its bytes are opaque to everything but that class);
  * train.py Trainer.state_dict — {"step": int, "ntokens_seen": int};
  * CheckpointManager.save → _flattened_model_states_sd — the states dict
    {"train_state", "model", "optimizer", "dataloader", "lr_scheduler"} with "model"
    replaced by the model state dict's entries at the top level, then dcp.save(states,
    checkpoint_id=".../step-N").

Loading is CheckpointManager.load's: the same flattened dict of Stateful objects (minus
exclude_from_loading), dcp.load, which calls each Stateful's load_state_dict.
"""

import functools
import math
import pickle

import torch
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

MODEL, OPTIMIZER, LR_SCHEDULER, DATALOADER, TRAIN_STATE = "model", "optimizer", "lr_scheduler", "dataloader", "train_state"


class Args:
    """TransformerModelArgs, small: vocabulary and FFN widths no 4-way mesh divides."""

    dim = 16
    n_layers = 2
    n_heads = 4
    n_kv_heads = 2
    vocab_size = 61
    multiple_of = 4
    ffn_dim_multiplier = None
    norm_eps = 1e-5
    rope_theta = 10000.0
    max_seq_len = 16


def precompute_freqs_cis(dim, end, theta):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = freqs_cis[: xq.shape[1]].view(1, xq.shape[1], 1, xq_.shape[-1])
    return torch.view_as_real(xq_ * fc).flatten(3).type_as(xq), torch.view_as_real(xk_ * fc).flatten(3).type_as(xk)


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.n_heads, self.n_kv_heads = a.n_heads, a.n_kv_heads
        self.head_dim = a.dim // a.n_heads
        self.wq = nn.Linear(a.dim, a.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(a.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(a.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(a.n_heads * self.head_dim, a.dim, bias=False)

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bs, seqlen, -1, self.head_dim)
        xk = xk.view(bs, seqlen, -1, self.head_dim)
        xv = xv.view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2),
                                             is_causal=True, enable_gqa=True)
        return self.wo(out.transpose(1, 2).contiguous().view(bs, seqlen, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, multiple_of, ffn_dim_multiplier):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        if ffn_dim_multiplier is not None:
            hidden_dim = int(ffn_dim_multiplier * hidden_dim)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id, a):
        super().__init__()
        self.attention = Attention(a)
        self.feed_forward = FeedForward(a.dim, 4 * a.dim, a.multiple_of, a.ffn_dim_multiplier)
        self.attention_norm = nn.RMSNorm(a.dim, eps=a.norm_eps)
        self.ffn_norm = nn.RMSNorm(a.dim, eps=a.norm_eps)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tok_embeddings = nn.Embedding(a.vocab_size, a.dim)
        self.register_buffer("freqs_cis", precompute_freqs_cis(a.dim // a.n_heads, a.max_seq_len, a.rope_theta), persistent=False)
        self.layers = nn.ModuleDict()
        for i in range(a.n_layers):
            self.layers[str(i)] = TransformerBlock(i, a)
        self.norm = nn.RMSNorm(a.dim, eps=a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab_size, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        return self.output(self.norm(h))


class ModelWrapper(Stateful):
    def __init__(self, model):
        self.model = [model] if isinstance(model, nn.Module) else model
        self.cache_state_dict = self._get_state_dict()

    def _get_state_dict(self):
        return {k: v for sd in map(get_model_state_dict, self.model) for k, v in sd.items()}

    def state_dict(self):
        return self.cache_state_dict

    def load_state_dict(self, state_dict):
        func = functools.partial(set_model_state_dict, model_state_dict=state_dict, options=StateDictOptions(strict=False))
        list(map(func, self.model))
        self.cache_state_dict = self._get_state_dict()


class OptimizersContainer(torch.optim.Optimizer, Stateful):
    """flatten=False stands for a user of torch's nested FQN form (get_optimizer_state_dict
    without flatten_optimizer_state_dict) with the same layout; torchtitan flattens."""

    def __init__(self, model_parts, optimizer_cls, optimizer_kwargs, flatten=True):
        self.flatten = flatten
        all_params = []
        self.optimizers = []
        self.model_parts = model_parts
        for model in self.model_parts:
            params = [p for p in model.parameters() if p.requires_grad]
            self.optimizers.append(optimizer_cls(params, **optimizer_kwargs))
            all_params.extend(params)
        torch.optim.Optimizer.__init__(self, all_params, optimizer_kwargs)

    def __iter__(self):
        return iter(self.optimizers)

    def step(self, *args, **kwargs):
        for o in self.optimizers:
            o.step(*args, **kwargs)

    def zero_grad(self, *args, **kwargs):
        for o in self.optimizers:
            o.zero_grad(*args, **kwargs)

    def state_dict(self):
        func = functools.partial(get_optimizer_state_dict, options=StateDictOptions(flatten_optimizer_state_dict=self.flatten))
        return {k: v for sd in map(func, self.model_parts, self.optimizers) for k, v in sd.items()}

    def load_state_dict(self, state_dict):
        func = functools.partial(set_optimizer_state_dict, optim_state_dict=state_dict,
                                 options=StateDictOptions(flatten_optimizer_state_dict=self.flatten))
        list(map(func, self.model_parts, self.optimizers))


def build_optimizers(model_parts, lr=8e-4, flatten=True):
    """build_optimizers: AdamW, implementation "foreach" (torchtitan's default)."""
    kwargs = {"lr": lr, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "fused": False, "foreach": True}
    return OptimizersContainer(model_parts, torch.optim.AdamW, kwargs, flatten)


def linear_warmup_stable_decay(current_step, warmup_steps, stable_steps, decay_steps, lr_decay_type, min_lr_factor):
    warmup_stable_steps = warmup_steps + stable_steps
    if current_step < warmup_steps:
        current_step += 1
        return float(current_step / warmup_steps)
    if current_step < warmup_stable_steps:
        return 1.0
    current_step += 1
    progress = float(current_step - warmup_stable_steps) / decay_steps
    if lr_decay_type == "linear":
        adj = 1 - progress
    elif lr_decay_type == "sqrt":
        adj = 1 - math.sqrt(progress)
    else:
        adj = 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr_factor + (1 - min_lr_factor) * adj


class LRSchedulersContainer(Stateful):
    def __init__(self, optimizers, lr_lambda):
        self.schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lr_lambda) for o in optimizers]

    def step(self):
        for s in self.schedulers:
            s.step()

    def state_dict(self):
        return self.schedulers[0].state_dict()

    def load_state_dict(self, state_dict):
        import copy

        for s in self.schedulers:
            s.load_state_dict(copy.deepcopy(state_dict))


def build_lr_schedulers(optimizers, training_steps=10, warmup_steps=2):
    decay_steps = training_steps - warmup_steps
    fn = functools.partial(linear_warmup_stable_decay, warmup_steps=warmup_steps, stable_steps=0,
                           decay_steps=decay_steps, lr_decay_type="linear", min_lr_factor=0.0)
    return LRSchedulersContainer(optimizers, fn)


class ParallelAwareDataloader(Stateful):
    """The state of torchtitan's dataloader; the batches come from batch() below."""

    def __init__(self, dp_rank, dp_world_size):
        self.dp_rank, self.dp_world_size = dp_rank, dp_world_size
        self._rank_id = "dp_rank_%d" % dp_rank
        self.yielded = 0

    def _inner_state(self):
        # StatefulDataLoader.state_dict()'s keys, num_workers=0
        return {"_index_sampler_state": None, "_sampler_iter_state": None, "_sampler_iter_yielded": self.yielded,
                "_num_yielded": self.yielded, "_IterableDataset_len_called": None, "_shared_seed": None,
                "fetcher_state": {"dataset_iter_state": None, "fetcher_ended": False},
                "dataset_state": {"sample_idx": self.yielded * 2, "token_buffer": []}, "_iterator_finished": False}

    def state_dict(self):
        return {self._rank_id: pickle.dumps(self._inner_state()), "world_size": self.dp_world_size}

    def load_state_dict(self, state_dict):
        if not state_dict:
            return
        if self._rank_id not in state_dict:
            return
        assert self.dp_world_size == state_dict["world_size"], "dp_degree is inconsistent before and after checkpoint"
        self.yielded = pickle.loads(state_dict[self._rank_id])["_num_yielded"]


class TrainState(Stateful):
    """Trainer.state_dict / load_state_dict."""

    def __init__(self):
        self.step, self.ntokens_seen = 0, 0

    def state_dict(self):
        return {"step": self.step, "ntokens_seen": self.ntokens_seen}

    def load_state_dict(self, state_dict):
        self.step = state_dict["step"]
        self.ntokens_seen = state_dict["ntokens_seen"]


def states(trainer, model_parts, optimizers, dataloader, lr_schedulers):
    """CheckpointManager.states: {"train_state": trainer} updated with the four others."""
    s = {TRAIN_STATE: trainer}
    s.update({MODEL: ModelWrapper(model_parts), OPTIMIZER: optimizers, DATALOADER: dataloader, LR_SCHEDULER: lr_schedulers})
    return s


def flattened(st):
    """CheckpointManager._flattened_model_states_sd."""
    sd = {k: v for k, v in st.items() if k != MODEL}
    if MODEL in st:
        sd.update(st[MODEL].state_dict())
    return sd


def save(st, checkpoint_id):
    """CheckpointManager.save (synchronous, not the last step): dcp.save of the flattened states."""
    with torch.no_grad():
        dcp.save(flattened(st), checkpoint_id=checkpoint_id)


def load(st, checkpoint_id, exclude=()):
    """CheckpointManager.load: the states minus exclude_from_loading, flattened, dcp.load."""
    to_load = {k: v for k, v in st.items() if k not in exclude}
    dcp.load(flattened(to_load), checkpoint_id=checkpoint_id)


def batch(step, rows, seqlen=8, vocab=Args.vocab_size):
    """The global batch of a step: rows sequences of tokens, and their labels."""
    g = torch.Generator().manual_seed(1000 + step)
    t = torch.randint(0, vocab, (rows, seqlen + 1), generator=g)
    return t[:, :-1], t[:, 1:]


def train_step(model, optimizers, lr_schedulers, inputs, labels):
    """Trainer.train_step without gradient clipping: cross entropy over the local batch."""
    optimizers.zero_grad()
    pred = model(inputs)
    loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
    loss.backward()
    optimizers.step()
    lr_schedulers.step()
    return loss.detach()
