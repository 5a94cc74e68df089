"""Writes testdata/dtensor/fsdp2_torch25 and fsdp_tp_uneven_torch25: those layouts' rank
files re-pickled as torch 2.5 (and every release before DeviceMesh's CuTe layouts) pickles a
DTensor's spec — a byte-faithful replica, those releases not being in the oracle, made with
torch 2.14 by giving DeviceMesh and DTensorSpec the pickled state of torch 2.5's
(torch/distributed/device_mesh.py and tensor/_dtensor_spec.py at v2.5.0): the mesh as a
`mesh` int32 tensor of its global ranks (a submesh's: those of its ranks) beside
device_type, mesh_dim_names, _flatten_mesh_list, _thread_id, _coordinate_on_dim (a list)
and _dim_group_infos, no _layout, _rank_map or _rank; the spec as {mesh, placements,
tensor_meta}, no shard_order. torch 2.14 loads the result with weights_only=True (checked
here); the tensors are the layouts' JSON's.

  scripts/oracle python testdata/dtensor/gen_torch25.py
"""
import itertools
import os

import torch
import torch.distributed.tensor  # noqa: F401  (registers the DTensor safe globals)
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor._dtensor_spec import DTensorSpec

HERE = os.path.dirname(os.path.abspath(__file__))


def global_ranks(self):
    """The mesh's global ranks, shaped as the mesh (a submesh's: those of its ranks), from
    its layout and rank map without a process group."""
    rank_map = self._rank_map.tolist()
    strides = [a.stride[0] for a in self._layout.axes]
    assert all(len(a.shape) == 1 for a in self._layout.axes)
    coord, first = list(self._coordinate_on_dim), rank_map.index(self._rank)
    out = torch.empty(self.shape, dtype=torch.int)
    for idx in itertools.product(*(range(n) for n in self.shape)):
        out[idx] = rank_map[first + sum((i - c) * s for i, c, s in zip(idx, coord, strides))]
    return out


def mesh_state(self):
    mesh = global_ranks(self)
    ranks = mesh.flatten().tolist()
    coord = list(self._coordinate_on_dim)
    return {
        "device_type": self._device_type,
        "mesh": mesh,
        "mesh_dim_names": self._mesh_dim_names,
        "_flatten_mesh_list": tuple(ranks),
        "_thread_id": None,
        "_coordinate_on_dim": coord,
        "_dim_group_infos": [("ptd:" + str(i), ranks, str(i)) for i in range(len(coord))],
    }


def spec_state(self):
    return {"mesh": self.mesh, "placements": self.placements, "tensor_meta": self.tensor_meta}


if __name__ == "__main__":
    DeviceMesh.__getstate__ = mesh_state
    DTensorSpec.__getstate__ = spec_state
    for layout in ("fsdp2", "fsdp_tp_uneven"):
        src, out = os.path.join(HERE, layout), os.path.join(HERE, layout + "_torch25")
        os.makedirs(out, exist_ok=True)
        for name in sorted(os.listdir(src)):
            sd = torch.load(os.path.join(src, name), weights_only=True)
            torch.save(sd, os.path.join(out, name))
            back = torch.load(os.path.join(out, name), weights_only=True)
            mesh = back["model"]["0.weight"].device_mesh
            assert "_layout" not in mesh.__dict__ and mesh.__dict__["mesh"].dtype == torch.int, mesh.__dict__.keys()
            for k, v in sd["model"].items():
                assert torch.equal(v.to_local(), back["model"][k].to_local()), k
