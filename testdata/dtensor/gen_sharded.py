"""Writes testdata/dtensor/fsdp1_sharded/rank0.pt with real torch (run in the oracle:
scripts/oracle python testdata/dtensor/gen_sharded.py [OUT]): what a rank of an FSDP1 job
saves with torch.save under SHARDED_STATE_DICT — a ShardedTensor (here one shard of a
[3, 4] float32, on a 1-rank gloo job) — and checks that torch.load(weights_only=True)
refuses it, as ckpt does (it is read through torch.distributed.checkpoint instead).
"""
import os, sys, tempfile
import torch, torch.distributed as dist
from torch.distributed._shard.sharded_tensor import Shard, ShardMetadata, init_from_local_shards

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "fsdp1_sharded")
os.makedirs(out, exist_ok=True)
with tempfile.TemporaryDirectory() as rdzv:
    dist.init_process_group("gloo", init_method="file://" + rdzv + "/rdzv", rank=0, world_size=1)
    local = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    st = init_from_local_shards([Shard(local, ShardMetadata([0, 0], [3, 4], "rank:0/cpu"))], [3, 4])
    path = os.path.join(out, "rank0.pt")
    torch.save({"model": {"w": st}, "epoch": 3}, path)
    dist.destroy_process_group()
try:
    torch.load(path, weights_only=True)
except Exception:
    pass
else:
    sys.exit("torch.load(weights_only=True) loaded a ShardedTensor: ckpt's refusal no longer mirrors torch")
