"""Helpers shared by the ecosystem fixture generators and checkers: torch's own listing of
a loaded checkpoint, flattened as ckpt names values (dict keys and list/tuple indices
joined with "."), with every pickled nn.Module listed as module.state_dict() gives it."""
import hashlib

import torch


def digest(t):
    t = t.detach().resolve_conj().resolve_neg().contiguous()
    if t.numel() == 0:
        return hashlib.sha256(b"").hexdigest()
    return hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def entry(t):
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "sha256": digest(t)}


def listing(obj, prefix="", out=None):
    """Every tensor of obj by flattened name, in order; modules as their state_dict."""
    if out is None:
        out = {}
    join = (lambda k: f"{prefix}.{k}") if prefix else str
    if isinstance(obj, torch.Tensor):
        out[prefix] = entry(obj)
    elif isinstance(obj, torch.nn.Module):
        for k, v in obj.state_dict().items():
            out[join(k)] = entry(v)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            listing(v, join(k), out)
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        for i, v in enumerate(obj):
            listing(v, join(i), out)
    return out
