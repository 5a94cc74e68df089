"""Shared by gen.py (writes the fixtures) and resume.py (resumes converted ones).

Both sides must build the same models, parameter groups, optimizers, schedulers and
batches, and run the same training step, so that "3 steps, save, convert, load, 3 more
steps" can be compared bit for bit with an uninterrupted 6-step run.
"""

import contextlib
import os
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

HERE = os.path.relpath(os.path.dirname(os.path.abspath(__file__)))
STEPS = 3  # steps before the checkpoint; the reference run does 2 * STEPS


# --------------------------------------------------------------------------------------
# models


def llama():
    """A tiny transformers Llama with tied embeddings and attention dropout (so the
    resumed run depends on the restored CPU RNG state)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                      tie_word_embeddings=True, attention_dropout=0.1)
    cfg._attn_implementation = "eager"
    return LlamaForCausalLM(cfg)


class MLP(nn.Module):
    """Linear, BatchNorm (buffers), dropout, Linear."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.2)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.bn(self.fc1(x)))))


def decay_groups(model, weight_decay):
    """The usual two groups: matrices decay, vectors (norms, biases) do not. Each group
    lists its parameters in model order, as the list-comprehension idiom does."""
    named = list(model.named_parameters())
    return [{"params": [p for _, p in named if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0}]


# --------------------------------------------------------------------------------------
# the three training setups: model, optimizer, scheduler, scaler, batches, loss


class Setup:
    """kind is llama, mlp or dcp; dtype casts the model before the optimizer is built;
    wrap (e.g. FSDP2's fully_shard) is applied to the model before that too."""

    def __init__(self, kind, dtype=None, wrap=None):
        self.kind = kind
        if kind == "llama":
            self.model = llama()
        else:
            self.model = MLP()
        if dtype is not None:
            self.model.to(dtype)
        if wrap is not None:
            wrap(self.model)
        if kind == "llama":
            from transformers import get_cosine_schedule_with_warmup

            self.opt = torch.optim.AdamW(decay_groups(self.model, 0.1), lr=3e-3, foreach=False)
            self.sched = get_cosine_schedule_with_warmup(self.opt, num_warmup_steps=2, num_training_steps=10)
            self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
        elif kind == "mlp":
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                                       weight_decay=1e-4, foreach=False)
            self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.5)
            self.scaler = torch.amp.GradScaler("cpu", enabled=False)
        elif kind == "dcp":
            self.opt = torch.optim.AdamW(decay_groups(self.model, 0.01), lr=1e-2, foreach=False)
            self.sched = torch.optim.lr_scheduler.MultiStepLR(self.opt, milestones=[2, 4, 4], gamma=0.5)
            self.scaler = torch.amp.GradScaler("cpu", enabled=False)
        else:
            raise ValueError(kind)

    def batch(self, i):
        g = torch.Generator().manual_seed(1000 + i)
        if self.kind == "llama":
            ids = torch.randint(0, 64, (2, 12), generator=g)
            return ids, ids
        return torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)

    def loss(self, i):
        x, y = self.batch(i)
        if self.kind == "llama":
            return self.model(input_ids=x, labels=y).loss
        out = self.model(x.to(next(self.model.parameters()).dtype))
        return ((out.float() - y) ** 2).mean()

    def train_step(self, i):
        self.model.train()
        self.opt.zero_grad()
        loss = self.loss(i)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        self.sched.step()
        return loss.item()

    def params(self):
        """The parameters as plain tensors (FSDP2's DTensors gathered)."""
        full = {n: p.full_tensor() if hasattr(p, "full_tensor") else p for n, p in self.model.named_parameters()}
        return {n: p.detach().clone() for n, p in full.items()}


# --------------------------------------------------------------------------------------
# location tags (copied from testdata/torch/gen.py, which documents the hook)


@contextlib.contextmanager
def tag_storages_as(tag, keep_cpu=()):
    """Make torch.save tag CPU storages with `tag` (e.g. "cuda:0"), except the storages of
    the tensors in keep_cpu, which keep "cpu" (as optimizer steps and RNG states do on a
    real CUDA run)."""
    keep = {t.untyped_storage().data_ptr() for t in keep_cpu}

    def tagger(storage):
        if storage.device.type == "cpu" and storage.data_ptr() not in keep:
            return tag
        return None

    def deserializer(storage, location):
        return None

    elem = (0, tagger, deserializer)
    torch.serialization.register_package(*elem)
    try:
        yield
    finally:
        torch.serialization._package_registry.remove(elem)


# --------------------------------------------------------------------------------------
# every optimizer kind, for optimizers.pt


def optimizers():
    """name -> function building that optimizer for an MLP."""
    from transformers.optimization import Adafactor

    def groups(m):
        return [{"params": [m.fc1.weight, m.fc2.weight]},
                {"params": [m.fc1.bias, m.bn.weight, m.bn.bias, m.fc2.bias], "lr": 1e-3}]

    return {
        "sgd": lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
        "sgd_plain": lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
        "adam_amsgrad": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, amsgrad=True),
        "adamw_groups": lambda m: torch.optim.AdamW(groups(m), lr=1e-2),
        "adagrad": lambda m: torch.optim.Adagrad(m.parameters(), lr=1e-2),
        "rmsprop": lambda m: torch.optim.RMSprop(m.parameters(), lr=1e-2, momentum=0.9, centered=True),
        "adafactor_hf": lambda m: Adafactor(m.parameters(), lr=None, relative_step=True, warmup_init=True,
                                            beta1=0.9),
        "adafactor_torch": lambda m: torch.optim.Adafactor(m.parameters(), lr=1e-2),
        "nadam": lambda m: torch.optim.NAdam(m.parameters(), lr=1e-2),
        "rprop": lambda m: torch.optim.Rprop(groups(m), lr=1e-2),
        "asgd": lambda m: torch.optim.ASGD(m.parameters(), lr=1e-2),
        "adadelta": lambda m: torch.optim.Adadelta(m.parameters()),
        "adamax": lambda m: torch.optim.Adamax(m.parameters()),
    }


def mlp_step(model, opt, i):
    """One optimizer step of an MLP on batch i (eval mode: no dropout, BatchNorm frozen)."""
    g = torch.Generator().manual_seed(i)
    x, y = torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)
    model.eval()
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
