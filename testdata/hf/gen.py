"""Writes the Hugging Face folder fixtures with real transformers 5.12 / torch 2.14 / safetensors.

Run in the oracle:  scripts/oracle python testdata/hf/gen.py

For each folder it writes FOLDER.json: what safetensors/torch report about every tensor
(name, dtype, shape, nbytes, sha256 of the contiguous little-endian bytes), the files that
travel with the weights, and the format name ckpt must report.
"""
import hashlib
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors import safe_open

HERE = os.path.dirname(os.path.abspath(__file__))


def tensor_bytes(t):
    c = t.detach().resolve_conj().resolve_neg().contiguous().clone()
    return bytes(c.untyped_storage())


def describe(t, name):
    return {"name": name, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
            "nbytes": t.numel() * t.element_size(),
            "sha256": hashlib.sha256(tensor_bytes(t)).hexdigest()}


def listing(folder, fmt):
    tensors = []
    for f in sorted(os.listdir(folder)):
        p = os.path.join(folder, f)
        if f.endswith(".safetensors"):
            with safe_open(p, framework="pt") as sf:
                for k in sf.keys():
                    tensors.append(describe(sf.get_tensor(k), k))
        elif f.endswith(".bin"):
            sd = torch.load(p, map_location="cpu", weights_only=True)
            for k, v in sd.items():
                tensors.append(describe(v, k))
    tensors.sort(key=lambda t: t["name"])
    weights = [f for f in os.listdir(folder) if f.endswith((".safetensors", ".bin")) or f.endswith(".index.json")]
    extras = sorted(f for f in os.listdir(folder) if f not in weights)
    return {"format": fmt, "tensors": tensors, "extras": extras}


def fresh(name):
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def tiny_qwen3_moe():
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_experts=4, num_experts_per_tok=2, max_position_embeddings=64, tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.Qwen3MoeForCausalLM(cfg).to(torch.bfloat16)


def tiny_mistral():
    cfg = transformers.MistralConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=True)
    torch.manual_seed(1)
    return transformers.MistralForCausalLM(cfg)


def main():
    out = {}
    # Sharded safetensors from save_pretrained, several shards.
    d = fresh("qwen3_moe_sharded")
    m = tiny_qwen3_moe()
    m.save_pretrained(d, max_shard_size="40KB")
    m.generation_config.save_pretrained(d)
    out["qwen3_moe_sharded"] = listing(d, "hf-safetensors-sharded")

    d = fresh("mistral_sharded")
    m = tiny_mistral()
    m.save_pretrained(d, max_shard_size="30KB")
    out["mistral_sharded"] = listing(d, "hf-safetensors-sharded")

    # Sharded .bin folder with its index, as older transformers wrote it: torch.save shards
    # named pytorch_model-0000i-of-0000n.bin and pytorch_model.bin.index.json. transformers 5
    # only writes safetensors, so the shards are split with huggingface_hub's own splitter.
    d = fresh("mistral_bin_sharded")
    os.makedirs(d)
    m.config.save_pretrained(d)
    sd = {k: v.contiguous() for k, v in m.state_dict().items() if k != "lm_head.weight"}
    from huggingface_hub import split_torch_state_dict_into_shards
    split = split_torch_state_dict_into_shards(sd, filename_pattern="pytorch_model{suffix}.bin", max_shard_size="30KB")
    for fname, names in split.filename_to_tensors.items():
        torch.save({n: sd[n] for n in names}, os.path.join(d, fname))
    index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
    out["mistral_bin_sharded"] = listing(d, "hf-bin-sharded")

    for name, lst in out.items():
        with open(os.path.join(HERE, name + ".json"), "w") as f:
            json.dump(lst, f, indent=1)
        size = sum(os.path.getsize(os.path.join(HERE, name, f)) for f in os.listdir(os.path.join(HERE, name)))
        print(f"{name}: {len(lst['tensors'])} tensors, files {sorted(os.listdir(os.path.join(HERE, name)))}, {size} bytes")


if __name__ == "__main__":
    sys.exit(main())
