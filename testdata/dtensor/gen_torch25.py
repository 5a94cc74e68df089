"""Writes testdata/dtensor/fsdp2_torch25: the fsdp2 rank files re-pickled as torch 2.5–2.8
pickle a DTensor's spec — a byte-faithful replica (those releases are not in the oracle),
made with torch 2.14 by giving DeviceMesh and DTensorSpec the pickled state of torch 2.5's
(torch/distributed/device_mesh.py and tensor/_dtensor_spec.py at v2.5.0): the mesh as a
`mesh` int32 tensor of ranks beside device_type, mesh_dim_names, _flatten_mesh_list,
_thread_id, _coordinate_on_dim (a list) and _dim_group_infos, no _layout, _rank_map or
_rank; the spec as {mesh, placements, tensor_meta}, no shard_order. torch 2.14 loads the
result with weights_only=True (checked here); the tensors are fsdp2.json's.

  scripts/oracle python testdata/dtensor/gen_torch25.py
"""
import os

import torch
import torch.distributed.tensor  # noqa: F401  (registers the DTensor safe globals)
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor._dtensor_spec import DTensorSpec

HERE = os.path.dirname(os.path.abspath(__file__))
SRC, OUT = os.path.join(HERE, "fsdp2"), os.path.join(HERE, "fsdp2_torch25")


def mesh_state(self):
    n = len(self._rank_map)
    coord = list(self._coordinate_on_dim)
    return {
        "device_type": self._device_type,
        "mesh": torch.arange(n, dtype=torch.int).reshape(self.shape),
        "mesh_dim_names": self._mesh_dim_names,
        "_flatten_mesh_list": tuple(range(n)),
        "_thread_id": None,
        "_coordinate_on_dim": coord,
        "_dim_group_infos": [("ptd:" + str(i), list(range(n)), str(i)) for i in range(len(coord))],
    }


def spec_state(self):
    return {"mesh": self.mesh, "placements": self.placements, "tensor_meta": self.tensor_meta}


if __name__ == "__main__":
    DeviceMesh.__getstate__ = mesh_state
    DTensorSpec.__getstate__ = spec_state
    os.makedirs(OUT, exist_ok=True)
    for name in ("rank0.pt", "rank1.pt"):
        sd = torch.load(os.path.join(SRC, name), weights_only=True)
        torch.save(sd, os.path.join(OUT, name))
        back = torch.load(os.path.join(OUT, name), weights_only=True)
        mesh = back["model"]["0.weight"].device_mesh
        assert "_layout" not in mesh.__dict__ and mesh.__dict__["mesh"].dtype == torch.int, mesh.__dict__.keys()
        for k, v in sd["model"].items():
            assert torch.equal(v.to_local(), back["model"][k].to_local()), k
