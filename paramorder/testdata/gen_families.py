#!/usr/bin/env python3
"""Writes paramorder/families.json from transformers itself (run in the oracle chroot from
the repository root: scripts/oracle python paramorder/testdata/gen_families.py).

For every model_type of families.py, every configuration (the base and each variant) and
every head (…ForCausalLM, the base model, …ForSequenceClassification), it builds the model
and records, per module path with layer indices written "*":
  children   its parameters and child modules in the order model.named_parameters() lists
             them (parents whose children are only weight then bias, the default, are left
             out);
  layer_norm the modules that are torch.nn.LayerNorm (whose parameters transformers' Trainer
             never decays, whatever their names);
  buffers    the persistent buffers (state-dict entries that are not parameters);
  stored     the names save_pretrained writes that are not parameter names, each with the
             parameters they are loaded into (experts transformers fuses on load).
The orders of all configurations are merged; two that disagree stop the generator."""
import json
import os
import re
import sys
import tempfile

import torch
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(__file__))
from families import FAMILIES, HEADS, build, config  # noqa: E402

NUM = re.compile(r"^\d+$")


def pattern(parts):
    return ".".join("*" if NUM.match(p) else p for p in parts)


def merge(seqs):
    """One order holding every sequence's order; ties by first appearance."""
    after, first = {}, {}
    for s in seqs:
        for i, x in enumerate(s):
            first.setdefault(x, len(first))
            after.setdefault(x, set())
            for y in s[i + 1:]:
                after[x].add(y)
    order, left = [], set(first)
    while left:
        ready = [x for x in left if not any(x in after[y] for y in left if y != x)]
        if not ready:
            raise SystemExit("conflicting orders: %s" % seqs)
        x = min(ready, key=first.get)
        order.append(x)
        left.remove(x)
    return order


def describe(model):
    kids = {}
    for name, _ in model.named_parameters():
        parts = name.split(".")
        for i in range(len(parts)):
            parent = pattern(parts[:i])
            seq = kids.setdefault(parent, [])
            child = "*" if NUM.match(parts[i]) else parts[i]
            if child not in seq:
                seq.append(child)
    norms = {pattern(n.split(".")) for n, m in model.named_modules() if n and isinstance(m, torch.nn.LayerNorm)}
    params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    buffers = {pattern(k.split(".")) for k in model.state_dict() if k not in params}
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        saved = set()
        for f in os.listdir(d):
            if f.endswith(".safetensors"):
                with safe_open(os.path.join(d, f), "pt") as s:
                    saved |= set(s.keys())
    named = {n for n, _ in model.named_parameters()}
    stored = {}
    apart = sorted(saved - named - {k for k in saved if pattern(k.split(".")) in buffers})
    fused = sorted(named - saved)
    for k in apart:
        stored.setdefault(pattern(k.split(".")), set()).update(pattern(f.split(".")) for f in fused)
    return kids, norms, buffers, stored


def main():
    out = {}
    for mt, (_, variants) in FAMILIES.items():
        seqs, norms, buffers, stored = {}, set(), set(), {}
        for kw in [{}] + variants:
            for head in HEADS:
                model = build(head, config(mt, **kw))
                if model is None:
                    continue
                k, n, b, s = describe(model)
                for p, seq in k.items():
                    seqs.setdefault(p, []).append(seq)
                norms |= n
                buffers |= b
                for p, f in s.items():
                    stored.setdefault(p, set()).update(f)
        children = {}
        for p, ss in sorted(seqs.items()):
            order = merge(ss)
            if order == ["*"] or order in (["weight"], ["bias"], ["weight", "bias"]):
                continue  # layer lists, and weight before bias: the defaults
            children[p] = order
        fam = {"children": children}
        if norms:
            fam["layer_norm"] = sorted(norms)
        if buffers:
            fam["buffers"] = sorted(buffers)
        if stored:
            fam["stored"] = {p: sorted(f) for p, f in sorted(stored.items())}
        out[mt] = fam
        print(mt, len(children), "parents", file=sys.stderr)
    import transformers
    doc = {"transformers": transformers.__version__, "families": out}
    with open("paramorder/families.json", "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


main()
