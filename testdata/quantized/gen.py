"""Writes the quantized-checkpoint fixtures and what the reference dequantizers make of them.

    scripts/oracle python testdata/quantized/gen.py OUT_DIR [--full]

For each layout, OUT_DIR/<fixture>/ is a Hugging Face folder (config.json, hf_quant_config.json
for ModelOpt, model.safetensors) holding small quantized tensors with every edge case:
partial edge blocks, NaN and inf codes, -0, subnormals, e8m0 extremes (0x00, 0xFE, 0xFF),
overflowing and subnormal scales, and quant.md's worked vectors V3-V8 planted in place.
OUT_DIR/expected.json lists, per fixture, the logical groups (name, scheme, shape, stored
members), the runtime-only tensors, and the SHA-256 of each group dequantized to bfloat16,
float16 and float32 by the reference code running here:

  fp8 (DeepSeek / transformers fine-grained)  DeepSeek's weight_dequant formula (f32 product of
      code and block scale, partial edge blocks masked, stored as T); on whole-block tensors
      transformers' own Fp8Dequantize._dequantize_one is run too and must agree bit for bit
  fbgemm_fp8           f32 product with the row scale (experts: the column scale), cast to T
  compressed-tensors   FP8: x_q.to(S) * scale in the scale dtype S, cast to T;
                       NVFP4: scale.to(bf16) / global_scale, f32 product, cast to T
  modelopt             FP8: w.to(T) * scale.to(T); NVFP4: (scale.float() * weight_scale_2)
                       times the e2m1 table with +0 at index 8, cast to T
  mxfp4 (gpt-oss)      transformers.integrations.mxfp4.convert_moe_packed_tensors(dtype=T)

With --full, OUT_DIR/<fixture>.expected.safetensors also holds the reference tensors
themselves ("<name>|<dtype>"), for element-by-element diagnosis. The committed fixtures are
this script's output; TestQuantizedFixturesAreCurrent regenerates and compares them.
"""
import hashlib
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers.integrations.finegrained_fp8 import Fp8Dequantize
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
E2M1_MODELOPT = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

gen = torch.Generator().manual_seed(20260806)


def codes(shape, dtype=torch.uint8):
    """Uniformly random bytes (every code, NaNs included), viewed as dtype."""
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen).view(dtype)


def normal(shape, scale=1.0):
    return torch.randn(shape, generator=gen) * scale


def f32bits(*bits):
    return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)


def raw(t):
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and raw(a) == raw(b)


def vmul(a, b):
    """a * b (broadcast) evaluated by torch's vectorized CPU kernel for every element.

    torch's elementwise loop hands the last (n mod 2 vectors) elements of each inner run to a
    scalar loop, which writes different NaN bits: bfloat16 NaN 0x7FC0 instead of the
    vectorized 0xFFFF, and the second operand's NaN payload instead of the first's. Which
    elements land there depends only on shapes and strides, so the references are evaluated
    on contiguous operands padded to whole vectors, in one thread: every element gets the
    vectorized kernel's bits, as the bulk of any real tensor does.
    """
    a, b = torch.broadcast_tensors(a, b)
    shape, n = a.shape, a.numel()
    pad = (-n) % 64
    fa = torch.cat([a.contiguous().reshape(-1), torch.ones(pad, dtype=a.dtype)])
    fb = torch.cat([b.contiguous().reshape(-1), torch.ones(pad, dtype=b.dtype)])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return (fa * fb)[:n].reshape(shape)
    finally:
        torch.set_num_threads(threads)


def expand(s, bh, bw, rows, cols):
    """Block scales expanded to one per element, partial edge blocks cropped."""
    return s.repeat_interleave(bh, -2).repeat_interleave(bw, -1)[..., :rows, :cols]


def fp8_scale_f32(s):
    """Scales as float32, as Fp8Dequantize reads them (uint8 = e8m0 exponents via exp2)."""
    if s.dtype == torch.uint8:
        return (s.to(torch.float32) - 127.0).exp2()
    return s.to(torch.float32)


def ref_fp8_block(q, s, bh, bw, T):
    rows, cols = q.shape[-2:]
    out = vmul(q.to(torch.float32), expand(fp8_scale_f32(s), bh, bw, rows, cols)).to(T)
    if rows % bh == 0 and cols % bw == 0 and s.shape[-2:] == (rows // bh, cols // bw):
        hf = Fp8Dequantize(None)._dequantize_one(q, s, output_dtype=T)
        assert same_bits(hf, out), "transformers' Fp8Dequantize disagrees with DeepSeek's formula"
    return out


def ref_ct_fp8(q, s, bh, bw, T):
    rows, cols = q.shape[-2:]
    return vmul(q.to(s.dtype), expand(s, bh, bw, rows, cols)).to(T)


def ref_modelopt_fp8(q, s, T):
    rows, cols = q.shape
    if s.dim() == 0:
        return vmul(q.to(T), s.to(T))
    if s.dim() == 1:
        return vmul(q.to(T), s.to(T)[:, None])
    a, b = s.shape[0], s.shape[2]
    return vmul(q.view(a, rows // a, b, cols // b).to(T), s.to(T)).reshape(rows, cols)


def unpack_fp4(packed, table):
    lut = torch.tensor(table, dtype=torch.float32)
    u8 = packed.view(torch.uint8)
    lo, hi = lut[(u8 & 0xF).long()], lut[(u8 >> 4).long()]
    return torch.stack([lo, hi], -1).reshape(*u8.shape[:-1], 2 * u8.shape[-1])


def ref_modelopt_nvfp4(w, s, ws2, T):
    v = unpack_fp4(w, E2M1_MODELOPT)
    rows, cols = v.shape
    p = s.to(torch.float32) * ws2
    return (v.view(rows, cols // 16, 16) * p.unsqueeze(-1)).reshape(rows, cols).to(T)


def ref_ct_nvfp4(w, s, g, T):
    v = unpack_fp4(w, E2M1)
    rows, cols = v.shape
    q = s.to(torch.bfloat16) / g  # [1]-shaped g: float32; 0-dim g: stays bfloat16 (P7)
    return (v.to(q.dtype).view(rows, cols // 16, 16) * q.unsqueeze(-1)).reshape(rows, cols).to(T)


class Fixture:
    def __init__(self, name, config, hf_quant=None):
        self.name, self.config, self.hf_quant = name, config, hf_quant
        self.tensors, self.groups, self.aux, self.refs = {}, [], [], {}

    def plain(self, name, t):
        self.tensors[name] = t

    def group(self, name, scheme, shape, members, ref):
        """Records a quantized group; ref(T) is the reference dequantization."""
        for m, t in members.items():
            self.tensors[m] = t
        self.groups.append({"name": name, "scheme": scheme, "shape": list(shape), "members": list(members)})
        for dn, T in DTYPES.items():
            out = ref(T)
            assert out.dtype == T and list(out.shape) == list(shape), (name, out.dtype, out.shape)
            self.refs[(name, dn)] = out.contiguous()

    def runtime(self, name, t):
        self.tensors[name] = t
        self.aux.append(name)

    def write(self, out, full):
        d = os.path.join(out, self.name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(json.dumps(self.config, indent=2, sort_keys=True) + "\n")
        if self.hf_quant is not None:
            with open(os.path.join(d, "hf_quant_config.json"), "w") as f:
                f.write(json.dumps(self.hf_quant, indent=4) + "\n")
        save_file(self.tensors, os.path.join(d, "model.safetensors"))
        if full:
            save_file({f"{n}|{dn}": t for (n, dn), t in self.refs.items()},
                      os.path.join(out, self.name + ".expected.safetensors"))
        sums = {}
        for (n, dn), t in self.refs.items():
            sums.setdefault(n, {})[dn] = hashlib.sha256(raw(t)).hexdigest()
        return {"groups": self.groups, "aux": sorted(self.aux), "sha256": sums}


def fp8_block():
    fx = Fixture("fp8_block", {"model_type": "llama", "quantization_config": {
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}})
    # Partial blocks both ways; scales: V3's, negative, inf, NaN, float32-subnormal, overflowing.
    q = codes((130, 300), torch.float8_e4m3fn)
    q.view(torch.uint8)[0, :4] = torch.tensor([0x6A, 0x7F, 0x80, 0xFF], dtype=torch.uint8)
    s = torch.cat([f32bits(0x3B60CCCD), torch.tensor([-0.25, float("inf"), float("nan"), 1e-39, 3e36])]).view(2, 3)
    fx.group("model.layers.0.mlp.down_proj.weight", "fp8-block", q.shape,
             {"model.layers.0.mlp.down_proj.weight": q, "model.layers.0.mlp.down_proj.weight_scale_inv": s},
             lambda T: ref_fp8_block(q, s, 128, 128, T))
    # bfloat16 scales, whole blocks (transformers' own dequantizer runs too).
    q2 = codes((256, 128), torch.float8_e4m3fn)
    s2 = normal((2, 1), 0.01).to(torch.bfloat16)
    fx.group("model.layers.0.mlp.up_proj.weight", "fp8-block", q2.shape,
             {"model.layers.0.mlp.up_proj.weight": q2, "model.layers.0.mlp.up_proj.weight_scale_inv": s2},
             lambda T: ref_fp8_block(q2, s2, 128, 128, T))
    # e5m2 codes (inf codes) with float8_e8m0fnu scales 2^-127, 2^127 and NaN.
    q3 = codes((128, 300), torch.float8_e5m2)
    s3 = torch.tensor([[0x00, 0xFE, 0xFF]], dtype=torch.uint8).view(torch.float8_e8m0fnu)
    fx.group("model.layers.0.mlp.gate_proj.weight", "fp8-block", q3.shape,
             {"model.layers.0.mlp.gate_proj.weight": q3, "model.layers.0.mlp.gate_proj.weight_scale_inv": s3},
             lambda T: ref_fp8_block(q3, s3, 128, 128, T))
    # uint8 exponents (transformers' ue8m0 scales: exp2(b - 127), 255 -> inf).
    q4 = codes((256, 128), torch.float8_e4m3fn)
    s4 = torch.tensor([[0x85], [0xFF]], dtype=torch.uint8)
    fx.group("model.layers.0.self_attn.o_proj.weight", "fp8-block", q4.shape,
             {"model.layers.0.self_attn.o_proj.weight": q4, "model.layers.0.self_attn.o_proj.weight_scale_inv": s4},
             lambda T: ref_fp8_block(q4, s4, 128, 128, T))
    # Fused experts [E, out, in] with a scale grid per expert (5.12's "<key>_scale_inv").
    q5 = codes((2, 256, 136), torch.float8_e4m3fn)
    s5 = normal((2, 2, 2), 0.02)
    fx.group("model.layers.0.mlp.experts.gate_up_proj", "fp8-block", q5.shape,
             {"model.layers.0.mlp.experts.gate_up_proj": q5, "model.layers.0.mlp.experts.gate_up_proj_scale_inv": s5},
             lambda T: ref_fp8_block(q5, s5, 128, 128, T))
    fx.runtime("model.layers.0.self_attn.o_proj.activation_scale", torch.tensor(0.5))
    fx.plain("model.embed_tokens.weight", normal((16, 8)).to(torch.bfloat16))
    fx.plain("model.norm.weight", torch.ones(136, dtype=torch.bfloat16))
    return fx


def fp8_fbgemm():
    fx = Fixture("fp8_fbgemm", {"model_type": "llama4_text", "quantization_config": {
        "activation_scale_ub": 1200.0, "modules_to_not_convert": ["lm_head"], "quant_method": "fbgemm_fp8"}})
    q = codes((64, 200), torch.float8_e4m3fn)
    s = normal((64, 1), 0.01).abs()
    fx.group("model.layers.0.self_attn.q_proj.weight", "fp8-channel", q.shape,
             {"model.layers.0.self_attn.q_proj.weight": q, "model.layers.0.self_attn.q_proj.weight_scale": s},
             lambda T: vmul(q.to(torch.float32), s).to(T))
    e = "model.layers.0.feed_forward.experts."
    gu = codes((2, 48, 96), torch.float8_e4m3fn)  # [E, H, 2I]
    gus = normal((2, 1, 96), 0.01).abs()
    fx.group(e + "gate_up_proj", "fp8-column", gu.shape, {e + "gate_up_proj": gu, e + "gate_up_proj_scale": gus},
             lambda T: vmul(gu.to(torch.float32), gus).to(T))
    # down_proj [E, I, H] with its scale [E, H, 1] along the last dim; I == H (P11).
    dn = codes((2, 48, 48), torch.float8_e4m3fn)
    dns = normal((2, 48, 1), 0.01).abs()
    fx.group(e + "down_proj", "fp8-column", dn.shape, {e + "down_proj": dn, e + "down_proj_scale": dns},
             lambda T: vmul(dn.to(torch.float32), dns.transpose(1, 2)).to(T))
    fx.plain("lm_head.weight", normal((16, 48)).to(torch.bfloat16))
    return fx


def fp8_ct():
    w = lambda strategy, **kw: {"num_bits": 8, "type": "float", "strategy": strategy, "symmetric": True,
                                "dynamic": False, "group_size": None, "block_structure": None, "observer": "minmax", **kw}
    fx = Fixture("fp8_ct", {"model_type": "llama", "quantization_config": {
        "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
        "ignore": ["lm_head"],
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True, "dynamic": False},
        "config_groups": {
            "group_0": {"targets": ["re:.*q_proj$"], "weights": w("tensor"),
                        "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}},
            "group_1": {"targets": ["re:.*k_proj$"], "weights": w("channel")},
            "group_2": {"targets": ["re:.*v_proj$"], "weights": w("group", group_size=64)},
            "group_3": {"targets": ["re:.*mlp.*"], "weights": w("block", block_structure=[128, 128])}}}})
    p = "model.layers.0.self_attn."
    q = codes((96, 160), torch.float8_e4m3fn)
    qs = torch.tensor([0.0123])
    fx.group(p + "q_proj.weight", "fp8-tensor", q.shape, {p + "q_proj.weight": q, p + "q_proj.weight_scale": qs},
             lambda T: ref_ct_fp8(q, qs.view(1, 1), 96, 160, T))
    fx.runtime(p + "q_proj.input_scale", torch.tensor([0.5]))
    k = codes((64, 160), torch.float8_e4m3fn)
    ks = normal((64, 1), 0.02).to(torch.bfloat16)
    fx.group(p + "k_proj.weight", "fp8-channel", k.shape, {p + "k_proj.weight": k, p + "k_proj.weight_scale": ks},
             lambda T: ref_ct_fp8(k, ks, 1, 160, T))
    v = codes((64, 160), torch.float8_e4m3fn)
    vs = normal((64, 3), 0.02).to(torch.float16)
    fx.group(p + "v_proj.weight", "fp8-block", v.shape, {p + "v_proj.weight": v, p + "v_proj.weight_scale": vs},
             lambda T: ref_ct_fp8(v, vs, 1, 64, T))
    m = codes((160, 300), torch.float8_e4m3fn)
    ms = torch.cat([normal((5,), 0.02), torch.tensor([3e36])]).view(2, 3).to(torch.bfloat16)
    fx.group("model.layers.0.mlp.down_proj.weight", "fp8-block", m.shape,
             {"model.layers.0.mlp.down_proj.weight": m, "model.layers.0.mlp.down_proj.weight_scale": ms},
             lambda T: ref_ct_fp8(m, ms, 128, 128, T))
    fx.runtime(p + "k_scale", torch.tensor(1.25, dtype=torch.bfloat16))
    fx.runtime(p + "v_scale", torch.tensor(1.5, dtype=torch.bfloat16))
    fx.plain("lm_head.weight", normal((16, 160)).to(torch.bfloat16))
    return fx


def modelopt_producer():
    return {"name": "modelopt", "version": "0.37.0"}


def fp8_modelopt():
    fx = Fixture("fp8_modelopt", {"model_type": "llama", "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": {"num_bits": 8, "type": "float"},
        "ignore": ["lm_head"], "producer": modelopt_producer()}},
        {"producer": modelopt_producer(), "quantization": {
            "quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}})
    p = "model.layers.0.self_attn."
    for proj, rows in (("q_proj", 64), ("k_proj", 32), ("v_proj", 32)):
        q = codes((rows, 96), torch.float8_e4m3fn)
        s = normal((), 0.01).abs()
        if proj == "q_proj":  # V4
            q.view(torch.uint8)[0, 0] = 0x1F
            s = f32bits(0x3BC3880A)[0]
        fx.group(p + proj + ".weight", "fp8-tensor", q.shape, {p + proj + ".weight": q, p + proj + ".weight_scale": s},
                 lambda T, q=q, s=s: ref_modelopt_fp8(q, s, T))
        fx.runtime(p + proj + ".input_scale", torch.tensor(0.25))
    fx.runtime(p + "k_proj.k_scale", torch.tensor(1.0))
    fx.runtime(p + "v_proj.v_scale", torch.tensor(1.0))
    fx.plain("lm_head.weight", normal((16, 96)).to(torch.bfloat16))
    return fx


def nvfp4_scales(shape):
    """float8_e4m3fn block scales: random codes, NaN (0x7F), 0, -0 and V6's 0x4C included."""
    s = codes(shape, torch.float8_e4m3fn)
    s.view(torch.uint8)[0, :4] = torch.tensor([0x4C, 0x7F, 0x00, 0x80], dtype=torch.uint8)
    return s


def nvfp4_codes(shape, dtype=torch.uint8):
    w = codes(shape)
    w[0, 0] = 0xD3  # V6 / V7
    w[0, 1] = 0x88  # both nibbles 8: +0 in ModelOpt, -0 in compressed-tensors
    return w.view(dtype)


def nvfp4_modelopt():
    fx = Fixture("nvfp4_modelopt", {"model_type": "llama", "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"], "producer": modelopt_producer(),
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "group_size": 16}}}}},
        {"producer": modelopt_producer(), "quantization": {
            "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]}})
    p = "model.layers.0.self_attn.q_proj."
    w, s = nvfp4_codes((64, 64)), nvfp4_scales((64, 8))
    ws2 = f32bits(0x3AA137F4)[0]  # V6
    fx.group(p + "weight", "nvfp4", (64, 128),
             {p + "weight": w, p + "weight_scale": s, p + "weight_scale_2": ws2},
             lambda T: ref_modelopt_nvfp4(w, s, ws2, T))
    fx.runtime(p + "input_scale", torch.tensor(0.002))
    # Stored as torch's float4_e2m1fn_x2 (safetensors F4).
    p = "model.layers.0.mlp.down_proj."
    w2, s2 = nvfp4_codes((32, 64), torch.float4_e2m1fn_x2), nvfp4_scales((32, 8))
    ws22 = torch.tensor(3e-4)
    fx.group(p + "weight", "nvfp4", (32, 128),
             {p + "weight": w2, p + "weight_scale": s2, p + "weight_scale_2": ws22},
             lambda T: ref_modelopt_nvfp4(w2, s2, ws22, T))
    fx.runtime(p + "input_scale", torch.tensor(0.003))
    fx.plain("lm_head.weight", normal((16, 128)).to(torch.bfloat16))
    return fx


def nvfp4_ct():
    fx = Fixture("nvfp4_ct", {"model_type": "llama", "quantization_config": {
        "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "quantization_status": "compressed",
        "ignore": ["lm_head"], "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                        "symmetric": True, "dynamic": False, "scale_dtype": "torch.float8_e4m3fn"},
            "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                                  "symmetric": True, "dynamic": "local"}}}}})
    p = "model.layers.0.self_attn.q_proj."
    w, s = nvfp4_codes((64, 64)), nvfp4_scales((64, 8))
    g = f32bits(0x44C5A5A6)  # V7, shape [1]
    fx.group(p + "weight", "nvfp4", (64, 128),
             {p + "weight_packed": w, p + "weight_scale": s, p + "weight_global_scale": g},
             lambda T: ref_ct_nvfp4(w, s, g, T))
    fx.runtime(p + "input_global_scale", torch.tensor([1000.0]))
    # A 0-dim global scale, as ModelOpt -> compressed-tensors conversion leaves it (P7).
    p = "model.layers.0.self_attn.k_proj."
    w2, s2 = nvfp4_codes((32, 64)), nvfp4_scales((32, 8))
    g2 = torch.tensor(2688.0 / 1.7)
    fx.group(p + "weight", "nvfp4", (32, 128),
             {p + "weight_packed": w2, p + "weight_scale": s2, p + "weight_global_scale": g2},
             lambda T: ref_ct_nvfp4(w2, s2, g2, T))
    fx.plain("lm_head.weight", normal((16, 128)).to(torch.bfloat16))
    return fx


def modelopt_mixed():
    layers = {"model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
              "model.layers.0.self_attn.k_proj": {"quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"},
              "model.layers.0.self_attn.o_proj": {"quant_algo": "FP8_PB_WO"},
              "model.layers.0.mlp.down_proj": {"quant_algo": "NVFP4", "group_size": 16}}
    fx = Fixture("modelopt_mixed", {"model_type": "llama"}, {"producer": modelopt_producer(), "quantization": {
        "quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"],
        "quantized_layers": layers}})
    p = "model.layers.0.self_attn."
    q, qs = codes((64, 96), torch.float8_e4m3fn), torch.tensor(0.0071)
    fx.group(p + "q_proj.weight", "fp8-tensor", q.shape, {p + "q_proj.weight": q, p + "q_proj.weight_scale": qs},
             lambda T: ref_modelopt_fp8(q, qs, T))
    k, ks = codes((32, 96), torch.float8_e4m3fn), normal((32,), 0.01).abs()
    fx.group(p + "k_proj.weight", "fp8-channel", k.shape, {p + "k_proj.weight": k, p + "k_proj.weight_scale": ks},
             lambda T: ref_modelopt_fp8(k, ks, T))
    o, os_ = codes((256, 256), torch.float8_e4m3fn), normal((2, 1, 2, 1), 0.01).abs()
    fx.group(p + "o_proj.weight", "fp8-block", o.shape, {p + "o_proj.weight": o, p + "o_proj.weight_scale": os_},
             lambda T: ref_modelopt_fp8(o, os_, T))
    m = "model.layers.0.mlp.down_proj."
    w, s, ws2 = nvfp4_codes((64, 48)), nvfp4_scales((64, 6)), torch.tensor(5e-4)
    fx.group(m + "weight", "nvfp4", (64, 96), {m + "weight": w, m + "weight_scale": s, m + "weight_scale_2": ws2},
             lambda T: ref_modelopt_nvfp4(w, s, ws2, T))
    fx.runtime(m + "input_scale", torch.tensor(0.01))
    return fx


def mxfp4():
    fx = Fixture("mxfp4", {"model_type": "gpt_oss", "quantization_config": {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"], "quant_method": "mxfp4"}})
    e = "model.layers.0.mlp.experts."
    # gate_up [E, 2I, H/32, 16] with H = 96, 2I = 64; down [E, H, I/32, 16] with I = 32.
    gb = codes((2, 64, 3, 16))
    gb[0, 0, 0, :4] = torch.tensor([0x10, 0x86, 0x28, 0x5F], dtype=torch.uint8)  # V8
    gs = torch.randint(110, 140, (2, 64, 3), dtype=torch.uint8, generator=gen)
    gs[0, 0, 0] = 0x7E
    gs[0, 1, :] = torch.tensor([0x00, 0xFE, 0xFF], dtype=torch.uint8)  # e8m0 extremes
    fx.group(e + "gate_up_proj", "mxfp4", (2, 96, 64), {e + "gate_up_proj_blocks": gb, e + "gate_up_proj_scales": gs},
             lambda T: convert_moe_packed_tensors(gb, gs, dtype=T))
    db = codes((2, 96, 1, 16))
    ds = torch.randint(115, 135, (2, 96, 1), dtype=torch.uint8, generator=gen)
    fx.group(e + "down_proj", "mxfp4", (2, 32, 96), {e + "down_proj_blocks": db, e + "down_proj_scales": ds},
             lambda T: convert_moe_packed_tensors(db, ds, dtype=T))
    fx.plain(e + "gate_up_proj_bias", normal((2, 64)).to(torch.bfloat16))
    fx.plain(e + "down_proj_bias", normal((2, 96)).to(torch.bfloat16))
    fx.plain("model.layers.0.mlp.router.weight", normal((2, 96)).to(torch.bfloat16))
    return fx


def main():
    out = sys.argv[1]
    full = "--full" in sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    expected = {}
    for make in (fp8_block, fp8_fbgemm, fp8_ct, fp8_modelopt, modelopt_mixed, mxfp4, nvfp4_modelopt, nvfp4_ct):
        fx = make()
        expected[fx.name] = fx.write(out, full)
    with open(os.path.join(out, "expected.json"), "w") as f:
        f.write(json.dumps(expected, indent=1, sort_keys=True) + "\n")


main()
