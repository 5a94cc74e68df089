#!/usr/bin/env python3
"""Writes paramorder/families.json from transformers itself (run in the oracle chroot from
the repository root: scripts/oracle python paramorder/testdata/gen_families.py).

For every model_type of families.py, every configuration (the base and each variant) and
every head (…ForCausalLM, the base model, …ForSequenceClassification), it builds the model
and records, per module path with layer indices written "*":
  children   its parameters and child modules in the order model.named_parameters() lists
             them (parents whose children are only weight then bias, the default, are left
             out);
  never_together  the pairs of those no module built held both of (a dense MLP's projections
             and a MoE block's experts, q_proj and q_a_proj): their order is not known, so a
             state dict holding both is refused rather than ordered by guess;
  layer_norm the modules that are torch.nn.LayerNorm (whose parameters transformers' Trainer
             never decays, whatever their names);
  buffers    the persistent buffers (state-dict entries that are not parameters);
  stored     the names save_pretrained writes that are not parameter names, each with the
             parameters (or buffers) they are loaded into (experts transformers fuses on
             load, modules it renames): those whose change changes the tensor saved under
             that name.
The orders of every module a path pattern names (each layer), in every configuration and
head, are merged; two that disagree stop the generator."""
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


def stored_tensors(model):
    """The tensors save_pretrained writes, by name."""
    out = {}
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        for f in sorted(os.listdir(d)):
            if f.endswith(".safetensors"):
                with safe_open(os.path.join(d, f), "pt") as s:
                    out.update((k, s.get_tensor(k)) for k in s.keys())
    return out


def describe(model):
    # Each module's order, then the orders of the modules one pattern names (its layers) merged:
    # a module that only some layers hold (a norm, a bias of the last one) takes its place in
    # those layers' order, not the place of the first layer that has it.
    orders = {}
    for name, _ in model.named_parameters():
        parts = name.split(".")
        for i in range(len(parts)):
            seq = orders.setdefault(tuple(parts[:i]), [])
            child = "*" if NUM.match(parts[i]) else parts[i]
            if child not in seq:
                seq.append(child)
    kids = {}
    for parent, seq in orders.items():
        kids.setdefault(pattern(parent), []).append(seq)
    norms = {pattern(n.split(".")) for n, m in model.named_modules() if n and isinstance(m, torch.nn.LayerNorm)}
    params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    buffers = {pattern(k.split(".")) for k in model.state_dict() if k not in params}
    named = {n for n, _ in model.named_parameters()}
    saved = stored_tensors(model)
    apart = sorted(set(saved) - named - {k for k in saved if pattern(k.split(".")) in buffers})
    stored = {}
    if apart:
        # Which parameters (or buffers) each such key is loaded into: those whose change changes it.
        tensors = dict(model.named_parameters())
        tensors.update(model.named_buffers())
        into = {k: set() for k in apart}
        with torch.no_grad():
            for n in sorted(set(tensors) - set(saved)):
                before = tensors[n].clone()
                tensors[n].add_(1)
                after = stored_tensors(model)
                tensors[n].copy_(before)
                for k in apart:
                    if not torch.equal(after[k], saved[k]):
                        into[k].add(pattern(n.split(".")))
        for k in apart:
            if not into[k]:
                raise SystemExit("%s: %s is stored but loaded into no parameter" % (type(model).__name__, k))
            stored.setdefault(pattern(k.split(".")), set()).update(into[k])
    return kids, norms, buffers, stored


def dump(o, indent=0):
    """JSON with sorted keys, one line per object member whose value is not an object: a line
    per module path, so that a diff shows which module of which family changed."""
    if not isinstance(o, dict):
        return json.dumps(o)
    pad = " " * (indent + 1)
    items = [pad + json.dumps(k) + ": " + dump(v, indent + 1) for k, v in sorted(o.items())]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


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
                for p, ss in k.items():
                    seqs.setdefault(p, []).extend(ss)
                norms |= n
                buffers |= b
                for p, f in s.items():
                    stored.setdefault(p, set()).update(f)
        children, apart = {}, {}
        for p, ss in sorted(seqs.items()):
            order = merge(ss)
            together = {frozenset((a, b)) for s in ss for i, a in enumerate(s) for b in s[i + 1:]}
            never = [[a, b] for i, a in enumerate(order) for b in order[i + 1:] if frozenset((a, b)) not in together]
            if never:
                apart[p] = never
            elif order == ["*"] or order in (["weight"], ["bias"], ["weight", "bias"]):
                continue  # layer lists, and weight before bias: the defaults
            children[p] = order
        fam = {"children": children}
        if apart:
            fam["never_together"] = apart
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
        f.write(dump(doc) + "\n")


main()
