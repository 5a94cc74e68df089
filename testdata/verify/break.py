"""Deliberately broken conversions of a converted Hugging Face folder, for measuring what
`ckpt verify --forward` must reject.

Usage (in the oracle chroot): python3 testdata/verify/break.py SRC,OUT[,REFERENCE] ...

SRC is a folder with config.json and model.safetensors (a correct conversion); REFERENCE,
if given, is the unconverted float32 model folder (for the rounding variant). For every
variant below it writes OUT/VARIANT/ (config.json and model.safetensors); it prints a JSON
object mapping each OUT to the list of variant names written there. Each variant is one bug a converter could make:

  one_element_sign   the largest-magnitude element of the first layer's attention output
                     projection negated (one element of one weight changed)
  one_element_x16    the same element multiplied by 16
  transposed         the first square matrix of the first layer transposed
  layers_swapped     the first two decoder layers' weights exchanged
  embed_shifted      the embedding rows shifted by one token (an off-by-one vocabulary)
  norm_dropped       the final norm's weight set to ones (a norm left at its init)
  noise_1pct         every weight plus Gaussian noise of 1% of its standard deviation
  truncated_bf16     bfloat16 weights made by truncating float32 instead of rounding to
                     nearest even (REFERENCE needed; a subtle bug the forward pass alone
                     cannot be expected to see — tensor parity does)
"""

import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file


def first(sd, pred):
    for k in sorted(sd, key=layer_order):
        if pred(k, sd[k]):
            return k
    return None


LAYERS = ("layers", "h", "blocks")  # the layer lists of the transformers families


def layer_index(k):
    parts = k.split(".")
    for i, p in enumerate(parts):
        if p in LAYERS and i + 1 < len(parts) and parts[i + 1].isdigit():
            return int(parts[i + 1]), ".".join(parts[: i + 1]) + "."
    return None, None


def layer_order(k):
    i, _ = layer_index(k)
    return (-1 if i is None else i, k)


def in_layer(k, n):
    return layer_index(k)[0] == n


def is_weight(k, v):
    return v.is_floating_point() and v.dim() >= 2 and in_layer(k, 0)


# The attention output projections of the transformers families.
ATTENTION_OUT = ("o_proj", "out_proj", "attn.c_proj", "attention.dense", "self_attention.dense", "self_attn.dense",
                 "experts.output_linear")

# The token embeddings and final norms of the transformers families.
EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "embed_in.weight", "word_embeddings.weight", "embeddings.weight")
FINAL_NORMS = ("model.norm.weight", "ln_f.weight", "final_layer_norm.weight", "final_layernorm.weight", "norm_f.weight", "ln_out.weight")


def variants(sd, ref):
    out = {}
    o = first(sd, lambda k, v: is_weight(k, v) and any(p in k for p in ATTENTION_OUT)) or first(sd, is_weight)
    flat = sd[o].reshape(-1)
    i = int(flat.float().abs().argmax())
    for name, f in (("one_element_sign", lambda x: -x), ("one_element_x16", lambda x: x * 16)):
        s = dict(sd)
        t = sd[o].clone()
        t.view(-1)[i] = f(t.view(-1)[i])
        s[o] = t
        out[name] = s
    sq = first(sd, lambda k, v: is_weight(k, v) and v.dim() == 2 and v.shape[0] == v.shape[1])
    if sq:
        out["transposed"] = {**sd, sq: sd[sq].t().contiguous()}
    l0 = [k for k in sd if in_layer(k, 0)]
    if l0:
        prefix = layer_index(l0[0])[1]
        swap = {k: k.replace(prefix + "0.", prefix + "1.", 1) for k in l0}
        if all(k1 in sd and sd[k1].shape == sd[k].shape for k, k1 in swap.items()):
            s = dict(sd)
            for k, k1 in swap.items():
                s[k], s[k1] = sd[k1], sd[k]
            out["layers_swapped"] = s
    e = first(sd, lambda k, v: k.endswith(EMBEDDINGS) and v.dim() == 2)
    out["embed_shifted"] = {**sd, e: torch.roll(sd[e], 1, 0).contiguous()}
    n = first(sd, lambda k, v: k.endswith(FINAL_NORMS))
    if n:
        out["norm_dropped"] = {**sd, n: torch.ones_like(sd[n])}
    g = torch.Generator().manual_seed(0)
    out["noise_1pct"] = {k: (v + 0.01 * v.float().std() * torch.randn(v.shape, generator=g)).to(v.dtype)
                         if v.is_floating_point() and v.dim() >= 2 else v for k, v in sd.items()}
    if ref is not None:
        def trunc(v):
            if v.dtype != torch.float32:
                return v
            return (v.contiguous().view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)
        out["truncated_bf16"] = {k: trunc(v) for k, v in ref.items()}
    return out


def main():
    written = {}
    for job in sys.argv[1:]:
        src, outdir, *refdir = job.split(",")
        ref = load_file(os.path.join(refdir[0], "model.safetensors")) if refdir else None
        sd = load_file(os.path.join(src, "model.safetensors"))
        names = []
        for name, s in variants(sd, ref).items():
            d = os.path.join(outdir, name)
            os.makedirs(d, exist_ok=True)
            shutil.copy(os.path.join(src, "config.json"), d)
            save_file({k: v.contiguous() for k, v in s.items()}, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
            names.append(name)
        written[outdir] = names
    print(json.dumps(written))


if __name__ == "__main__":
    main()
