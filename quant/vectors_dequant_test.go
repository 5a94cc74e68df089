package quant_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
)

// mem is an in-memory tensor of dtype dt and shape over data.
func mem(dt statedict.DType, shape []int64, data []byte) *statedict.Tensor {
	return &statedict.Tensor{DType: dt, Shape: shape, Strides: statedict.ContiguousStrides(shape),
		Storage: statedict.NewMappedStorage("mem", "cuda:0", dt, data)}
}

// f32s is the little-endian bytes of float32 bit patterns.
func f32s(bits ...uint32) []byte {
	b := make([]byte, 4*len(bits))
	for i, u := range bits {
		binary.LittleEndian.PutUint32(b[4*i:], u)
	}
	return b
}

// dequantBits dequantizes the only group detected in tensors to dt and returns
// the output elements' bits.
func dequantBits(t *testing.T, cfgJSON, hfq string, tensors []statedict.NamedTensor, dt statedict.DType) []uint32 {
	t.Helper()
	var hq []byte
	if hfq != "" {
		hq = []byte(hfq)
	}
	cfg, err := quant.ParseConfig([]byte(cfgJSON), hq)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := quant.Detect(cfg, tensors)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Groups) != 1 {
		t.Fatalf("%d groups", len(plan.Groups))
	}
	out, err := plan.Groups[0].Dequantize(dt)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := out.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	es := dt.Size()
	got := make([]uint32, buf.Len()/es)
	for i := range got {
		if es == 2 {
			got[i] = uint32(binary.LittleEndian.Uint16(buf.Bytes()[2*i:]))
		} else {
			got[i] = binary.LittleEndian.Uint32(buf.Bytes()[4*i:])
		}
	}
	return got
}

// TestWorkedVectors checks quant.md's torch-verified vectors V3–V8: each recipe's
// evaluation order shows in the last bits.
func TestWorkedVectors(t *testing.T) {
	const (
		fp8Block1x1 = `{"quantization_config": {"quant_method": "fp8", "weight_block_size": [1, 1]}}`
		modelOptFP8 = `{"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}`
		modelOptNV  = `{"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}`
		ctNV        = `{"quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}}`
		mxfp4       = `{"quantization_config": {"quant_method": "mxfp4"}}`
	)
	nvCodes := func(first byte) []byte { return []byte{first, 0, 0, 0, 0, 0, 0, 0} }
	mxBlocks := append([]byte{0x10, 0x86, 0x28, 0x5F}, make([]byte, 12)...)
	tests := []struct {
		name    string
		config  string
		tensors []statedict.NamedTensor
		dtype   statedict.DType
		want    []uint32 // a prefix of the output bits
	}{{
		// V3: f32 product, then bf16 — never one rounding of the exact product.
		name: "V3 block FP8 double rounding", config: fp8Block1x1, dtype: statedict.BFloat16,
		tensors: []statedict.NamedTensor{
			{Name: "l.weight", Tensor: mem(statedict.Float8E4M3FN, []int64{1, 3}, []byte{0x6A, 0x21, 0x11})},
			{Name: "l.weight_scale_inv", Tensor: mem(statedict.Float32, []int64{1, 3}, f32s(0x3B60CCCD, 0x3BEF1C72, 0x3AE9C71C))},
		},
		want: []uint32{0x3E8C, 0x3A86, 0x3884},
	}, {
		name: "V3 block FP8 float32", config: fp8Block1x1, dtype: statedict.Float32,
		tensors: []statedict.NamedTensor{
			{Name: "l.weight", Tensor: mem(statedict.Float8E4M3FN, []int64{1, 1}, []byte{0x6A})},
			{Name: "l.weight_scale_inv", Tensor: mem(statedict.Float32, []int64{1, 1}, f32s(0x3B60CCCD))},
		},
		want: []uint32{0x3E8C8000},
	}, {
		// V4: ModelOpt rounds the scale to bf16 first.
		name: "V4 ModelOpt FP8", config: modelOptFP8, dtype: statedict.BFloat16,
		tensors: []statedict.NamedTensor{
			{Name: "l.weight", Tensor: mem(statedict.Float8E4M3FN, []int64{1, 1}, []byte{0x1F})},
			{Name: "l.weight_scale", Tensor: mem(statedict.Float32, []int64{}, f32s(0x3BC3880A))},
		},
		want: []uint32{0x3A38},
	}, {
		name: "V4 block FP8 same inputs", config: fp8Block1x1, dtype: statedict.BFloat16,
		tensors: []statedict.NamedTensor{
			{Name: "l.weight", Tensor: mem(statedict.Float8E4M3FN, []int64{1, 1}, []byte{0x1F})},
			{Name: "l.weight_scale_inv", Tensor: mem(statedict.Float32, []int64{1, 1}, f32s(0x3BC3880A))},
		},
		want: []uint32{0x3A37},
	}, {
		// V5: a multiplier (ModelOpt) and the reciprocal divisor (compressed-tensors) differ.
		name: "V5 ModelOpt NVFP4", config: modelOptNV, dtype: statedict.BFloat16,
		tensors: []statedict.NamedTensor{
			{Name: "l.weight", Tensor: mem(statedict.Uint8, []int64{1, 8}, nvCodes(0x03))},
			{Name: "l.weight_scale", Tensor: mem(statedict.Float8E4M3FN, []int64{1, 1}, []byte{0x57})},
			{Name: "l.weight_scale_2", Tensor: mem(statedict.Float32, []int64{}, f32s(0x3D83E93E))},
		},
		want: []uint32{0x3FB9, 0x0000},
	}, {
		name: "V5 compressed-tensors NVFP4", config: ctNV, dtype: statedict.BFloat16,
		tensors: []statedict.NamedTensor{
			{Name: "l.weight_packed", Tensor: mem(statedict.Uint8, []int64{1, 8}, nvCodes(0x03))},
			{Name: "l.weight_scale", Tensor: mem(statedict.Float8E4M3FN, []int64{1, 1}, []byte{0x57})},
			{Name: "l.weight_global_scale", Tensor: mem(statedict.Float32, []int64{1}, f32s(0x417868E3))},
		},
		want: []uint32{0x3FBA, 0x0000},
	}, {
		// V6: ModelOpt NVFP4, nibbles 3 and 0xD; nibble 8 elsewhere is +0.
		name: "V6 ModelOpt NVFP4", config: modelOptNV, dtype: statedict.BFloat16,
		tensors: []statedict.NamedTensor{
			{Name: "l.weight", Tensor: mem(statedict.Uint8, []int64{1, 8}, nvCodes(0xD3))},
			{Name: "l.weight_scale", Tensor: mem(statedict.Float8E4M3FN, []int64{1, 1}, []byte{0x4C})},
			{Name: "l.weight_scale_2", Tensor: mem(statedict.Float32, []int64{}, f32s(0x3AA137F4))},
		},
		want: []uint32{0x3C35, 0xBCB5},
	}, {
		name: "V6 ModelOpt NVFP4 float32", config: modelOptNV, dtype: statedict.Float32,
		tensors: []statedict.NamedTensor{
			{Name: "l.weight", Tensor: mem(statedict.Uint8, []int64{1, 8}, []byte{0xD3, 0x88, 0, 0, 0, 0, 0, 0})},
			{Name: "l.weight_scale", Tensor: mem(statedict.Float8E4M3FN, []int64{1, 1}, []byte{0x4C})},
			{Name: "l.weight_scale_2", Tensor: mem(statedict.Float32, []int64{}, f32s(0x3AA137F4))},
		},
		want: []uint32{0x3C355EF2, 0xBCB55EF2, 0, 0},
	}, {
		// V7: compressed-tensors divides in float32 with a [1]-shaped global scale.
		name: "V7 compressed-tensors NVFP4", config: ctNV, dtype: statedict.BFloat16,
		tensors: []statedict.NamedTensor{
			{Name: "l.weight_packed", Tensor: mem(statedict.Uint8, []int64{1, 8}, []byte{0xD3, 0x88, 0, 0, 0, 0, 0, 0})},
			{Name: "l.weight_scale", Tensor: mem(statedict.Float8E4M3FN, []int64{1, 1}, []byte{0x4C})},
			{Name: "l.weight_global_scale", Tensor: mem(statedict.Float32, []int64{1}, f32s(0x44C5A5A6))},
		},
		want: []uint32{0x3BBB, 0xBC3B, 0x8000, 0x8000},
	}, {
		// V8: gpt-oss MXFP4 through convert_moe_packed_tensors: low nibble first,
		// exact ldexp, [E, in, out] with one output feature here.
		name: "V8 gpt-oss MXFP4", config: mxfp4, dtype: statedict.BFloat16,
		tensors: []statedict.NamedTensor{
			{Name: "e.gate_up_proj_blocks", Tensor: mem(statedict.Uint8, []int64{1, 1, 1, 16}, mxBlocks)},
			{Name: "e.gate_up_proj_scales", Tensor: mem(statedict.Uint8, []int64{1, 1, 1}, []byte{0x7E})},
		},
		want: []uint32{0x0000, 0x3E80, 0x4000, 0x8000, 0x8000, 0x3F00, 0xC040, 0x3FC0},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := dequantBits(t, tc.config, "", tc.tensors, tc.dtype)
			if len(got) < len(tc.want) {
				t.Fatalf("%d elements", len(got))
			}
			for i, w := range tc.want {
				if got[i] != w {
					t.Errorf("element %d = %#x, want %#x", i, got[i], w)
				}
			}
		})
	}
}

// TestNVFP4ScalarGlobalScale checks P7: with a 0-dim weight_global_scale the
// compressed-tensors arithmetic stays in bfloat16 (q = bf16 0x3B79 in V7).
func TestNVFP4ScalarGlobalScale(t *testing.T) {
	tensors := []statedict.NamedTensor{
		{Name: "l.weight_packed", Tensor: mem(statedict.Uint8, []int64{1, 8}, []byte{0x02, 0, 0, 0, 0, 0, 0, 0})},
		{Name: "l.weight_scale", Tensor: mem(statedict.Float8E4M3FN, []int64{1, 1}, []byte{0x4C})},
		{Name: "l.weight_global_scale", Tensor: mem(statedict.Float32, []int64{}, f32s(0x44C5A5A6))},
	}
	got := dequantBits(t, `{"quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}}`,
		"", tensors, statedict.Float32)
	// Nibble 2 is 1.0, so the output is q itself.
	if got[0] != 0x3B790000 {
		t.Errorf("q = %#x, want 0x3B790000", got[0])
	}
	if math.Float32frombits(got[1]) != 0 {
		t.Errorf("nibble 0 gave %#x", got[1])
	}
}
