package quant_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// zeros is a tensor of dtype dt and shape holding zero bytes.
func zeros(dt statedict.DType, shape ...int64) *statedict.Tensor {
	n := int64(dt.Size())
	for _, d := range shape {
		n *= d
	}
	return mem(dt, shape, make([]byte, n))
}

type named = statedict.NamedTensor

const (
	f8   = statedict.Float8E4M3FN
	u8   = statedict.Uint8
	f32  = statedict.Float32
	bf16 = statedict.BFloat16
)

// TestDetect covers each layout's detection — names, schemes, logical shapes, blocks,
// runtime-only tensors — and every way a checkpoint and its config can disagree.
func TestDetect(t *testing.T) {
	const (
		fp8Cfg    = `{"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}`
		fbgemmCfg = `{"quantization_config": {"quant_method": "fbgemm_fp8"}}`
		ctFP8Cfg  = `{"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized",
			"config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [64, 32]}}}}}`
		ctNVCfg = `{"quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}}`
		moFP8   = `{"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}`
		mxCfg   = `{"quantization_config": {"quant_method": "mxfp4"}}`
	)
	type group struct {
		name   string
		scheme quant.Scheme
		shape  []int64
		block  []int64
	}
	tests := []struct {
		name    string
		config  string // config.json; "" for none
		hfq     string // hf_quant_config.json
		tensors []named
		groups  []group
		aux     []string
		err     string // substring of the error, "" for success
		nilPlan bool
	}{{
		name: "plain checkpoint", tensors: []named{{Name: "w.weight", Tensor: zeros(bf16, 4, 4)}}, nilPlan: true,
	}, {
		name: "fp8 block with partial edges and fused experts", config: fp8Cfg,
		tensors: []named{
			{Name: "a.weight", Tensor: zeros(f8, 130, 300)}, {Name: "a.weight_scale_inv", Tensor: zeros(f32, 2, 3)},
			{Name: "e.gate_up_proj", Tensor: zeros(f8, 2, 256, 128)}, {Name: "e.gate_up_proj_scale_inv", Tensor: zeros(f32, 2, 2, 1)},
			{Name: "a.activation_scale", Tensor: zeros(f32)}, {Name: "norm.weight", Tensor: zeros(bf16, 8)},
		},
		groups: []group{{"a.weight", quant.SchemeFP8Block, []int64{130, 300}, []int64{128, 128}},
			{"e.gate_up_proj", quant.SchemeFP8Block, []int64{2, 256, 128}, []int64{128, 128}}},
		aux: []string{"a.activation_scale"},
	}, {
		name: "fp8 null block size is per tensor", config: `{"quantization_config": {"quant_method": "fp8", "weight_block_size": null}}`,
		tensors: []named{{Name: "a.weight", Tensor: zeros(f8, 16, 8)}, {Name: "a.weight_scale_inv", Tensor: zeros(f32, 1)}},
		groups:  []group{{"a.weight", quant.SchemeFP8Tensor, []int64{16, 8}, []int64{16, 8}}},
	}, {
		name: "fp8 default block size", config: `{"quantization_config": {"quant_method": "fp8"}}`,
		tensors: []named{{Name: "a.weight", Tensor: zeros(f8, 256, 8)}, {Name: "a.weight_scale_inv", Tensor: zeros(f32, 2, 1)}},
		groups:  []group{{"a.weight", quant.SchemeFP8Block, []int64{256, 8}, []int64{128, 128}}},
	}, {
		name: "fp8 scale grid not ceil", config: fp8Cfg,
		tensors: []named{{Name: "a.weight", Tensor: zeros(f8, 130, 300)}, {Name: "a.weight_scale_inv", Tensor: zeros(f32, 1, 3)}},
		err:     "scales of shape [1 3]",
	}, {
		name: "fp8 scale without its weight", config: fp8Cfg,
		tensors: []named{{Name: "a.weight", Tensor: zeros(f8, 8, 8)}, {Name: "a.weight_scale_inv", Tensor: zeros(f32, 1, 1)},
			{Name: "b.weight_scale_inv", Tensor: zeros(f32, 1, 1)}},
		err: "needs b.weight, which the checkpoint does not have",
	}, {
		name: "fp8 weight without its scale", config: fp8Cfg,
		tensors: []named{{Name: "a.weight", Tensor: zeros(f8, 8, 8)}, {Name: "a.weight_scale_inv", Tensor: zeros(f32, 1, 1)},
			{Name: "b.weight", Tensor: zeros(f8, 8, 8)}},
		err: "b.weight is float8_e4m3fn but has no scale",
	}, {
		name: "config but nothing quantized", config: fp8Cfg,
		tensors: []named{{Name: "a.weight", Tensor: zeros(bf16, 8, 8)}},
		err:     "no quantized tensors",
	}, {
		name: "scale on a bf16 weight", config: fp8Cfg,
		tensors: []named{{Name: "a.weight", Tensor: zeros(bf16, 8, 8)}, {Name: "a.weight_scale_inv", Tensor: zeros(f32, 1, 1)}},
		err:     "a.weight is bfloat16, not float8",
	}, {
		name: "fbgemm rows and expert columns", config: fbgemmCfg,
		tensors: []named{
			{Name: "q.weight", Tensor: zeros(f8, 6, 10)}, {Name: "q.weight_scale", Tensor: zeros(f32, 6, 1)},
			{Name: "x.gate_up_proj", Tensor: zeros(f8, 2, 4, 12)}, {Name: "x.gate_up_proj_scale", Tensor: zeros(f32, 2, 1, 12)},
			{Name: "x.down_proj", Tensor: zeros(f8, 2, 6, 4)}, {Name: "x.down_proj_scale", Tensor: zeros(f32, 2, 4, 1)},
		},
		groups: []group{{"q.weight", quant.SchemeFP8Channel, []int64{6, 10}, []int64{1, 10}},
			{"x.gate_up_proj", quant.SchemeFP8Column, []int64{2, 4, 12}, []int64{4, 1}},
			{"x.down_proj", quant.SchemeFP8Column, []int64{2, 6, 4}, []int64{6, 1}}},
	}, {
		name: "fbgemm per-row expert scale", config: fbgemmCfg,
		tensors: []named{{Name: "x.down_proj", Tensor: zeros(f8, 2, 6, 4)}, {Name: "x.down_proj_scale", Tensor: zeros(f32, 2, 6, 1)}},
		err:     "fbgemm writes [E, 1, C] or [E, C, 1]",
	}, {
		name: "compressed-tensors strategies by scale shape", config: ctFP8Cfg,
		tensors: []named{
			{Name: "t.weight", Tensor: zeros(f8, 8, 8)}, {Name: "t.weight_scale", Tensor: zeros(f32, 1)},
			{Name: "c.weight", Tensor: zeros(f8, 8, 8)}, {Name: "c.weight_scale", Tensor: zeros(bf16, 8, 1)},
			{Name: "b.weight", Tensor: zeros(f8, 100, 40)}, {Name: "b.weight_scale", Tensor: zeros(bf16, 2, 2)},
			{Name: "t.input_scale", Tensor: zeros(f32, 1)}, {Name: "attn.k_scale", Tensor: zeros(bf16)},
		},
		groups: []group{{"t.weight", quant.SchemeFP8Tensor, []int64{8, 8}, []int64{8, 8}},
			{"c.weight", quant.SchemeFP8Channel, []int64{8, 8}, []int64{1, 8}},
			{"b.weight", quant.SchemeFP8Block, []int64{100, 40}, []int64{64, 32}}},
		aux: []string{"t.input_scale", "attn.k_scale"},
	}, {
		name: "compressed-tensors scale fitting no strategy", config: ctFP8Cfg,
		tensors: []named{{Name: "b.weight", Tensor: zeros(f8, 100, 40)}, {Name: "b.weight_scale", Tensor: zeros(bf16, 3, 3)}},
		err:     "fits no tensor, channel, group or block strategy",
	}, {
		name: "compressed-tensors asymmetric", config: ctFP8Cfg,
		tensors: []named{{Name: "t.weight", Tensor: zeros(f8, 8, 8)}, {Name: "t.weight_scale", Tensor: zeros(f32, 1)},
			{Name: "t.weight_zero_point", Tensor: zeros(f32, 1)}},
		err: "zero point",
	}, {
		name: "compressed-tensors unsupported format", config: `{"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized"}}`,
		tensors: []named{{Name: "t.weight_packed", Tensor: zeros(statedict.Int32, 8, 1)}},
		err:     `unsupported: compressed-tensors format "pack-quantized"`,
	}, {
		name: "compressed-tensors NVFP4 renamed to weight", config: ctNVCfg,
		tensors: []named{{Name: "l.weight_packed", Tensor: zeros(u8, 4, 16)}, {Name: "l.weight_scale", Tensor: zeros(f8, 4, 2)},
			{Name: "l.weight_global_scale", Tensor: zeros(f32, 1)}, {Name: "l.input_global_scale", Tensor: zeros(f32, 1)}},
		groups: []group{{"l.weight", quant.SchemeNVFP4, []int64{4, 32}, []int64{1, 16}}},
		aux:    []string{"l.input_global_scale"},
	}, {
		name: "NVFP4 without a global scale", config: ctNVCfg,
		tensors: []named{{Name: "l.weight_packed", Tensor: zeros(u8, 4, 16)}, {Name: "l.weight_scale", Tensor: zeros(f8, 4, 2)}},
		err:     "needs l.weight_global_scale",
	}, {
		name: "NVFP4 scales along another dimension", config: `{"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}`,
		tensors: []named{{Name: "e.weight", Tensor: zeros(u8, 2, 16, 32)}, {Name: "e.weight_scale", Tensor: zeros(f8, 2, 2, 32)},
			{Name: "e.weight_scale_2", Tensor: zeros(f32)}},
		err: "is the supported layout",
	}, {
		name: "ModelOpt FP8 per tensor, per channel and in blocks", config: moFP8,
		tensors: []named{
			{Name: "q.weight", Tensor: zeros(f8, 8, 8)}, {Name: "q.weight_scale", Tensor: zeros(f32)},
			{Name: "k.weight", Tensor: zeros(f8, 8, 8)}, {Name: "k.weight_scale", Tensor: zeros(f32, 8)},
			{Name: "o.weight", Tensor: zeros(f8, 256, 384)}, {Name: "o.weight_scale", Tensor: zeros(f32, 2, 1, 3, 1)},
			{Name: "q.input_scale", Tensor: zeros(f32)}, {Name: "k.k_scale", Tensor: zeros(f32)},
		},
		groups: []group{{"q.weight", quant.SchemeFP8Tensor, []int64{8, 8}, []int64{8, 8}},
			{"k.weight", quant.SchemeFP8Channel, []int64{8, 8}, []int64{1, 8}},
			{"o.weight", quant.SchemeFP8Block, []int64{256, 384}, []int64{128, 128}}},
		aux: []string{"q.input_scale", "k.k_scale"},
	}, {
		name: "ModelOpt AWQ", config: `{"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4_AWQ"}}`,
		tensors: []named{{Name: "l.weight", Tensor: zeros(u8, 4, 16)}, {Name: "l.weight_scale", Tensor: zeros(f8, 4, 2)},
			{Name: "l.weight_scale_2", Tensor: zeros(f32)}, {Name: "l.pre_quant_scale", Tensor: zeros(bf16, 32)}},
		err: "NVFP4_AWQ",
	}, {
		name: "ModelOpt mixed from hf_quant_config.json alone", config: `{"model_type": "llama"}`,
		hfq: `{"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {"a": {"quant_algo": "FP8"}, "b": {"quant_algo": "NVFP4"}}}}`,
		tensors: []named{{Name: "a.weight", Tensor: zeros(f8, 8, 8)}, {Name: "a.weight_scale", Tensor: zeros(f32)},
			{Name: "b.weight", Tensor: zeros(u8, 4, 16)}, {Name: "b.weight_scale", Tensor: zeros(f8, 4, 2)},
			{Name: "b.weight_scale_2", Tensor: zeros(f32)}},
		groups: []group{{"a.weight", quant.SchemeFP8Tensor, []int64{8, 8}, []int64{8, 8}},
			{"b.weight", quant.SchemeNVFP4, []int64{4, 32}, []int64{1, 16}}},
	}, {
		name:    "ModelOpt mixed naming an absent layer",
		hfq:     `{"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {"a": {"quant_algo": "FP8"}, "gone": {"quant_algo": "FP8"}}}}`,
		tensors: []named{{Name: "a.weight", Tensor: zeros(f8, 8, 8)}, {Name: "a.weight_scale", Tensor: zeros(f32)}},
		err:     "lists quantized layer gone",
	}, {
		name: "ModelOpt mixed with an unlisted layer",
		hfq:  `{"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {"a": {"quant_algo": "FP8"}}}}`,
		tensors: []named{{Name: "a.weight", Tensor: zeros(f8, 8, 8)}, {Name: "a.weight_scale", Tensor: zeros(f32)},
			{Name: "c.weight", Tensor: zeros(f8, 8, 8)}, {Name: "c.weight_scale", Tensor: zeros(f32)}},
		err: "does not list c",
	}, {
		name: "ModelOpt algo disagreeing with the codes", config: moFP8,
		tensors: []named{{Name: "l.weight", Tensor: zeros(u8, 4, 16)}, {Name: "l.weight_scale", Tensor: zeros(f8, 4, 2)},
			{Name: "l.weight_scale_2", Tensor: zeros(f32)}},
		err: "packed FP4 codes where the config says FP8",
	}, {
		name: "gpt-oss MXFP4 transposed", config: mxCfg,
		tensors: []named{{Name: "e.down_proj_blocks", Tensor: zeros(u8, 2, 96, 1, 16)}, {Name: "e.down_proj_scales", Tensor: zeros(u8, 2, 96, 1)},
			{Name: "e.down_proj_bias", Tensor: zeros(bf16, 2, 96)}},
		groups: []group{{"e.down_proj", quant.SchemeMXFP4, []int64{2, 32, 96}, []int64{1, 32}}},
	}, {
		name: "MXFP4 scales without blocks", config: mxCfg,
		tensors: []named{{Name: "e.down_proj_blocks", Tensor: zeros(u8, 2, 96, 1, 16)}, {Name: "e.down_proj_scales", Tensor: zeros(u8, 2, 96, 1)},
			{Name: "e.gate_up_proj_scales", Tensor: zeros(u8, 2, 64, 3)}},
		err: "MXFP4 scales without",
	}, {
		name: "MXFP4 scales of the wrong shape", config: mxCfg,
		tensors: []named{{Name: "e.down_proj_blocks", Tensor: zeros(u8, 2, 96, 1, 16)}, {Name: "e.down_proj_scales", Tensor: zeros(u8, 2, 96)}},
		err:     "MXFP4 scales must be",
	}, {
		name: "unsupported method", config: `{"quantization_config": {"quant_method": "bitsandbytes"}}`,
		tensors: []named{{Name: "a.weight", Tensor: zeros(u8, 8, 8)}},
		err:     `unsupported: quantization method "bitsandbytes"`,
	}, {
		name:    "looks block-FP8 without config",
		tensors: []named{{Name: "a.weight", Tensor: zeros(f8, 8, 8)}, {Name: "a.weight_scale_inv", Tensor: zeros(f32, 1, 1)}},
		err:     "has no quantization config",
	}, {
		name:    "looks NVFP4 without config",
		tensors: []named{{Name: "a.weight_packed", Tensor: zeros(u8, 4, 16)}, {Name: "a.weight_scale", Tensor: zeros(f8, 4, 2)}},
		err:     "has no quantization config",
	}, {
		name:    "looks MXFP4 without config",
		tensors: []named{{Name: "e.x_blocks", Tensor: zeros(u8, 1, 1, 1, 16)}, {Name: "e.x_scales", Tensor: zeros(u8, 1, 1, 1)}},
		err:     "has no quantization config",
	}, {
		name:    "looks like fbgemm experts without config",
		tensors: []named{{Name: "e.down_proj", Tensor: zeros(f8, 1, 4, 4)}, {Name: "e.down_proj_scale", Tensor: zeros(f32, 1, 4, 1)}},
		err:     "has no quantization config",
	}, {
		name:    "a scale-named tensor next to float weights is not quantization",
		tensors: []named{{Name: "clip.weight", Tensor: zeros(bf16, 4, 4)}, {Name: "clip.weight_scale", Tensor: zeros(f32)}, {Name: "logit_scale", Tensor: zeros(f32)}},
		nilPlan: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c, h []byte
			if tc.config != "" {
				c = []byte(tc.config)
			}
			if tc.hfq != "" {
				h = []byte(tc.hfq)
			}
			cfg, err := quant.ParseConfig(c, h)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := quant.Detect(cfg, tc.tensors)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				// Every refusal is the input's: corrupt (tensors and config disagree) or
				// unsupported, never both, never neither.
				corrupt, unsupported := errors.Is(err, ckpterr.ErrCorrupt), errors.Is(err, ckpterr.ErrUnsupported)
				if corrupt == unsupported || strings.Contains(tc.name, "unsupported") && !unsupported {
					t.Errorf("error %v: corrupt %v, unsupported %v", err, corrupt, unsupported)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.nilPlan {
				if plan != nil {
					t.Fatalf("plan %+v for an unquantized checkpoint", plan)
				}
				return
			}
			if len(plan.Groups) != len(tc.groups) {
				t.Fatalf("%d groups, want %d", len(plan.Groups), len(tc.groups))
			}
			for i, g := range plan.Groups {
				w := tc.groups[i]
				if g.Name != w.name || g.Scheme != w.scheme || !slices.Equal(g.Shape, w.shape) || !slices.Equal(g.Block, w.block) {
					t.Errorf("group %d: %s %s %v block %v, want %s %s %v block %v", i, g.Name, g.Scheme, g.Shape, g.Block, w.name, w.scheme, w.shape, w.block)
				}
			}
			if !slices.Equal(plan.Aux, tc.aux) {
				t.Errorf("runtime-only %v, want %v", plan.Aux, tc.aux)
			}
		})
	}
}

// TestParseConfig checks where configurations come from and how they merge.
func TestParseConfig(t *testing.T) {
	tests := []struct {
		name, config, hfq string
		method, algo      string
		files             []string
		nilConfig         bool
		err               string
	}{
		{name: "none", config: `{"model_type": "llama"}`, nilConfig: true},
		{name: "compression_config of old compressed-tensors", config: `{"compression_config": {"config_groups": {"g": {}}}}`,
			method: "compressed-tensors", files: []string{"config.json"}},
		{name: "ModelOpt in both files", config: `{"quantization_config": {"quant_method": "modelopt", "quant_algo": "fp8"}}`,
			hfq: `{"quantization": {"quant_algo": "NVFP4"}}`, method: "modelopt", algo: "NVFP4", files: []string{"config.json", "hf_quant_config.json"}},
		{name: "hf_quant_config.json against another method", config: `{"quantization_config": {"quant_method": "fp8"}}`,
			hfq: `{"quantization": {"quant_algo": "NVFP4"}}`, err: "ModelOpt's"},
		{name: "no quant_method", config: `{"quantization_config": {"bits": 4}}`, err: "no quant_method"},
		{name: "bad block size", config: `{"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}}`, err: "weight_block_size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h []byte
			if tc.hfq != "" {
				h = []byte(tc.hfq)
			}
			cfg, err := quant.ParseConfig([]byte(tc.config), h)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case tc.nilConfig:
				if cfg != nil {
					t.Fatalf("config %+v", cfg)
				}
			case cfg.Method != tc.method || cfg.Algo != tc.algo || !slices.Equal(cfg.Files, tc.files):
				t.Fatalf("%q %q %v, want %q %q %v", cfg.Method, cfg.Algo, cfg.Files, tc.method, tc.algo, tc.files)
			}
		})
	}
}

// TestStripConfig checks that only the quantization config leaves config.json.
func TestStripConfig(t *testing.T) {
	out, err := quant.StripConfig([]byte(`{"vocab_size": 8, "quantization_config": {"quant_method": "fp8"}, "architectures": ["LlamaForCausalLM"], "rope_theta": 500000.0}`))
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n  \"rope_theta\": 500000.0,\n  \"vocab_size\": 8\n}\n"
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
}

// TestNativeOn checks the keep-or-dequantize rule of --dequantize=auto, as the runtime
// catalogue decides it: float8_e4m3fn on TPU7x only, float8_e5m2 from v5e on (the MXU pairs
// of jax's is_matmul_supported), MXFP4 nowhere.
func TestNativeOn(t *testing.T) {
	detect1 := func(cfg string, tensors []named) *quant.Group {
		c, err := quant.ParseConfig([]byte(cfg), nil)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := quant.Detect(c, tensors)
		if err != nil {
			t.Fatal(err)
		}
		return plan.Groups[0]
	}
	fp8 := `{"quantization_config": {"quant_method": "fp8", "weight_block_size": null}}`
	e4m3 := detect1(fp8, []named{{Name: "a.weight", Tensor: zeros(f8, 4, 4)}, {Name: "a.weight_scale_inv", Tensor: zeros(f32, 1)}})
	e5m2 := detect1(fp8, []named{{Name: "a.weight", Tensor: zeros(statedict.Float8E5M2, 4, 4)}, {Name: "a.weight_scale_inv", Tensor: zeros(f32, 1)}})
	mx := detect1(`{"quantization_config": {"quant_method": "mxfp4"}}`,
		[]named{{Name: "x_blocks", Tensor: zeros(u8, 1, 1, 1, 16)}, {Name: "x_scales", Tensor: zeros(u8, 1, 1, 1)}})
	for _, name := range []string{"v4", "v5e", "v5p", "v6e", "tpu7x"} {
		gen, err := runtime.LookupGeneration(name)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := e4m3.NativeOn(gen), name == "tpu7x"; got != want {
			t.Errorf("float8_e4m3fn native on %s: %v", gen, got)
		}
		if got, want := e5m2.NativeOn(gen), name != "v4"; got != want {
			t.Errorf("float8_e5m2 native on %s: %v", gen, got)
		}
		if mx.NativeOn(gen) {
			t.Errorf("MXFP4 native on %s", gen)
		}
	}
	if e4m3.NativeOn(nil) {
		t.Error("native on no generation")
	}
}
