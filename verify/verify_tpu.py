#!/usr/bin/env python3
"""Run a converted checkpoint on a TPU and compare its logits with its source's.

Written by `ckpt verify --emit-torch DIR SRC DST`, next to reference.safetensors (the tokens;
when ckpt's Go forward pass ran the model, the source model's float32 logits for them and
ckpt's emulation of the source and of the converted checkpoint on a TPU), config.json (the
converted model's configuration) and source_config.json (the source's). On a TPU VM with
torch_tpu and transformers installed:

    python3 verify_tpu.py [CHECKPOINT] [--source SRC] [--device tpu] [--dtype auto|float32] [--json]

CHECKPOINT is the converted checkpoint (default: the path ckpt was given, recorded in
reference.safetensors): a Hugging Face folder, a .safetensors file, a torch.save file or a
torch.distributed.checkpoint directory. The model is built from config.json with
transformers (eager attention; the checkpoint's tensors go through transformers' own
loading, so any architecture transformers knows and any name layout it converts works),
loaded on the host (map_location="cpu"), moved to the device, and run on the reference
tokens under torch.no_grad() — not inference_mode, which torch.compile(backend="tpu") cannot
capture. FP8 block-scaled and MXFP4 weights kept quantized are dequantized on the host first.
--dtype auto runs the model in the dtype of its weights (bfloat16 stays bfloat16); float32
widens them, so that the TPU's default matmul precision (bfloat16 inputs, float32
accumulation) is what rounds.

When reference.safetensors holds no logits (ckpt's forward pass has no family for the
model), the script computes the source's side too, from SRC (default: the path ckpt was
given) and source_config.json: in float32 on the CPU (the reference) and in float32 on the
device (what the TPU's arithmetic alone does to the source, the second reference).

It prints, for every position, the max and mean absolute logit error, the cosine
similarity, the KL divergence KL(P_ref || P_run) and the top-1 tokens against the source's
float32 logits, applies the thresholds ckpt verify used (a position agrees when it is within
all of them of the source in float32, or else of the source on a TPU; enough positions must
agree), and exits 0 when the logits agree, 5 when they do not (as ckpt verify does), 1 on
an error. --device cpu runs the same check on the host.
"""

import argparse
import json
import math
import os
import sys

import torch


def load_reference(path):
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        return {k: f.get_tensor(k) for k in f.keys()}, meta


def model_state(obj, embed=None):
    """The model state dict inside a loaded checkpoint object, its wrapper prefix removed:
    the prefix before the key that ends with one of embed (the model's input embedding
    names), or before "model.embed_tokens.weight" when none is given."""
    ends = embed or ["model.embed_tokens.weight"]
    if isinstance(obj, dict):
        for k, v in obj.items():
            for e in ends:
                if isinstance(k, str) and k.endswith(e) and torch.is_tensor(v):
                    prefix = k[: -len(e)]
                    return {n[len(prefix):]: t for n, t in obj.items() if isinstance(n, str) and n.startswith(prefix) and torch.is_tensor(t)}
        for v in obj.values():
            sd = model_state(v, embed)
            if sd:
                return sd
    return None


def read_state(path):
    from safetensors.torch import load_file

    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, ".metadata")):
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.metadata import TensorStorageMetadata

            reader = dcp.FileSystemReader(path)
            md = reader.read_metadata()
            sd = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
                  for k, m in md.state_dict_metadata.items() if isinstance(m, TensorStorageMetadata)}
            dcp.load(sd, storage_reader=reader)
            return sd
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        if files:
            sd = {}
            for f in files:
                sd.update(load_file(os.path.join(path, f)))
            return sd
        files = sorted(f for f in os.listdir(path) if f.startswith("pytorch_model") and f.endswith(".bin"))
        sd = {}
        for f in files:
            sd.update(torch.load(os.path.join(path, f), map_location="cpu", weights_only=True))
        return sd
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:2] == b"PK" or head[:1] == b"\x80":
        return torch.load(path, map_location="cpu", weights_only=True)
    return load_file(path)


def dequantize(sd, qcfg):
    """Unpack FP8 block-scaled (weight_scale_inv) and MXFP4 (_blocks, _scales) weights."""
    method = qcfg.get("quant_method")
    out = {}
    if method == "fp8":
        bh, bw = qcfg.get("weight_block_size") or [128, 128]
        for k, v in sd.items():
            if k.endswith("_scale_inv"):
                continue
            s = sd.get(k + "_scale_inv")
            if s is not None and v.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
                rows, cols = v.shape[-2:]
                s = s.float().repeat_interleave(bh, -2)[..., :rows, :].repeat_interleave(bw, -1)[..., :cols]
                v = v.float() * s
            out[k] = v
        return out
    if method == "mxfp4":
        from transformers.integrations.mxfp4 import convert_moe_packed_tensors

        for k, v in sd.items():
            if k.endswith("_scales"):
                continue
            if k.endswith("_blocks"):
                base = k[: -len("_blocks")]
                v = convert_moe_packed_tensors(v, sd[base + "_scales"], dtype=torch.bfloat16).transpose(1, 2).contiguous()
                k = base
            out[k] = v
        return out
    raise SystemExit(f"verify_tpu.py: quantization method {method!r} kept in the checkpoint: convert it with ckpt convert --dequantize first")


def build(cfg_path, sd, dtype):
    """The causal LM of cfg_path with the checkpoint's tensors sd, loaded the way
    transformers loads checkpoints (its renames and weight conversions applied), in dtype
    ("auto": the dtype most of the tensors have)."""
    import transformers

    with open(cfg_path) as f:
        raw = json.load(f)
    qcfg = raw.pop("quantization_config", None)
    config = transformers.AutoConfig.for_model(**raw)
    config._attn_implementation = "eager"
    cls = transformers.AutoModelForCausalLM._model_mapping[type(config)]
    # The embedding's names in this architecture, to strip a wrapper prefix (DDP's module.,
    # a checkpoint dict's key) before the model's own names.
    with torch.device("meta"):
        shell = cls(config)
    emb = shell.get_input_embeddings().weight
    names = [n for n, p in shell.named_parameters() if p is emb]
    base = getattr(shell, "base_model_prefix", "") or ""
    embed = names + [n[len(base) + 1:] for n in names if base and n.startswith(base + ".")]
    del shell
    sd = model_state(sd, embed) or sd
    if qcfg:
        sd = dequantize(sd, qcfg)
    floats = [v.dtype for v in sd.values() if v.is_floating_point()]
    if dtype == "auto":
        dt = max(set(floats), key=floats.count) if floats else torch.float32
    else:
        dt = getattr(torch, dtype)
    model, info = cls.from_pretrained(None, config=config, state_dict=sd, dtype=dt, attn_implementation="eager",
                                      output_loading_info=True)
    missing = [k for k in info.get("missing_keys", []) if "lm_head" not in k or not getattr(config, "tie_word_embeddings", False)]
    unexpected = list(info.get("unexpected_keys", []))
    if missing or unexpected:
        raise SystemExit(f"verify_tpu.py: the checkpoint does not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model.eval(), dt


def run(cfg_path, path, dtype, device, tokens):
    """One model's float32 logits [T, vocab] on the host, after running it on device."""
    model, dt = build(cfg_path, read_state(path), dtype)
    model.to(device)
    with torch.no_grad():
        logits = model(tokens.to(device)).logits.float().cpu()[0]
    del model
    return logits, dt


def distance(a, b, th):
    """One position's logits b against the reference's a, and the thresholds it is outside."""
    d = (a - b).abs()
    spread = float(a.max() - a.min())
    la, lb = torch.log_softmax(a, 0), torch.log_softmax(b, 0)
    r = dict(max_abs=float(d.max()), mean_abs=float(d.mean()), max_abs_rel=float(d.max()) / max(spread, 1e-300), spread=spread,
             cosine=float((a * b).sum() / (a.norm() * b.norm())), kl=max(float((la.exp() * (la - lb)).sum()), 0.0),
             top1_ref=int(a.argmax()), top1_got=int(b.argmax()))
    r["top1_margin"] = float(a[r["top1_ref"]] - a[r["top1_got"]])
    out = []
    if not r["kl"] <= th["max_kl"]:
        out.append(f"kl {r['kl']:.3g} > {th['max_kl']:g}")
    if not r["cosine"] >= th["min_cosine"]:
        out.append(f"cosine {r['cosine']:.6g} < {th['min_cosine']:g}")
    if not r["max_abs_rel"] <= th["max_abs_rel"]:
        out.append(f"max abs error {r['max_abs']:.3g} = {r['max_abs_rel']:.3g} of the logits' spread > {th['max_abs_rel']:g}")
    if not r["top1_margin"] <= th["max_abs_rel"] * spread:
        out.append(f"top-1 token {r['top1_got']}, the source's {r['top1_ref']}")
    r["outside"] = out
    return r


def compare(tokens, ref, ref_tpu, got, th):
    """The same measures and verdict as ckpt verify --forward (verify.CompareLogits): a
    position agrees when it is within the thresholds of the source in float32, or else of
    the source as a TPU computes it; enough positions must agree."""
    ref, ref_tpu, got = ref.double(), ref_tpu.double(), got.double()
    rows = []
    for t in range(ref.shape[0]):
        r = distance(ref[t], got[t], th)
        r["token"] = tokens[t]
        r["source_tpu"] = distance(ref_tpu[t], got[t], th)
        r["agrees"] = not r["outside"] or not r["source_tpu"]["outside"]
        r["by_tpu"] = bool(r["outside"]) and r["agrees"]
        rows.append(r)
    n = len(rows)

    def worst(key, sign=1):
        vals = [r[key] for r in rows]
        bad = [v for v in vals if v != v]
        return bad[0] if bad else max(vals, key=lambda v: sign * v)

    agree = sum(r["agrees"] for r in rows)
    rep = dict(positions=rows, max_abs=worst("max_abs"), mean_abs=sum(r["mean_abs"] for r in rows) / n,
               max_abs_rel=worst("max_abs_rel"), min_cosine=worst("cosine", -1), max_kl=worst("kl"),
               top1=sum(r["top1_margin"] <= th["max_abs_rel"] * r["spread"] for r in rows) / n,
               top1_exact=sum(r["top1_ref"] == r["top1_got"] for r in rows) / n,
               agree=agree / n, by_tpu=sum(r["by_tpu"] for r in rows), thresholds=th)
    failed = []
    if not rep["agree"] >= th["min_agree"]:
        failed.append(f"{n - agree} of {n} positions disagree (at most {100 * (1 - th['min_agree']):.3g}% may)")
        failed += [f"position {i}: {', '.join(r['outside'])}" for i, r in enumerate(rows) if not r["agrees"]][:3]
    rep["failed"] = failed
    return rep


def distance_summary(ref, got, th):
    """The worst position of got against ref: how far the TPU is from ckpt's emulation of it."""
    ds = [distance(ref[t], got[t], th) for t in range(ref.shape[0])]
    return dict(max_abs=max(d["max_abs"] for d in ds), min_cosine=min(d["cosine"] for d in ds), max_kl=max(d["kl"] for d in ds))


def line(rep):
    return (f"{rep['agree']:.3g} of the positions agree ({rep['by_tpu']} only with the source on a TPU); against the float32 source: "
            f"max abs {rep['max_abs']:.3g} ({rep['max_abs_rel']:.3g} of spread), mean abs {rep['mean_abs']:.3g}, "
            f"min cosine {rep['min_cosine']:.6f}, top-1 {rep['top1']:.3g}, max KL {rep['max_kl']:.3g}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", nargs="?", help="the converted checkpoint (default: the path ckpt verified)")
    p.add_argument("--source", help="the source checkpoint, run when ckpt could not (default: the path ckpt was given)")
    p.add_argument("--device", default="tpu", help="tpu (default; needs torch_tpu) or cpu")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--reference", default=os.path.join(here, "reference.safetensors"))
    p.add_argument("--config", default=os.path.join(here, "config.json"))
    p.add_argument("--source-config", default=os.path.join(here, "source_config.json"))
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args()
    try:
        ref, meta = load_reference(args.reference)
        th = json.loads(meta["thresholds"])
        path = args.checkpoint or meta.get("checkpoint")
        if args.device.startswith("tpu"):
            import torch_tpu  # noqa: F401  (registers the tpu device)
        device = torch.device(args.device)
        tokens = ref["tokens"].reshape(1, -1)
        logits, dt = run(args.config, path, args.dtype, device, tokens)
        emu = None
        if "logits" in ref:
            reference, source_tpu = ref["logits"][0].float(), ref["source_tpu_logits"][0].float()
            emu = ref["tpu_logits"][0].float()
            computed = "ckpt"
        else:
            # ckpt's Go forward pass could not run this model: the source as transformers runs
            # it, in float32 on the CPU, and in float32 on the device.
            source = args.source or meta.get("source")
            if not source:
                raise SystemExit("verify_tpu.py: reference.safetensors has no logits and no source path: give --source")
            scfg = args.source_config if os.path.exists(args.source_config) else args.config
            reference, _ = run(scfg, source, "float32", torch.device("cpu"), tokens)
            source_tpu = reference
            if device.type != "cpu":
                source_tpu, _ = run(scfg, source, "float32", device, tokens)
            computed = "transformers"
    except SystemExit:
        raise
    except Exception as e:  # an error, not a verdict
        print(f"verify_tpu.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    toks = tokens[0].tolist()
    rep = compare(toks, reference, source_tpu, logits, th)
    rep.update(checkpoint=path, device=str(device), dtype=str(dt).removeprefix("torch."), reference_computed_by=computed)
    if emu is not None:
        rep["versus_ckpt_emulation"] = distance_summary(emu.double(), logits.double(), th)
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        print(f"{path} on {device} ({rep['dtype']}), {len(toks)} tokens, against the source's float32 logits "
              f"(computed by {computed}; ckpt {meta.get('ckpt_version', '?')})")
        print(f"{'POS':>4} {'TOKEN':>7} {'MAX ABS':>9} {'MEAN ABS':>9} {'COSINE':>10} {'KL':>9} {'TOP-1':>13}")
        for i, r in enumerate(rep["positions"]):
            top = f"{r['top1_ref']}/{r['top1_got']}"
            mark = "  outside: " + ", ".join(r["outside"]) if not r["agrees"] else "  (agrees with the source on a TPU)" if r["by_tpu"] else ""
            print(f"{i:>4} {r['token']:>7} {r['max_abs']:>9.3g} {r['mean_abs']:>9.3g} {r['cosine']:>10.6f} {r['kl']:>9.3g} {top:>13}{mark}")
        if emu is not None:
            e = rep["versus_ckpt_emulation"]
            print(f"against ckpt's emulation of the converted checkpoint on a TPU: max abs {e['max_abs']:.3g}, min cosine {e['min_cosine']:.6f}, max KL {e['max_kl']:.3g}")
        print("against the source:", line(rep), "—", "PASS" if not rep["failed"] else "FAIL: " + "; ".join(rep["failed"]))
    return 0 if not rep["failed"] else 5


if __name__ == "__main__":
    sys.exit(main())
