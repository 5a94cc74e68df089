package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sparseSafetensors writes a safetensors file whose header lists bfloat16 tensors of the
// given shapes and whose data is a hole: the shapes of a 140 GB model in a few kilobytes of
// disk.
func sparseSafetensors(t *testing.T, path string, names []string, shapes [][]int64) {
	t.Helper()
	var b strings.Builder
	b.WriteString("{")
	off := int64(0)
	for i, name := range names {
		n := int64(2)
		for _, d := range shapes[i] {
			n *= d
		}
		if i > 0 {
			b.WriteString(",")
		}
		sh, _ := json.Marshal(shapes[i])
		fmt.Fprintf(&b, `%q:{"dtype":"BF16","shape":%s,"data_offsets":[%d,%d]}`, name, sh, off, off+n)
		off += n
	}
	b.WriteString("}")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	binary.Write(f, binary.LittleEndian, uint64(b.Len()))
	f.WriteString(b.String())
	if err := f.Truncate(int64(8+b.Len()) + off); err != nil {
		t.Fatal(err)
	}
}

// llamaShapes lists a Llama-family state dict (Hugging Face names) from config.json values.
func llamaShapes(vocab, hidden, inter, layers, heads, kv, headDim int64, qkNorm bool) (names []string, shapes [][]int64) {
	add := func(n string, s ...int64) { names = append(names, n); shapes = append(shapes, s) }
	add("model.embed_tokens.weight", vocab, hidden)
	for i := range layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"self_attn.q_proj.weight", heads*headDim, hidden)
		add(p+"self_attn.k_proj.weight", kv*headDim, hidden)
		add(p+"self_attn.v_proj.weight", kv*headDim, hidden)
		add(p+"self_attn.o_proj.weight", hidden, heads*headDim)
		if qkNorm {
			add(p+"self_attn.q_norm.weight", headDim)
			add(p+"self_attn.k_norm.weight", headDim)
		}
		add(p+"mlp.gate_proj.weight", inter, hidden)
		add(p+"mlp.up_proj.weight", inter, hidden)
		add(p+"mlp.down_proj.weight", hidden, inter)
		add(p+"input_layernorm.weight", hidden)
		add(p+"post_attention_layernorm.weight", hidden)
	}
	add("model.norm.weight", hidden)
	add("lm_head.weight", vocab, hidden)
	return names, shapes
}

// TestPlanCommand runs ckpt plan on shapes-only Qwen3-8B and Llama-3-70B checkpoints. The
// expected per-device bytes are the hand-computed rows of runtime's
// TestPlanMemoryLlamaFamily (its comment derives them).
func TestPlanCommand(t *testing.T) {
	dir := t.TempDir()
	qwen := filepath.Join(dir, "qwen3-8b.safetensors")
	n, s := llamaShapes(151936, 4096, 12288, 36, 32, 8, 128, true)
	sparseSafetensors(t, qwen, n, s)
	llama := filepath.Join(dir, "llama-3-70b.safetensors")
	n, s = llamaShapes(128256, 8192, 28672, 80, 64, 8, 128, false)
	sparseSafetensors(t, llama, n, s)
	for _, tc := range []struct {
		src, topology string
		raw, padded   int64
		fits          bool
	}{
		{qwen, "v5e-8", 2_047_683_840, 2_047_903_744, true},
		{qwen, "v6e-8", 2_047_683_840, 2_047_903_744, true},
		{qwen, "v5p-32", 1_023_841_920, 1_024_100_352, true},
		{qwen, "tpu7x-8", 2_047_683_840, 2_047_903_744, true},
		{llama, "v5e-8", 17_638_426_624, 17_638_426_624, false},
		{llama, "v6e-8", 17_638_426_624, 17_638_426_624, true},
		{llama, "v5p-32", 8_819_213_312, 8_819_378_176, true},
		{llama, "tpu7x-8", 17_638_426_624, 17_638_426_624, true},
	} {
		t.Run(filepath.Base(tc.src)+" on "+tc.topology, func(t *testing.T) {
			out, err := run(t, "plan", "--json", "--topology", tc.topology, tc.src)
			if tc.fits && err != nil || !tc.fits && exitStatus(err) != exitNoFit {
				t.Fatalf("exit: %v", err)
			}
			var rep struct {
				Fullest int `json:"fullest"`
				Fits    bool
				Devices []struct {
					Weights struct{ Raw, Padded int64 }
				}
				Suggestions []struct {
					Topology, Mesh string
					Fits           bool
				}
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			if w := rep.Devices[rep.Fullest].Weights; w.Raw != tc.raw || w.Padded != tc.padded || rep.Fits != tc.fits {
				t.Errorf("weights %+v, fits %v; want %d raw, %d padded, fits %v", w, rep.Fits, tc.raw, tc.padded, tc.fits)
			}
			if !tc.fits && (len(rep.Suggestions) == 0 || rep.Suggestions[0].Topology != "v5litepod-16" || !rep.Suggestions[0].Fits) {
				t.Errorf("suggestions %+v", rep.Suggestions)
			}
		})
	}
	out, err := run(t, "plan", "--topology", "v5e-8", llama)
	if err == nil || !strings.Contains(out, "DOES NOT FIT") || !strings.Contains(out, "--topology v5litepod-16 --mesh fsdp=16") {
		t.Errorf("human-readable plan (%v):\n%s", err, out)
	}
}

func TestPlanCommandErrors(t *testing.T) {
	src := "../../testdata/torch/training_cuda.pt"
	for _, tc := range []struct {
		args []string
		why  string
	}{
		{[]string{"plan", src}, "topology"},
		{[]string{"plan", "--topology", "v5p-9", src}, "whole number of chips"},
		{[]string{"plan", "--topology", "v5e-8", "--mesh", "fsdp=4", src}, "8 devices"},
		{[]string{"plan", "--topology", "v5e-8", "--mesh", "pp=8", src}, "pipeline"},
		{[]string{"plan", "--topology", "v5e-8", "--dtype", "int8", src}, "--dtype"},
		{[]string{"plan", "--topology", "v5e-8", "--plan", "missing.json", src}, "missing.json"},
		{[]string{"plan", "--topology", "v5e-8", "missing.pt"}, "missing.pt"},
		{[]string{"devices", "--topology", "v9-8"}, "generation"},
	} {
		if _, err := run(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%v: %v, want an error about %q", tc.args, err, tc.why)
		}
	}
}

// TestPlanTrainingCheckpoint: optimizer moments follow their parameters (mapped by shape
// through two parameter groups), step stays on the host, RNG states are replicated.
func TestPlanTrainingCheckpoint(t *testing.T) {
	out, err := run(t, "plan", "--json", "--topology", "v5e-4", "--mesh", "fsdp=2,tp=2", "../../testdata/torch/training_cuda.pt")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Tensors []struct {
			Name, Role, Param string
			Host              bool
			Sharding          struct{ Placements []string }
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, x := range rep.Tensors {
		got[x.Name] = fmt.Sprint(x.Role, " ", x.Param, " ", x.Host, " ", x.Sharding.Placements)
	}
	for name, want := range map[string]string{
		"model.fc1.weight":          "weight  false [Shard(dim=0) Replicate()]",
		"optimizer.state.1.exp_avg": "optimizer model.fc2.weight false [Shard(dim=0) Replicate()]",
		"optimizer.state.2.exp_avg": "optimizer model.fc1.bias false [Shard(dim=0) Replicate()]",
		"optimizer.state.0.step":    "optimizer model.fc1.weight true [Replicate() Replicate()]",
		"rng.cpu":                   "other  false [Replicate() Replicate()]",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
}

// TestPlanTrainerFolder: a Trainer checkpoint-N folder's optimizer.pt counts in the memory
// plan, each moment with the parameter the Trainer's grouping ties it to (model.safetensors
// lists the weights by name; config.json says the order the model registers them in).
func TestPlanTrainerFolder(t *testing.T) {
	out, err := run(t, "plan", "--json", "--topology", "v5p-8", "../../testdata/ecosystem/folders/trainer/checkpoint-2")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Tensors []struct{ Name, Role, Param string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	moments := 0
	for _, x := range rep.Tensors {
		got[x.Name] = x.Role + " " + x.Param
		if x.Role == "optimizer" && x.Param != "" {
			moments++
		}
	}
	for name, want := range map[string]string{
		"optimizer.state.1.exp_avg":     "optimizer model.model.layers.0.self_attn.q_proj.weight",
		"optimizer.state.15.exp_avg_sq": "optimizer model.lm_head.weight",
		"optimizer.state.16.exp_avg":    "optimizer model.model.layers.0.input_layernorm.weight",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	if moments != 3*21 {
		t.Errorf("%d optimizer tensors tied to parameters, want 63", moments)
	}
}

func TestDevicesCommand(t *testing.T) {
	out, err := run(t, "devices", "--json", "--topology", "tpu7x-16")
	if err != nil {
		t.Fatal(err)
	}
	var rep devicesReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Chips != 8 || rep.Devices != 16 || rep.Hosts != 2 || rep.HBMPerDevice != 96<<30 || len(rep.HostDevices) != 2 || rep.HostDevices[1].First != 8 ||
		!strings.Contains(strings.Join(rep.NativeWeights, " "), "float8_e4m3fn") {
		t.Errorf("%+v", rep)
	}
	out, err = run(t, "devices", "--topology", "v5litepod-16")
	if err != nil || !strings.Contains(out, "hosts            4 (4 devices each)") || !strings.Contains(out, "16.0 GiB") {
		t.Errorf("%v\n%s", err, out)
	}
}
