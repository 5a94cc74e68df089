"""Checks ckpt's conversions of the per-rank DTensor fixtures with torch (in the oracle).

  check.py load FILE LAYOUT.json
      torch.load(FILE, weights_only=True, map_location="cpu") (a torch file ckpt wrote from a rank folder) holds
      exactly the tensors LAYOUT.json lists, each bit-identical to the full_tensor() torch
      computed when the ranks saved them.
  check.py resume DCP LAYOUT.json LAYOUT WORK
      A DCP folder ckpt wrote for a 4-device mesh (fsdp=4) resumes on 4 gloo ranks: each
      builds LAYOUT's model (gen.model) with FSDP2 on a 4-rank mesh and AdamW, loads the
      folder with torch.distributed.checkpoint.load into {"model", "optim", "epoch"} and
      opt.load_state_dict; every parameter and AdamW moment (full_tensor()) and step must be
      the saved one bit for bit, lr and epoch as saved, and each weight a 4-way Shard(0).

Prints {"ok": ..., "errors": [...], "compared": N}.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import gen  # noqa: E402


def compare(listing, expected, errors):
    for k, e in expected.items():
        g = listing.get(k)
        if g is None:
            errors.append(f"{k}: missing")
        elif (g["shape"], g["dtype"], g["sha256"]) != (e["shape"], e["dtype"], e["sha256"]):
            errors.append(f"{k}: {g['dtype']} {g['shape']} {g['sha256'][:12]}, saved {e['dtype']} {e['shape']} {e['sha256'][:12]}")
    for k in listing:
        if k not in expected:
            errors.append(f"{k}: not saved")


def resume(rank, world, path, expected, layout, rdzv, q):
    dist.init_process_group("gloo", init_method="file://" + rdzv, rank=rank, world_size=world)
    from torch.distributed.checkpoint import load
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(123)  # not the saved values: loading must overwrite them all
    m = gen.model(layout)
    for p in m.parameters():
        torch.nn.init.uniform_(p)
    fully_shard(m, mesh=init_device_mesh("cpu", (world,)))
    opt = torch.optim.AdamW(m.parameters(), lr=0.5)
    m(torch.randn(3, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    sd = {"model": m.state_dict(), "optim": opt.state_dict(), "epoch": 0}
    load(sd, checkpoint_id=path)
    opt.load_state_dict(sd["optim"])
    errors = []
    got = gen.listing({"model": m.state_dict(), "optim": opt.state_dict(), "epoch": sd["epoch"]})
    compare(got, expected, errors)
    for g in opt.param_groups:
        if g["lr"] != 1e-2:
            errors.append(f"lr {g['lr']}, saved 0.01")
    if sd["epoch"] != 3:
        errors.append(f"epoch {sd['epoch']}, saved 3")
    for k, v in m.state_dict().items():
        if v.dim() and v.shape[0] >= world and tuple(map(repr, v.placements)) != ("Shard(dim=0)",):
            errors.append(f"{k}: placements {v.placements}")
    if rank == 0:
        q.put({"errors": errors, "compared": len(got)})
    dist.destroy_process_group()


def main():
    mode = sys.argv[1]
    with open(sys.argv[3]) as f:
        expected = json.load(f)["tensors"]
    if mode == "load":
        listing = gen.listing(torch.load(sys.argv[2], weights_only=True, map_location="cpu"))
        errors = []
        compare(listing, expected, errors)
        res = {"errors": errors, "compared": len(listing)}
    else:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        with tempfile.TemporaryDirectory(dir=sys.argv[5]) as tmp:
            mp.spawn(resume, args=(4, sys.argv[2], expected, sys.argv[4], os.path.join(tmp, "rdzv"), q), nprocs=4)
        res = q.get()
    res["ok"] = not res["errors"]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
