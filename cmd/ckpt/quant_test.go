package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/oracle"
)

// TestDequantizedLlamaLoadsInTransformers is issue 6's acceptance: a tiny Llama whose
// Linear weights are FP8 block-quantized as DeepSeek-V3 does (128×128 float32 scales, the
// MLP with partial edge blocks), converted with
//
//	ckpt convert --to tpu --format safetensors --dequantize SRC DST/
//
// loads with transformers' AutoModelForCausalLM.from_pretrained(DST) without any
// quantization config or key problems, every parameter bit-identical to the reference
// dequantization, and runs.
func TestDequantizedLlamaLoadsInTransformers(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	if _, err := o.Python("testdata/quantized/tiny_llama.py", "make", chroot); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "convert", "--to", "tpu", "--format", "safetensors", "--dequantize",
		filepath.Join(host, "src"), filepath.Join(host, "dst")+"/")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "dequantized 14 fp8 tensors to bfloat16; dropped 14 scale tensors; removed the quantization config from config.json") {
		t.Errorf("convert said:\n%s", out)
	}
	res, err := o.Python("testdata/quantized/tiny_llama.py", "check", chroot+"/dst", chroot)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(res)), "\n")
	var got struct {
		Compared int      `json:"compared"`
		Problems []string `json:"problems"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("%v: %s", err, res)
	}
	for _, p := range got.Problems {
		t.Error(p)
	}
	if got.Compared != 21 {
		t.Errorf("compared %d tensors, want all 21", got.Compared)
	}
}

// TestQuantizationFlags checks the CLI's quantization flags and the inspect listing.
func TestQuantizationFlags(t *testing.T) {
	src := "../../testdata/quantized/mxfp4"
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--dequantize=auto"}, "needs --tpu-gen"},
		{[]string{"--tpu-gen", "v7x"}, "--dequantize=auto only"},
		{[]string{"--dequantize=auto", "--tpu-gen", "v9"}, `"v9"`},
		{[]string{"--dequantize=some"}, "all or auto"},
	} {
		args := append([]string{"convert", "--format", "safetensors"}, tc.args...)
		if _, err := run(t, append(args, src, filepath.Join(t.TempDir(), "out"))...); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
		}
	}
	out, err := run(t, "convert", "--format", "safetensors", "--dequantize=auto", "--tpu-gen", "v7x", src, filepath.Join(t.TempDir(), "out"))
	if err != nil || !strings.Contains(out, "dequantized 2 mxfp4 tensors to bfloat16") {
		t.Errorf("auto on v7x: %v\n%s", err, out)
	}
	out, err = run(t, "inspect", src)
	if err != nil || !strings.Contains(out, "2 quantized tensors (mxfp4, from config.json)") ||
		!strings.Contains(out, "model.layers.0.mlp.experts.gate_up_proj  mxfp4   [2 96 64]") {
		t.Errorf("inspect: %v\n%s", err, out)
	}
}
