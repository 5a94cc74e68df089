"""Writes the per-rank DTensor fixtures of testdata/dtensor with real torch (run in the
oracle: scripts/oracle python testdata/dtensor/gen.py [OUT [LAYOUT...]], by default
into testdata/dtensor; with LAYOUTs only those).

Each layout is what a training loop under FSDP2 (torch.distributed.fsdp.fully_shard)
writes when every rank calls
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}, path)
after one AdamW step: every parameter and moment is a DTensor holding the rank's shard.
LAYOUT.json lists, per layout, every tensor of the consolidated checkpoint (path, global
shape, dtype and the sha256 of DTensor.full_tensor()'s row-major bytes) as torch computes it.

  fsdp2/   2 ranks, mesh (2,): Shard(0) with uneven shards (5 rows over 2 ranks) and a
           1-row parameter whose second shard is empty; files named rank{r}.pt.
  hsdp/    4 ranks, mesh (replicate=2, shard=2): (Replicate(), Shard(0)); files named so
           that their names disagree with their ranks (the ranks come from the pickles).
  fsdp_tp/ 4 ranks, mesh (dp=2, tp=2): tensor parallelism (colwise/rowwise) then FSDP2 on
           dp, so sharded parameters carry (_StridedShard(0, sf=2), Shard(0)).
  fsdp_tp_uneven/ the same with 10 hidden rows: tp splits them 5, 5, dp each of those 3, 2
           (9 rows: torch's rowwise forward fails on the uneven tp split); and a LayerNorm
           tensor parallelism leaves alone, whose parameters are DTensors on the dp submesh
           (Shard(0) over 2 of the 4 ranks, the same on both tp ranks).
"""
import hashlib, json, os, sys, tempfile
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor



def digest(t):
    t = t.detach().contiguous().reshape(-1)
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()


def listing(tree, prefix=""):
    out = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(listing(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(listing(v, f"{prefix}.{i}"))
    elif isinstance(tree, torch.Tensor):
        full = tree.full_tensor() if isinstance(tree, DTensor) else tree
        e = {"shape": list(full.shape), "dtype": str(full.dtype).removeprefix("torch."), "sha256": digest(full)}
        if isinstance(tree, DTensor):
            e["placements"] = [repr(p) for p in tree.placements]
        out[prefix] = e
    return out


def model(layout="fsdp2"):
    """The layout's model, unsharded."""
    torch.manual_seed(0)
    if layout.startswith("fsdp_tp"):
        n = 10 if layout == "fsdp_tp_uneven" else 12
        m = torch.nn.Sequential(torch.nn.Linear(8, n), torch.nn.ReLU(), torch.nn.Linear(n, 8))
        if layout == "fsdp_tp_uneven":
            m.append(torch.nn.LayerNorm(8))  # not tensor parallel: FSDP2 shards it on dp alone
        torch.manual_seed(0)
        for p in m.parameters():
            torch.nn.init.normal_(p)
        return m
    return torch.nn.Sequential(
        torch.nn.Linear(8, 6), torch.nn.ReLU(),
        torch.nn.Linear(6, 5), torch.nn.ReLU(),   # 5 rows: uneven over 2
        torch.nn.Linear(5, 1))                    # 1 row: rank 1 holds nothing


def run(rank, world, layout, rdzv, out):
    dist.init_process_group("gloo", init_method="file://" + rdzv, rank=rank, world_size=world)
    m = model()
    if layout == "fsdp2":
        mesh = init_device_mesh("cpu", (2,))
        fully_shard(m, mesh=mesh)
        name = f"rank{rank}.pt"
    elif layout == "hsdp":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
        fully_shard(m, mesh=mesh)
        name = f"part-{(rank * 3 + 1) % 4}.pt"
    else:
        from torch.distributed.tensor.parallel import parallelize_module, ColwiseParallel, RowwiseParallel
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        m = model(layout)
        parallelize_module(m, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(m, mesh=mesh["dp"])
        name = f"rank{rank}.pt"
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    torch.manual_seed(1 + rank)
    m(torch.randn(3, 8)).sum().backward()
    opt.step()
    sd = {"model": m.state_dict(), "optim": opt.state_dict(), "epoch": 3}
    torch.save(sd, os.path.join(out, name))
    lst = listing(sd)
    if rank == 0:
        with open(out + ".json", "w") as f:
            json.dump({"world": world, "tensors": lst}, f, indent=1, sort_keys=True)
            f.write("\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    only = sys.argv[2:]
    for layout, world in [("fsdp2", 2), ("hsdp", 4), ("fsdp_tp", 4), ("fsdp_tp_uneven", 4)]:
        if only and layout not in only:
            continue
        out = os.path.join(OUT, layout)
        os.makedirs(out, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(run, args=(world, layout, os.path.join(tmp, "rdzv"), out), nprocs=world)
