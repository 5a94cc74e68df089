"""A tiny DeepSeek-style FP8 block-quantized Llama, and the check that its dequantized conversion loads.

    scripts/oracle python testdata/quantized/tiny_llama.py make OUT_DIR
    scripts/oracle python testdata/quantized/tiny_llama.py check CONVERTED_DIR OUT_DIR

make: builds a LlamaForCausalLM from a config (random init, fixed seed; no download), quantizes
the decoder's Linear weights to float8_e4m3fn with 128x128 block scales as DeepSeek-V3 does
(zero-pad to whole blocks, scale = amax / 448, clamp, cast, crop), and writes OUT_DIR/src, a
Hugging Face folder whose config.json carries quantization_config {"quant_method": "fp8",
"weight_block_size": [128, 128]}. The MLP (intermediate size 320) has partial edge blocks, which
transformers' own FP8 loader refuses. OUT_DIR/expected.safetensors holds every weight as the
reference dequantization gives it in bfloat16: DeepSeek's weight_dequant formula (float32
product of code and block scale, stored as bfloat16), other weights unchanged.

check: AutoModelForCausalLM.from_pretrained(CONVERTED_DIR) must load without a quantization
config, with no missing, unexpected or mismatched keys, every parameter bit-identical to
expected.safetensors, and finite logits. Prints one JSON line {"compared", "problems"}.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

BLOCK = 128


def vmul(a, b):
    """a * b evaluated by torch's vectorized kernel for every element (see gen.py)."""
    a, b = torch.broadcast_tensors(a, b)
    shape, n = a.shape, a.numel()
    pad = (-n) % 64
    fa = torch.cat([a.contiguous().reshape(-1), torch.ones(pad, dtype=a.dtype)])
    fb = torch.cat([b.contiguous().reshape(-1), torch.ones(pad, dtype=b.dtype)])
    return (fa * fb)[:n].reshape(shape)


def quantize(w):
    """DeepSeek-V3 block quantization of a float32 matrix: codes [R, C], scale_inv [ceil(R/128), ceil(C/128)]."""
    rows, cols = w.shape
    wp = F.pad(w, (0, -cols % BLOCK, 0, -rows % BLOCK))
    gr, gc = wp.shape[0] // BLOCK, wp.shape[1] // BLOCK
    blocks = wp.view(gr, BLOCK, gc, BLOCK)
    scale = (blocks.abs().amax(dim=(1, 3)) / 448.0).clamp(min=1e-12)
    q = (blocks / scale[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.view(gr * BLOCK, gc * BLOCK)[:rows, :cols].contiguous(), scale.contiguous()


def dequantize(q, s):
    rows, cols = q.shape
    se = s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:rows, :cols]
    return vmul(q.to(torch.float32), se).to(torch.bfloat16)


def make(out):
    torch.manual_seed(7)
    config = LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=320, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False, dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    src = os.path.join(out, "src")
    os.makedirs(src, exist_ok=True)
    config.save_pretrained(src)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                  "weight_block_size": [BLOCK, BLOCK]}
    with open(os.path.join(src, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tensors, expected = {}, {}
    for name, p in model.state_dict().items():
        if ".layers." in name and name.endswith("_proj.weight"):
            q, s = quantize(p.to(torch.float32))
            tensors[name], tensors[name + "_scale_inv"] = q, s
            expected[name] = dequantize(q, s)
        else:
            tensors[name] = expected[name] = p.contiguous()
    save_file(tensors, os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
    save_file(expected, os.path.join(out, "expected.safetensors"))


def check(converted, out):
    problems = []
    expected = load_file(os.path.join(out, "expected.safetensors"))
    model, info = AutoModelForCausalLM.from_pretrained(converted, output_loading_info=True)
    if getattr(model.config, "quantization_config", None) is not None:
        problems.append("the loaded config still has a quantization_config")
    with open(os.path.join(converted, "config.json")) as f:
        if "quantization_config" in json.load(f):
            problems.append("config.json still has quantization_config")
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            problems.append(f"{key}: {sorted(map(str, info[key]))[:5]}")
    compared = 0
    state = model.state_dict()
    for name, want in expected.items():
        got = state.get(name)
        if got is None:
            problems.append(f"{name}: not in the loaded model")
            continue
        compared += 1
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got.view(torch.int16), want.view(torch.int16)):
            problems.append(f"{name}: {got.dtype} {list(got.shape)} differs from the reference dequantization")
    logits = model(torch.arange(16).unsqueeze(0)).logits
    if not torch.isfinite(logits).all():
        problems.append("non-finite logits")
    print(json.dumps({"compared": compared, "problems": problems}))


if sys.argv[1] == "make":
    make(sys.argv[2])
else:
    check(sys.argv[2], sys.argv[3])
