"""The config-class defaults the Go forward pass reads configurations with.

Usage (in the oracle chroot): python3 testdata/forward/defaults.py MODEL_TYPE ...

For every model_type it prints, as one JSON object keyed by model_type, what transformers'
config class declares: its fields' defaults (the dataclass defaults, before any
__post_init__ derives values from other fields; a sub-configuration's own field defaults in
place of its null), its attribute_map (the aliases config.json may use, such as GPT-2's
n_embd for hidden_size) and its default_theta. verify/forward/defaults.json is this output;
TestDefaultsTable regenerates it and fails when the two differ.
"""

import dataclasses
import json
import sys

from transformers.models.auto.configuration_auto import CONFIG_MAPPING


def plain(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    return None


# Fields every configuration has that say nothing about the computation.
IGNORED = {"architectures", "dtype", "id2label", "label2id", "problem_type", "return_dict", "output_hidden_states",
           "output_attentions", "transformers_version", "chunk_size_feed_forward", "is_encoder_decoder",
           "initializer_range", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id"}


def fields(cls):
    out = {}
    subs = getattr(cls, "sub_configs", {}) or {}
    for f in dataclasses.fields(cls):
        if f.name in IGNORED or "dropout" in f.name or "pdrop" in f.name:
            continue
        if f.default is not dataclasses.MISSING:
            v = f.default
        elif f.default_factory is not dataclasses.MISSING:
            v = f.default_factory()
        else:
            continue
        if v is None and f.name in subs and dataclasses.is_dataclass(subs[f.name]):
            v = fields(subs[f.name])
        out[f.name] = plain(v)
    return out


def main():
    table = {}
    for mt in sys.argv[1:]:
        cls = CONFIG_MAPPING[mt]
        table[mt] = {
            "class": cls.__name__,
            "defaults": fields(cls),
            "attribute_map": dict(getattr(cls, "attribute_map", {}) or {}),
            "default_theta": plain(getattr(cls, "default_theta", None)),
        }
    print(json.dumps(table, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
