#!/usr/bin/env bash
# scripts/bench/zip64.sh: checks ckpt on torch.save archives past 4 GiB (zip64 records and
# offsets), which the unit fixtures are too small to reach. torch writes a 4.3 GB checkpoint
# (one 4.3 GB record, then a record past the 4 GiB offset); ckpt reads it, converts it to the
# torch format, and torch loads ckpt's output three ways (plain, mmap, and mmap with computed
# storage offsets), comparing contents. Needs ~9 GB of disk in .bench/.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
mkdir -p .bench
go build -o .bench/ckpt ./cmd/ckpt
scripts/oracle python - <<'PY'
import torch
big = torch.arange(4_300_000_000 // 8, dtype=torch.int64).view(torch.uint8)  # 4.3 GB record
torch.save({"big": big, "after": torch.arange(10, dtype=torch.float32)}, "/repo/.bench/zip64-src.pt")
PY
.bench/ckpt inspect --json .bench/zip64-src.pt | head -c 400; echo
.bench/ckpt convert --to tpu --force .bench/zip64-src.pt .bench/zip64-out.pt
scripts/oracle python - <<'PY'
import torch, torch.utils.serialization
want_after = torch.arange(10, dtype=torch.float32)
def check(sd, how):
    big = sd["big"]
    n = big.numel()
    assert n == 4_300_000_000, (how, n)
    ints = big.view(torch.int64)
    for i in (0, 1, 536_870_911, 536_870_912, n // 8 - 1):
        assert int(ints[i]) == i, (how, i, int(ints[i]))
    assert torch.equal(sd["after"], want_after), how
    print("ok", how)
m = lambda s, l: s
check(torch.load("/repo/.bench/zip64-out.pt", weights_only=True, map_location=m), "plain")
check(torch.load("/repo/.bench/zip64-out.pt", weights_only=True, mmap=True, map_location=m), "mmap")
torch.utils.serialization.config.load.calculate_storage_offsets = True
check(torch.load("/repo/.bench/zip64-out.pt", weights_only=True, mmap=True, map_location=m), "mmap, computed offsets")
PY
rm -f .bench/zip64-src.pt .bench/zip64-out.pt*
