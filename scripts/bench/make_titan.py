"""Writes a 2 GiB TorchTitan checkpoint and the plain state dict of the same weights.

    python3 make_titan.py OUT_DIR

OUT_DIR/step-1: what torchtitan's CheckpointManager saves (testdata/titan/titan.py, its
save path replicated) for a llama3 of dim 1024, 14 layers, 16 heads (4 key-value heads),
vocabulary 10000: 178 M float32 parameters, each with AdamW's exp_avg and exp_avg_sq after
one step on seeded random gradients — 2.0 GiB of tensors — with its lr_scheduler, dataloader
and train_state. OUT_DIR/model: dcp.save of the same model's state dict alone (torchtitan's
model-only save): the same weights, 0.66 GiB.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../testdata/titan"))

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

import titan  # noqa: E402


class Args(titan.Args):
    dim = 1024
    n_layers = 14
    n_heads = 16
    n_kv_heads = 4
    vocab_size = 10000
    multiple_of = 256
    max_seq_len = 64


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    model = titan.Transformer(Args())
    optimizers = titan.build_optimizers([model])
    schedulers = titan.build_lr_schedulers(optimizers)
    g = torch.Generator().manual_seed(1)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)
    optimizers.step()
    schedulers.step()
    optimizers.zero_grad()
    trainer = titan.TrainState()
    trainer.step, trainer.ntokens_seen = 1, 2048
    st = titan.states(trainer, [model], optimizers, titan.ParallelAwareDataloader(0, 1), schedulers)
    titan.save(st, os.path.join(out, "step-1"))
    with torch.no_grad():
        dcp.save(titan.ModelWrapper(model).state_dict(), checkpoint_id=os.path.join(out, "model"))


if __name__ == "__main__":
    main()
