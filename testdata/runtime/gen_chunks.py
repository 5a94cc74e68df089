"""Writes chunks.json: how torch 2.14 lays tensors over device meshes.

For each case (global shape, mesh shape, placements) and each rank this records what
torch.distributed.tensor computes on that rank, in one process per rank of a fake process
group (no data moves):

  * the rank's DeviceMesh coordinate (init_device_mesh: row-major over the mesh shape);
  * compute_local_shape_and_global_offset(shape, mesh, placements) -- DTensor's local shape
    and global offset -- and the ChunkStorageMetadata DCP's planner writes for the DTensor
    (_create_write_items_for_dtensor); the script asserts the two agree;
  * the local tensor distribute_tensor(arange, ..., src_data_rank=None) gives the rank, which
    the script asserts is exactly the global tensor's box at those offsets and sizes.

Cases with "order" describe FSDP2 on top of tensor parallelism: the shards apply in the given
mesh-axis order (TP first, then FSDP chunks each TP shard, as fully_shard does with
torch.chunk). Their ranks are computed with torch.chunk directly; where every split is even
the script also asserts that DTensor's own description of that layout,
_StridedShard(dim, split_factor) on the FSDP axis, gives the same offsets; where splits are
uneven it records whether it does ("strided_shard_agrees").

"splits" records torch.chunk's piece sizes for (n, k), padded with empty pieces to k, as
DTensor pads them.

Usage: python3 gen_chunks.py OUT_DIR   (writes OUT_DIR/chunks.json)
"""

import itertools
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.planner_helpers import _create_write_items_for_dtensor
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import _StridedShard
from torch.testing._internal.distributed.fake_pg import FakeStore

R = "R"


def S(d):
    return "S(%d)" % d


CASES = [
    # one axis: even, uneven, empty trailing shards, an empty dimension
    ((16,), (4,), [S(0)]),
    ((5,), (4,), [S(0)]),
    ((6,), (4,), [S(0)]),
    ((3,), (8,), [S(0)]),
    ((0,), (2,), [S(0)]),
    ((), (2,), [R]),
    ((1000, 300), (3,), [S(1)]),
    ((151936, 4096), (8,), [S(0)]),
    # several axes: replicate, different dims, the same dim twice (nested left to right)
    ((5, 7), (2, 2, 2), [R, S(0), S(1)]),
    ((2, 5), (2, 2), [S(1), S(1)]),
    ((7, 5), (2, 4), [S(0), S(0)]),
    ((11, 13), (2, 2, 2), [S(0), S(1), S(0)]),
    ((4, 6, 10), (2, 3), [S(2), S(1)]),
    ((9, 4, 4), (2, 2, 2), [S(0), R, S(0)]),
    ((128256, 8192), (2, 8), [S(0), S(1)]),
    ((3, 2), (2, 2, 2), [S(0), S(0), S(0)]),
]

# (shape, mesh, placements, order): FSDP after TP on the same dimension.
ORDERED = [
    ((16, 4), (4, 2), [S(0), S(0)], [1, 0]),
    ((12, 8), (2, 2, 2), [R, S(0), S(0)], [0, 2, 1]),
    ((9,), (4, 2), [S(0), S(0)], [1, 0]),
    ((10, 4), (4, 2), [S(0), S(0)], [1, 0]),
    ((7, 6), (2, 3), [S(0), S(1)], [1, 0]),
    ((24, 6), (2, 2, 2), [S(0), S(0), S(1)], [2, 1, 0]),
    ((61, 16), (2, 2), [S(0), S(0)], [1, 0]),
    ((44, 16), (4, 2), [S(0), S(0)], [1, 0]),
]

SPLITS = [(n, k) for n in range(0, 13) for k in (1, 2, 3, 4, 5, 8)]


def placement(s):
    return Replicate() if s == R else Shard(int(s[2:-1]))


def coords(mesh):
    return list(itertools.product(*[range(m) for m in mesh]))


def dtensor_case(shape, mesh, pls):
    world = 1
    for m in mesh:
        world *= m
    n = torch.Size(shape).numel()
    full = torch.arange(n).reshape(shape) if n <= 1 << 20 else None
    ranks = []
    for r in range(world):
        dist.init_process_group("fake", store=FakeStore(), rank=r, world_size=world)
        try:
            dm = init_device_mesh("cpu", mesh)
            p = [placement(x) for x in pls]
            sizes, offsets = compute_local_shape_and_global_offset(shape, dm, p)
            meta = DTensor.from_local(torch.empty(sizes, device="meta"), dm, p, run_check=False,
                                      shape=torch.Size(shape), stride=contiguous_strides(shape))
            chunk = _create_write_items_for_dtensor("t", meta).tensor_data.chunk
            assert list(chunk.offsets) == list(offsets) and list(chunk.sizes) == list(sizes), (chunk, offsets, sizes)
            if full is not None:
                local = distribute_tensor(full, dm, p, src_data_rank=None).to_local()
                box = full[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))]
                assert tuple(local.shape) == tuple(sizes) and torch.equal(local, box), (shape, mesh, pls, r)
            ranks.append({"rank": r, "coord": list(dm.get_coordinate()), "offsets": list(offsets), "sizes": list(sizes)})
        finally:
            dist.destroy_process_group()
    return ranks


def contiguous_strides(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return tuple(reversed(st))


def chunk_or_empty(t, k, dim, i):
    pieces = torch.chunk(t, k, dim)
    if i < len(pieces):
        return pieces[i]
    return t.narrow(dim, t.shape[dim], 0)


def ordered_case(shape, mesh, pls, order):
    n = torch.Size(shape).numel()
    full = torch.arange(n).reshape(shape)
    # index of each element along each dimension
    idx = [torch.arange(s).view([-1 if d == e else 1 for e in range(len(shape))]).expand(shape) for d, s in enumerate(shape)]
    ranks = []
    even = True
    for r, c in enumerate(coords(mesh)):
        local = [full] + idx
        for a in order:
            if pls[a] == R:
                continue
            d = int(pls[a][2:-1])
            if local[0].shape[d] % mesh[a] != 0:
                even = False
            local = [chunk_or_empty(x, mesh[a], d, c[a]) for x in local]
        sizes = list(local[0].shape)
        offsets = []
        for d in range(len(shape)):
            if sizes[d] == 0:
                offsets.append(shape[d])
            else:
                offsets.append(int(local[1 + d].min()) if local[0].numel() else 0)
        box = full[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))]
        assert torch.equal(local[0], box), (shape, mesh, pls, order, c)
        ranks.append({"rank": r, "coord": list(c), "offsets": offsets, "sizes": sizes})
    # DTensor's own name for this layout: _StridedShard(dim, split_factor) on an axis whose
    # shard applies after those of later mesh axes on the same dimension. Where every split is
    # even it must agree; otherwise record whether it does (it need not: see README).
    strided = [placement(s) for s in pls]
    for a in range(len(pls)):
        after = [b for b in range(a + 1, len(pls)) if pls[b] == pls[a] != R and order.index(b) < order.index(a)]
        if after:
            sf = 1
            for b in after:
                sf *= mesh[b]
            strided[a] = _StridedShard(int(pls[a][2:-1]), split_factor=sf)
    agrees = True
    for rk in ranks:
        sizes, offsets = _compute_local_shape_and_global_offset(shape, mesh, rk["coord"], strided)
        same = list(sizes) == rk["sizes"] and (0 in rk["sizes"] or list(offsets) == rk["offsets"])
        assert same or not even, (shape, mesh, strided, rk, sizes, offsets)
        agrees = agrees and same
    return ranks, even, agrees


def main():
    out = sys.argv[1]
    cases = []
    for shape, mesh, pls in CASES:
        cases.append({"shape": list(shape), "mesh": list(mesh), "placements": pls, "ranks": dtensor_case(shape, mesh, pls)})
    for shape, mesh, pls, order in ORDERED:
        ranks, even, agrees = ordered_case(shape, mesh, pls, order)
        cases.append({"shape": list(shape), "mesh": list(mesh), "placements": pls, "order": order,
                      "even": even, "strided_shard_agrees": agrees, "ranks": ranks})
    splits = []
    for n, k in SPLITS:
        sizes = [p.shape[0] for p in torch.chunk(torch.empty(n), k)]
        splits.append({"n": n, "k": k, "sizes": sizes + [0] * (k - len(sizes))})
    # One case or split per line, so a change in torch shows as a readable diff.
    lines = ['{"torch": %s,' % json.dumps(torch.__version__), ' "cases": [']
    lines += ["  " + json.dumps(c) + "," for c in cases]
    lines[-1] = lines[-1][:-1]
    lines += [" ],", ' "splits": [']
    lines += ["  " + json.dumps(x) + "," for x in splits]
    lines[-1] = lines[-1][:-1]
    lines += [" ]", "}"]
    with open(os.path.join(out, "chunks.json"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
