package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/internal/tinymodel"
	"github.com/ckpt-dev/ckpt/verify/forward"
)

// readF32 reads a float32 tensor's values from a checkpoint file.
func readF32(t *testing.T, path, name string) ([]float32, []int64) {
	t.Helper()
	ck, err := formats.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	ts, err := ck.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	for _, nt := range ts {
		if nt.Name == name {
			var b strings.Builder
			if _, err := nt.Tensor.WriteTo(&b); err != nil {
				t.Fatal(err)
			}
			raw := []byte(b.String())
			v := make([]float32, len(raw)/4)
			for i := range v {
				v[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
			}
			return v, nt.Tensor.Shape
		}
	}
	t.Fatalf("%s: no tensor %s", path, name)
	return nil, nil
}

// TestForwardMatchesTransformers runs `ckpt forward --out` on tiny models written by
// testdata/forward/gen.py (a torch.save file, a Hugging Face folder with MXFP4 experts) and
// compares the written logits with transformers' float32 logits: within 1e-4.
func TestForwardMatchesTransformers(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	out, err := o.Python("testdata/forward/gen.py", chroot, "llama_dynamic_pt", "qwen3_moe", "gpt_oss_mxfp4")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name   string `json:"name"`
		Path   string `json:"path"`
		Tokens []int  `json:"tokens"`
	}
	if err := json.Unmarshal(out, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			ids := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(c.Tokens)), ","), "[]")
			dst := filepath.Join(t.TempDir(), "logits.safetensors")
			stdout, err := run(t, "forward", filepath.Join(host, c.Path), "--tokens", ids, "--out", dst, "--json")
			if err != nil {
				t.Fatal(err)
			}
			var rep forwardReport
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatal(err)
			}
			got, shape := readF32(t, dst, "logits")
			want, wshape := readF32(t, filepath.Join(host, c.Name+".logits.safetensors"), "logits")
			if fmt.Sprint(shape) != fmt.Sprint(wshape) || len(got) != len(want) {
				t.Fatalf("logits shape %v, transformers %v", shape, wshape)
			}
			var d float64
			for i := range got {
				d = max(d, math.Abs(float64(got[i])-float64(want[i])))
			}
			t.Logf("%s: max abs error %.3g", c.Name, d)
			if d > 1e-4 || math.IsNaN(d) {
				t.Errorf("max abs error %g > 1e-4", d)
			}
			if len(rep.Top1) != len(c.Tokens) || rep.Vocab != int(shape[2]) {
				t.Errorf("report %+v", rep)
			}
			// The output exists: a second run needs --force.
			if _, err := run(t, "forward", filepath.Join(host, c.Path), "--tokens", ids, "--out", dst); err == nil {
				t.Error("forward replaced an existing --out without --force")
			}
		})
	}
}

func TestForwardErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"model_type": "bert", "architectures": ["BertModel"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"forward", "../../testdata/torch/training_cuda.pt", "--tokens", "1", "--config", cfg}, "not supported by the forward pass (supported: " + strings.Join(forward.Supported(), ", ") + ")"},
		{[]string{"forward", "../../testdata/torch/training_cuda.pt"}, "ckpt forward needs --tokens or --prompt-ids"},
		{[]string{"forward", "../../testdata/torch/training_cuda.pt", "--tokens", "1", "--prompt-ids", cfg}, "exclude each other"},
		{[]string{"forward", "../../testdata/torch/training_cuda.pt", "--tokens", "1,x"}, `"x" is not a token id`},
		{[]string{"forward", "../../testdata/torch/training_cuda.pt", "--tokens", "1", "--precision", "fp8"}, "float32 or tpu"},
		{[]string{"forward", "../../testdata/torch/training_cuda.pt", "--tokens", "1", "--keep-fp8"}, "--precision tpu only"},
	} {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestForwardAfterConvert runs the forward pass on what ckpt convert writes from a
// generated model — a DCP directory, a torch.save file, a Hugging Face folder with MXFP4
// experts dequantized to bfloat16 — and checks it computes what the source computes: the
// same logits in float32 (the weights are the same numbers), and for a bfloat16 cast nearly
// the same logits in TPU precision (which rounds the float32 source's matrices the same way).
func TestForwardAfterConvert(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	if _, err := o.Python("testdata/forward/gen.py", chroot, "llama_gqa", "gpt_oss_mxfp4"); err != nil {
		t.Fatal(err)
	}
	ids := "1,5,9,2,7,3,11,4,8,6,10,12"
	logits := func(t *testing.T, path string, extra ...string) []float32 {
		t.Helper()
		dst := filepath.Join(t.TempDir(), "logits.safetensors")
		if _, err := run(t, append([]string{"forward", path, "--tokens", ids, "--out", dst}, extra...)...); err != nil {
			t.Fatal(err)
		}
		v, _ := readF32(t, dst, "logits")
		return v
	}
	maxDiff := func(a, b []float32) float64 {
		var d float64
		for i := range a {
			d = max(d, math.Abs(float64(a[i])-float64(b[i])))
		}
		return d
	}
	out := t.TempDir()
	for _, tc := range []struct {
		name, src string
		convert   []string
		precision string
		tol       float64
	}{
		{"dcp", "llama_gqa", []string{"--format", "dcp"}, "float32", 1e-6},
		{"torch", "llama_gqa", []string{"--format", "torch"}, "float32", 1e-6},
		// The cast also rounds the norms and embeddings, which TPU precision keeps in float32 for
		// the source; bfloat16 rounding amplifies that to differences of about 1%.
		{"bf16-safetensors", "llama_gqa", []string{"--format", "safetensors", "--dtype", "bfloat16"}, "tpu", 0.05},
		{"mxfp4-dequantized", "gpt_oss_mxfp4", []string{"--format", "safetensors", "--dequantize=all"}, "float32", 1e-6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := filepath.Join(host, tc.src)
			dst := filepath.Join(out, tc.name)
			if tc.convert[1] == "torch" {
				dst += ".pt"
			}
			if _, err := run(t, append(append([]string{"convert", "--to", "tpu"}, tc.convert...), src, dst)...); err != nil {
				t.Fatal(err)
			}
			var cfg []string // a folder output carries its own config.json (rewritten by convert)
			if _, err := os.Stat(filepath.Join(dst, "config.json")); err != nil {
				cfg = []string{"--config", filepath.Join(src, "config.json")}
			}
			want := logits(t, src, "--precision", tc.precision)
			got := logits(t, dst, append([]string{"--precision", tc.precision}, cfg...)...)
			d := maxDiff(got, want)
			t.Logf("%s: max abs difference %.3g", tc.name, d)
			if d > tc.tol || len(got) != len(want) {
				t.Errorf("converted model's logits differ by %g (tolerance %g)", d, tc.tol)
			}
		})
	}
}

// TestForwardLongPromptBoundedMemory runs `ckpt forward --prompt-ids` on 3,000 tokens of a
// small model with a 32,000-token vocabulary: the logits [T, vocab] would be 384 MB, but
// the command reduces them to each position's top-1 a block of positions at a time, and
// the Go heap stays under 200 MiB.
func TestForwardLongPromptBoundedMemory(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model")
	if err := tinymodel.WriteLlama(model, tinymodel.Sizes{Vocab: 32000, Hidden: 32, Inter: 48, Layers: 1, Heads: 2, KVHeads: 1, MaxPositions: 64}); err != nil {
		t.Fatal(err)
	}
	var ids strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&ids, "%d\n", (i*7919)%32000)
	}
	prompt := filepath.Join(dir, "prompt.txt")
	if err := os.WriteFile(prompt, []byte(ids.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var peak uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	out, err := run(t, "forward", model, "--prompt-ids", prompt, "--json")
	close(done)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	var rep forwardReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Top1) != 3000 {
		t.Fatalf("%v: %d top-1 tokens", err, len(rep.Top1))
	}
	t.Logf("3000 tokens × vocab 32000: peak Go heap %.0f MiB", float64(peak)/(1<<20))
	if peak > 200<<20 {
		t.Errorf("peak heap %.0f MiB: the logits were held whole", float64(peak)/(1<<20))
	}
}
