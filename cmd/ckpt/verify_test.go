package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify"
)

// changeElement changes one element of the named tensor of the checkpoint file at path
// (its bytes found by content): the high byte of the element at byte offset at of the
// tensor's bytes is flipped.
func changeElement(t *testing.T, path, name string, at int) {
	t.Helper()
	ck, err := formats.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	tensor, err := ck.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := tensor.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	es := tensor.DType.Size()
	ck.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, buf.Bytes())
	if i < 0 || bytes.Contains(b[i+1:], buf.Bytes()) {
		t.Fatalf("%s: the bytes of %s are not found once", path, name)
	}
	b[i+at*es+es-1] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyCommand converts with the CLI and verifies: parity exits 0; one changed
// element exits 5 naming the tensor, the element and both values, in text and JSON.
func TestVerifyCommand(t *testing.T) {
	src := "../../testdata/hf/mistral_sharded"
	dst := filepath.Join(t.TempDir(), "out.safetensors")
	if _, err := run(t, "convert", "--to", "tpu", "--dtype", "bfloat16", src, dst); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "verify", src, dst)
	if err != nil || !strings.Contains(out, "PARITY") {
		t.Fatalf("%v\n%s", err, out)
	}
	const victim = "model.layers.0.mlp.down_proj.weight"
	changeElement(t, dst, victim, 7)
	out, err = run(t, "verify", src, dst)
	if exitStatus(err) != exitCorrupt || !strings.Contains(err.Error(), victim) || !strings.Contains(out, victim+": 1 of ") || !strings.Contains(out, "first at [0 7]") {
		t.Fatalf("exit %d: %v\n%s", exitStatus(err), err, out)
	}
	// The report is the first JSON value printed (the error object follows it).
	out, err = run(t, "verify", "--json", src, dst)
	var rep verifyReport
	if jerr := json.NewDecoder(strings.NewReader(out)).Decode(&rep); jerr != nil || exitStatus(err) != exitCorrupt || rep.OK {
		t.Fatalf("%v %v\n%s", err, jerr, out)
	}
	if p := rep.Tensors.Problems; len(p) != 1 || p[0].Tensor != victim || p[0].Kind != "value" || p[0].Flat != 7 || p[0].Want == p[0].Got {
		t.Fatalf("problems %+v", p)
	}
}

// TestVerifyLibraryConversion: a conversion made through the library — convert.Run with
// DType bfloat16 and no command line — records what it did in its manifest, and `ckpt
// verify` holds the output to it: parity passes, and one changed element fails naming the
// cast it checked, without any flag re-parsed.
func TestVerifyLibraryConversion(t *testing.T) {
	src := "../../testdata/hf/mistral_sharded"
	dst := filepath.Join(t.TempDir(), "out.safetensors")
	opts := convert.DefaultOptions(src, dst)
	opts.Plan.DType = statedict.BFloat16
	if _, err := convert.Run(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Read(context.Background(), dst+"."+manifest.Name)
	if err != nil {
		t.Fatal(err)
	}
	if m.Args != nil || m.Conversion == nil || m.Conversion.DType != "bfloat16" || m.Conversion.Target.Device != "tpu" {
		t.Fatalf("manifest args %q, conversion %+v", m.Args, m.Conversion)
	}
	out, err := run(t, "verify", src, dst)
	if err != nil || !strings.Contains(out, "conversion: --dtype bfloat16") {
		t.Fatalf("%v\n%s", err, out)
	}
	const victim = "model.layers.1.self_attn.o_proj.weight"
	changeElement(t, dst, victim, 3)
	out, err = run(t, "verify", src, dst)
	if exitStatus(err) != exitCorrupt || !strings.Contains(out, victim+": 1 of ") || !strings.Contains(out, "[cast float32 → bfloat16]") {
		t.Fatalf("exit %d: %v\n%s", exitStatus(err), err, out)
	}
}

// TestVerifyUsage: flags that need --forward, unknown TPU generations and contradictory
// flags are usage errors.
func TestVerifyUsage(t *testing.T) {
	src := "../../testdata/torch/training_cuda.pt"
	for _, args := range [][]string{
		{"verify", src},
		{"verify", "--tokens", "1,2", src, src},
		{"verify", "--max-kl", "1", src, src},
		{"verify", "--forward", "--tpu-gen", "v9", src, src},
		{"verify", "--forward", "--tokens", "1", "--prompt-ids", "f", src, src},
		{"verify", "--forward", "--tokens", "x", src, src},
		{"verify", "--manifest", "m", "--no-manifest", src, src},
		{"verify", "--forward", "--min-agree", "2", src, src},
	} {
		if _, err := run(t, args...); exitStatus(err) != exitUsage {
			t.Errorf("%q: exit %d (%v), want %d", args, exitStatus(err), err, exitUsage)
		}
	}
}

func TestParsePromptIDs(t *testing.T) {
	for in, want := range map[string]string{"1 5 9\n": "[1 5 9]", "[[1, 5, 9]]": "[1 5 9]", "3,4": "[3 4]"} {
		got, err := parsePromptIDs(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("%q: %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1 -2", "a"} {
		if _, err := parsePromptIDs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestVerifyForward converts tiny models written by transformers (a float32 Llama to
// bfloat16, FP8 dequantized for v6e, FP8 kept for TPU7x), checks `ckpt verify --forward`
// passes, and that changing one element of one converted weight fails it naming the tensor.
// Then --emit-torch writes the TPU check, which runs in the oracle with cpu standing in for
// tpu: it passes on the conversion (as stored, bfloat16, and widened to float32) and fails
// on a deliberately broken one (a transposed matrix).
func TestVerifyForward(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	if _, err := o.Python("testdata/forward/gen.py", chroot, "llama_gqa", "llama_fp8"); err != nil {
		t.Fatal(err)
	}
	type tc struct {
		name, src string
		convert   []string
		verify    []string
	}
	for _, c := range []tc{
		{"bf16", "llama_gqa", []string{"--dtype", "bfloat16"}, nil},
		{"fp8-v6e", "llama_fp8", []string{"--dequantize=auto", "--tpu-gen", "v6e"}, []string{"--tpu-gen", "v6e"}},
		{"fp8-tpu7x", "llama_fp8", []string{"--dequantize=auto", "--tpu-gen", "tpu7x"}, []string{"--tpu-gen", "tpu7x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := filepath.Join(host, c.src)
			dst := filepath.Join(host, "out-"+c.name)
			if _, err := run(t, append(append([]string{"convert", "--to", "tpu", "--format", "safetensors"}, c.convert...), src, dst)...); err != nil {
				t.Fatal(err)
			}
			args := append(append([]string{"verify", "--forward", "--json"}, c.verify...), src, dst)
			out, err := run(t, args...)
			var rep verifyReport
			if jerr := json.Unmarshal([]byte(out), &rep); err != nil || jerr != nil || !rep.OK || rep.Forward == nil || len(rep.Forward.Positions) != 32 {
				t.Fatalf("%v %v\n%s", err, jerr, out)
			}
			if keep := strings.HasSuffix(rep.Forward.Converted, "+fp8"); keep != (c.name == "fp8-tpu7x") {
				t.Errorf("converted run %q", rep.Forward.Converted)
			}
			t.Logf("%s: %s", c.name, rep.Forward.LogitsReport)
		})
	}
	// One element of one converted weight changed: parity names it, verify exits 5.
	dst := filepath.Join(host, "out-bf16")
	const victim = "model.layers.1.self_attn.o_proj.weight"
	broken := filepath.Join(host, "broken")
	if err := os.CopyFS(broken, os.DirFS(dst)); err != nil {
		t.Fatal(err)
	}
	changeElement(t, filepath.Join(broken, "model.safetensors"), victim, 100)
	out, err := run(t, "verify", "--forward", "--tokens", "1,5,9,2,7,3,11,4,8,6,10,12", filepath.Join(host, "llama_gqa"), broken)
	if exitStatus(err) != exitCorrupt || !strings.Contains(err.Error(), victim) {
		t.Fatalf("exit %d: %v\n%s", exitStatus(err), err, out)
	}
	// The TPU check, run in the oracle on the cpu device.
	emit := filepath.Join(host, "emit")
	out, err = run(t, "verify", "--emit-torch", emit, "--tokens", "1,5,9,2,7,3,11,4,8,6,10,12", filepath.Join(host, "llama_gqa"), dst)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, f := range []string{verify.EmitScript, verify.EmitReference, verify.EmitConfig} {
		if _, err := os.Stat(filepath.Join(emit, f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := run(t, "verify", "--emit-torch", emit, filepath.Join(host, "llama_gqa"), dst); err == nil {
		t.Error("--emit-torch replaced an earlier bundle without --force")
	}
	for _, f := range []string{"dcp", "torch"} {
		out := filepath.Join(host, "out-"+f)
		if f == "torch" {
			out += ".pt"
		}
		if _, err := run(t, "convert", "--to", "tpu", "--format", f, "--dtype", "bfloat16", filepath.Join(host, "llama_gqa"), out); err != nil {
			t.Fatal(err)
		}
	}
	if bad, err := o.Python("testdata/verify/break.py", chroot+"/out-bf16,"+chroot+"/bad"); err != nil {
		t.Fatalf("%v\n%s", err, bad)
	}
	runs := []struct {
		name   string
		args   []string
		status int
	}{
		{"hf folder as stored", []string{chroot + "/out-bf16"}, 0},
		{"hf folder in float32", []string{chroot + "/out-bf16", "--dtype", "float32"}, 0},
		{"dcp", []string{chroot + "/out-dcp"}, 0},
		{"torch file", []string{chroot + "/out-torch.pt"}, 0},
		{"transposed", []string{chroot + "/bad/transposed"}, 5},
	}
	args := []string{"testdata/verify/run_script.py", chroot + "/emit/" + verify.EmitScript}
	for i, r := range runs {
		if i > 0 {
			args = append(args, "---")
		}
		args = append(append(args, r.args...), "--device", "cpu", "--json")
	}
	raw, err := o.Python(args...)
	if err != nil {
		t.Fatal(err)
	}
	var results []struct {
		Status int    `json:"status"`
		Output string `json:"output"`
	}
	if err := json.Unmarshal(raw, &results); err != nil || len(results) != len(runs) {
		t.Fatalf("%v\n%s", err, raw)
	}
	for i, r := range runs {
		var rep struct {
			Failed  []string `json:"failed"`
			MaxKL   float64  `json:"max_kl"`
			Device  string   `json:"device"`
			DType   string   `json:"dtype"`
			Against struct {
				MaxKL float64 `json:"max_kl"`
			} `json:"versus_ckpt_emulation"`
		}
		res := results[i]
		if jerr := json.Unmarshal([]byte(res.Output), &rep); jerr != nil || res.Status != r.status || rep.Device != "cpu" {
			t.Fatalf("%s: exit %d (want %d), %v\n%s", r.name, res.Status, r.status, jerr, res.Output)
		}
		t.Logf("verify_tpu.py, %s (%s): max KL %.3g vs the source, %.3g vs ckpt's emulation; failed %q", r.name, rep.DType, rep.MaxKL, rep.Against.MaxKL, rep.Failed)
	}
}

// TestVerifyEmitGeneric: for an architecture the Go forward pass has no family for (RWKV),
// `ckpt verify --forward` says so and points to --emit-torch; `--emit-torch` writes a
// bundle without reference logits, and its script — run in the oracle with cpu standing in
// for the device — computes both sides with transformers: the bfloat16 conversion passes
// (as stored and widened to float32), a transposed matrix fails.
func TestVerifyEmitGeneric(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	if _, err := o.Python("testdata/forward/gen.py", chroot, "rwkv_generic"); err != nil {
		t.Fatal(err)
	}
	src, dst := filepath.Join(host, "rwkv_generic"), filepath.Join(host, "out-bf16")
	if _, err := run(t, "convert", "--to", "tpu", "--format", "safetensors", "--dtype", "bfloat16", src, dst); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, "verify", "--forward", src, dst)
	if err == nil || !strings.Contains(err.Error(), `model_type "rwkv"`) || !strings.Contains(err.Error(), "--emit-torch") {
		t.Fatalf("verify --forward on RWKV: %v", err)
	}
	emit := filepath.Join(host, "emit")
	out, err := run(t, "verify", "--emit-torch", emit, "--json", src, dst)
	var rep verifyReport
	if jerr := json.Unmarshal([]byte(out), &rep); err != nil || jerr != nil || !rep.OK || rep.Forward != nil || !strings.Contains(rep.ForwardDeferred, "rwkv") {
		t.Fatalf("%v %v\n%s", err, jerr, out)
	}
	ref, _ := readTensorNames(t, filepath.Join(emit, verify.EmitReference))
	if fmt.Sprint(ref) != "[tokens]" {
		t.Errorf("the generic bundle's reference holds %v", ref)
	}
	if bad, err := o.Python("testdata/verify/break.py", chroot+"/out-bf16,"+chroot+"/bad"); err != nil {
		t.Fatalf("%v\n%s", err, bad)
	}
	runs := []struct {
		name   string
		args   []string
		status int
	}{
		{"as stored", []string{chroot + "/out-bf16"}, 0},
		{"in float32", []string{chroot + "/out-bf16", "--dtype", "float32"}, 0},
		{"transposed", []string{chroot + "/bad/transposed"}, 5},
		{"embedding shifted", []string{chroot + "/bad/embed_shifted"}, 5},
	}
	args := []string{"testdata/verify/run_script.py", chroot + "/emit/" + verify.EmitScript}
	for i, r := range runs {
		if i > 0 {
			args = append(args, "---")
		}
		args = append(append(args, r.args...), "--source", chroot+"/rwkv_generic", "--device", "cpu", "--json")
	}
	raw, err := o.Python(args...)
	if err != nil {
		t.Fatal(err)
	}
	var results []struct {
		Status int    `json:"status"`
		Output string `json:"output"`
	}
	if err := json.Unmarshal(raw, &results); err != nil || len(results) != len(runs) {
		t.Fatalf("%v\n%s", err, raw)
	}
	for i, r := range runs {
		var rep struct {
			MaxKL    float64 `json:"max_kl"`
			Computed string  `json:"reference_computed_by"`
		}
		res := results[i]
		if jerr := json.Unmarshal([]byte(res.Output), &rep); jerr != nil || res.Status != r.status || rep.Computed != "transformers" {
			t.Fatalf("%s: exit %d (want %d), %v\n%s", r.name, res.Status, r.status, jerr, res.Output)
		}
		t.Logf("generic verify_tpu.py, %s: max KL %.3g", r.name, rep.MaxKL)
	}
}

// readTensorNames lists a safetensors file's tensors.
func readTensorNames(t *testing.T, path string) ([]string, error) {
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
	var names []string
	for _, nt := range ts {
		names = append(names, nt.Name)
	}
	return names, nil
}

// FuzzParsePromptIDs: arbitrary --prompt-ids files give ids or an error, never a panic.
func FuzzParsePromptIDs(f *testing.F) {
	f.Add("[[1, 5, 9]]")
	f.Add("1\n2\n3")
	f.Add("99999999999999999999")
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := parsePromptIDs(s)
		if err == nil && len(ids) == 0 {
			t.Fatal("no ids and no error")
		}
		for _, id := range ids {
			if id < 0 {
				t.Fatalf("negative id %d", id)
			}
		}
	})
}

// TestVerifyPerDevice: the per-device outputs of a TPU target — one safetensors file per rank
// with sharding.json, a DCP directory whose __R_0.distcp holds rank R's pieces — pass
// parity, read through formats' reassembly, every rank's copy of a replicated piece
// included; changing one element of one rank's copy fails it, naming the tensor, the rank and
// the element's index in the whole tensor.
func TestVerifyPerDevice(t *testing.T) {
	src := "../../testdata/hf/mistral_sharded"
	dir := t.TempDir()
	for _, f := range []string{"safetensors", "dcp"} {
		dst := filepath.Join(dir, f)
		if out, err := run(t, "convert", "--to", "tpu", "--dtype", "bfloat16", "--topology", "v6e-8", "--mesh", "dp=2,tp=4", "--format", f, src, dst); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		out, err := run(t, "verify", "--json", src, dst)
		var rep verifyReport
		if jerr := json.NewDecoder(strings.NewReader(out)).Decode(&rep); err != nil || jerr != nil || !rep.OK || rep.Tensors.Pairs == 0 {
			t.Fatalf("%s: %v %v\n%s", f, err, jerr, out)
		}
		if f == "safetensors" && rep.Tensors.Replicas == 0 {
			t.Errorf("no replica of the dp axis compared: %+v", rep.Tensors)
		}
		if out, err := run(t, "check", dst); err != nil {
			t.Fatalf("check %s: %v\n%s", f, err, out)
		}
	}
	// Ranks 4–7 hold the dp=1 copies of ranks 0–3's pieces: rank 6's is the second copy of
	// the piece rank 2 also holds, which reassembling the tensor does not read.
	const victim = "model.layers.0.mlp.down_proj.weight"
	changeElement(t, filepath.Join(dir, "safetensors", "rank-00006-of-00008.safetensors"), victim, 3)
	out, err := run(t, "verify", filepath.Join(src), filepath.Join(dir, "safetensors"))
	if exitStatus(err) != exitCorrupt || !strings.Contains(out, victim+", rank 6's copy") {
		t.Fatalf("exit %d: %v\n%s", exitStatus(err), err, out)
	}
	// ckpt check hashes every rank's copy too, not only the one reassembly reads.
	out, err = run(t, "check", filepath.Join(dir, "safetensors"))
	if exitStatus(err) != exitCorrupt || !strings.Contains(out, "rank 6's copy") || !strings.Contains(out, victim) {
		t.Fatalf("check: exit %d: %v\n%s", exitStatus(err), err, out)
	}
}

// changePiece flips the high byte of element at of rank's stored piece of the named tensor
// of the per-device output dir (the copy reassembly reads), found by content in that
// rank's file.
func changePiece(t *testing.T, dir, name string, rank, at int) {
	t.Helper()
	ck, err := formats.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := ck.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	var local *statedict.Tensor
	for _, s := range ck.Shards[whole] {
		if len(s.Ranks) > 0 && s.Ranks[0] == rank && !s.Empty() {
			local = s.Local
		}
	}
	if local == nil {
		t.Fatalf("%s: rank %d stores no piece of %s", dir, rank, name)
	}
	var buf bytes.Buffer
	if _, err := local.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	path, es := local.Storage.File, local.DType.Size()
	ck.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, buf.Bytes())
	if i < 0 || bytes.Contains(b[i+1:], buf.Bytes()) {
		t.Fatalf("%s: the bytes of rank %d's piece of %s are not found once", path, rank, name)
	}
	b[i+at*es+es-1] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyForwardPerDevice runs verify --forward on per-device outputs of every layout —
// FSDP, tensor parallelism (uneven over 3 CPU ranks too), replicas over dp — in both
// per-device formats: the converted side runs from the ranks' pieces and passes. A changed
// element of one rank's piece, and two ranks' pieces swapped in the sharding manifest, fail
// naming the tensor and the rank.
func TestVerifyForwardPerDevice(t *testing.T) {
	src := "../../testdata/hf/mistral_sharded"
	dir := t.TempDir()
	cases := []struct {
		target, mesh string
		ranks        int
	}{
		{"--topology=v6e-8", "fsdp=8", 8},
		{"--topology=v6e-8", "tp=8", 8},
		{"--topology=v6e-8", "dp=2,tp=4", 8},
		{"", "tp=3", 3}, // CPU ranks: 32 columns as 11, 11, 10
	}
	for _, c := range cases {
		for _, f := range []string{"dcp", "safetensors"} {
			dst := filepath.Join(dir, f+"-"+strings.NewReplacer("=", "", ",", "-").Replace(c.mesh))
			args := []string{"convert", "--dtype", "bfloat16", "--mesh", c.mesh, "--format", f, src, dst}
			if c.target != "" {
				args = append(args, "--to=tpu", c.target)
			} else {
				args = append(args, "--to=cpu")
			}
			if out, err := run(t, args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			out, err := run(t, "verify", "--forward", "--json", "--tokens", "1,5,9,100,127", src, dst)
			var rep verifyReport
			if jerr := json.Unmarshal([]byte(out), &rep); err != nil || jerr != nil || !rep.OK || rep.Forward == nil {
				t.Fatalf("%s %s: %v %v\n%s", c.mesh, f, err, jerr, out)
			}
			if s := rep.Forward.Shards; s == nil || s.Ranks != c.ranks || s.Tensors != 15 {
				t.Errorf("%s %s: forward ran from %+v, want the pieces of %d ranks", c.mesh, f, s, c.ranks)
			}
			out, err = run(t, "verify", "--forward", "--tokens", "1,5,9", src, dst)
			if want := fmt.Sprintf("from %d ranks' shards", c.ranks); err != nil || !strings.Contains(out, want) {
				t.Errorf("%s %s: %v, no %q in\n%s", c.mesh, f, err, want, out)
			}
		}
	}
	// (a) One element of rank 2's piece of a row-parallel weight (its columns 8–11).
	const victim = "model.layers.1.self_attn.o_proj.weight"
	for _, f := range []string{"dcp", "safetensors"} {
		dst := filepath.Join(dir, f+"-tp8")
		changePiece(t, dst, victim, 2, 5)
		out, err := run(t, "verify", "--forward", "--tokens", "1,5,9,100,127", src, dst)
		if exitStatus(err) != exitCorrupt || !strings.Contains(out, victim+", rank 2's piece at [0 8]") {
			t.Errorf("%s, a changed element: exit %d: %v\n%s", f, exitStatus(err), err, out)
		}
	}
	// (b) The manifest gives rank 1's piece of the row-parallel down_proj to rank 3 and
	// rank 3's to rank 1: the ranks' columns are swapped.
	dst := filepath.Join(dir, "safetensors-tp3")
	mpath := filepath.Join(dst, "sharding.json")
	b, err := os.ReadFile(mpath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	const swapped = "model.layers.0.mlp.down_proj.weight"
	for _, x := range m["tensors"].([]any) {
		if tm := x.(map[string]any); tm["name"] == swapped {
			ps := tm["pieces"].([]any)
			p0, p1 := ps[0].(map[string]any), ps[1].(map[string]any)
			p0["ranks"], p1["ranks"] = p1["ranks"], p0["ranks"]
		}
	}
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mpath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The pieces no longer lie where the placements put them: the folder is refused as
	// damaged, naming the tensor and the rank.
	_, err = run(t, "verify", "--forward", "--tokens", "1,5,9,100,127", src, dst)
	if exitStatus(err) != exitCorrupt || !strings.Contains(fmt.Sprint(err), swapped+`": rank 1 holds the piece at [0 0]`) {
		t.Errorf("swapped pieces: exit %d: %v", exitStatus(err), err)
	}
}
