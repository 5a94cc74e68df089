package convert_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify"
)

// checkResult is what testdata/convert/check_load.py reports.
type checkResult struct {
	Compared int      `json:"compared"`
	Tags     []string `json:"tags"`
	Problems []string `json:"problems"`
}

func torchFixtures(t *testing.T) []string {
	t.Helper()
	all, _ := filepath.Glob("../testdata/torch/*.pt")
	var out []string
	for _, p := range all {
		if !strings.Contains(p, "malicious") {
			out = append(out, p)
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d torch fixtures", len(out))
	}
	return out
}

// checkJob is one output for testdata/convert/check_load.py to compare with its source.
type checkJob struct {
	Name    string   `json:"name"`
	Format  string   `json:"format"`
	Src     string   `json:"src"`
	Out     string   `json:"out"`
	Tag     string   `json:"tag"`
	DType   string   `json:"dtype"`
	Dropped []string `json:"dropped"`
	// CPU are the RNG states the conversion keeps tagged "cpu".
	CPU []string `json:"cpu"`
}

// runChecks has torch check every job in one oracle process (importing torch once) and
// reports each job's problems as a subtest.
func runChecks(t *testing.T, o *oracle.Oracle, host, chroot string, jobs []checkJob) {
	t.Helper()
	b, _ := json.Marshal(jobs)
	if err := os.WriteFile(filepath.Join(host, "jobs.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := o.Python("testdata/convert/check_load.py", chroot+"/jobs.json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(jobs) {
		t.Fatalf("%d results for %d jobs:\n%s", len(lines), len(jobs), out)
	}
	for i, job := range jobs {
		var res checkResult
		if err := json.Unmarshal([]byte(lines[i]), &res); err != nil {
			t.Fatalf("%s: %v: %s", job.Name, err, lines[i])
		}
		t.Run(job.Name, func(t *testing.T) {
			for _, p := range res.Problems {
				t.Error(p)
			}
			if res.Compared == 0 && len(res.Problems) == 0 {
				t.Error("no tensor compared")
			}
		})
	}
}

// TestConvertLoadsInTorch converts every torch.save fixture to each output format and has
// real torch load the result: every tensor must be bit-identical to torch's own load of the
// source (after torch's own cast for --dtype), carry the requested location tag, and tied
// storages must stay tied in the torch format.
func TestConvertLoadsInTorch(t *testing.T) {
	o := oracle.Require(t)
	type variant struct {
		name                    string
		format                  formats.Layout
		mapLoc, tag, dtype, ext string
	}
	variants := []variant{
		{"torch-tpu", formats.TorchFile, "tpu", "tpu", "keep", ".pt"},
		{"torch-cpu", formats.TorchFile, "cpu", "cpu", "keep", ".pt"},
		{"torch-bf16", formats.TorchFile, "tpu", "tpu", "bfloat16", ".pt"},
		{"safetensors-file", formats.SafetensorsFile, "tpu", "tpu", "keep", ".safetensors"},
		{"safetensors-folder-f16", formats.SafetensorsFile, "tpu", "tpu", "float16", ""},
		{"dcp", formats.DCPFolder, "tpu", "tpu", "keep", ""},
		{"dcp-bf16", formats.DCPFolder, "tpu", "tpu", "bfloat16", ""},
	}
	host, chroot := oracle.TempDir(t)
	var jobs []checkJob
	for _, src := range torchFixtures(t) {
		for _, v := range variants {
			base := strings.TrimSuffix(filepath.Base(src), ".pt")
			name := base + "/" + v.name
			target, err := runtime.NewTarget(runtime.Spec{Device: "tpu", MapLocation: v.mapLoc})
			if err != nil {
				t.Fatal(err)
			}
			out := strings.ReplaceAll(name, "/", "_") + v.ext
			opts := convert.Options{Src: src, Dst: filepath.Join(host, out), Format: v.format, MaxShardSize: 4096, Target: target,
				Plan: plan.Options{StripWrappers: true, PlainData: true, KeepCUDARNG: true}}
			if v.dtype != "keep" {
				opts.Plan.DType, _ = statedict.ParseDType(v.dtype)
			}
			var dropped []string
			if v.format != formats.TorchFile {
				dropped = unrepresentable(t, src, v.format)
				for _, n := range dropped {
					opts.Plan.Drop = append(opts.Plan.Drop, regexp.MustCompile("^"+regexp.QuoteMeta(n)+"$"))
				}
			}
			sum, err := convert.Run(t.Context(), opts)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			jobs = append(jobs, checkJob{Name: name, Format: string(v.format), Src: "/repo/testdata/torch/" + filepath.Base(src),
				Out: chroot + "/" + out, Tag: v.tag, DType: v.dtype, Dropped: dropped, CPU: append(sum.Remap.RNG, sum.Remap.HostData...)})
		}
	}
	runChecks(t, o, host, chroot, jobs)
}

// TestConvertFoldersLoadInTorch converts the DCP directories and Hugging Face folders written
// by torch and transformers to each output format and compares with torch's own reading of the
// source (dcp_to_torch_save; safetensors.torch.load_file / torch.load of the shards).
func TestConvertFoldersLoadInTorch(t *testing.T) {
	o := oracle.Require(t)
	sources := []string{"dcp/model", "dcp/sharded", "dcp/scalars", "hf/qwen3_moe_sharded", "hf/mistral_sharded", "hf/mistral_bin_sharded"}
	formats := []struct {
		format formats.Layout
		ext    string
	}{{formats.TorchFile, ".pt"}, {formats.SafetensorsFile, ""}, {formats.DCPFolder, ""}}
	host, chroot := oracle.TempDir(t)
	target, _ := runtime.NewTarget(runtime.Spec{Device: "tpu"})
	var jobs []checkJob
	for _, src := range sources {
		for _, f := range formats {
			name := src + "/" + string(f.format)
			out := strings.ReplaceAll(name, "/", "_") + f.ext
			opts := convert.Options{Src: "../testdata/" + src, Dst: filepath.Join(host, out), Format: f.format, MaxShardSize: 8192, Target: target,
				Plan: plan.Options{StripWrappers: true, PlainData: true, KeepCUDARNG: true}}
			sum, err := convert.Run(t.Context(), opts)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			jobs = append(jobs, checkJob{Name: name, Format: string(f.format), Src: "/repo/testdata/" + src,
				Out: chroot + "/" + out, Tag: "tpu", DType: "keep", CPU: append(sum.Remap.RNG, sum.Remap.HostData...)})
		}
	}
	runChecks(t, o, host, chroot, jobs)
}

// unrepresentable lists the tensors of src that format cannot hold: dtypes safetensors has
// no name for (complex32, complex128, quantized, bits), quantized tensors in DCP. Converting
// them is an error unless dropped.
func unrepresentable(t *testing.T, src string, format formats.Layout) []string {
	t.Helper()
	ck, err := formats.Open(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	ts, err := ck.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, nt := range ts {
		if format == formats.SafetensorsFile && nt.Tensor.DType.Safetensors() == "" ||
			format == formats.DCPFolder && nt.Tensor.DType.Kind() == statedict.KindQuantized {
			out = append(out, nt.Name)
		}
	}
	return out
}

// TestConvertRefusesOverwrite checks that an existing destination is kept without --force —
// a file ckpt did not write refused with that reason, which force would meet too — and
// that a failed conversion leaves nothing behind.
func TestConvertRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "out.pt")
	if err := os.WriteFile(dst, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/torch/views.pt", Dst: dst, Format: formats.TorchFile})
	if !errors.Is(err, atomicfile.ErrForeign) {
		t.Fatalf("overwrote without --force: %v", err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "precious" {
		t.Fatal("destination changed")
	}
	// A rename rule that matches nothing fails before anything is written.
	_, err = convert.Run(t.Context(), convert.Options{Src: "../testdata/torch/views.pt", Dst: filepath.Join(dir, "new.pt"), Format: formats.TorchFile,
		Plan: plan.Options{Renames: []remap.Rename{{Pattern: regexp.MustCompile("^nothing$"), Repl: "x"}}}})
	if err == nil {
		t.Fatal("a rename hitting nothing was accepted")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("failed conversion left files: %v", entries)
	}
}

// TestTrainerFolderLoadsInTorch converts an HF Trainer checkpoint folder (weights, optimizer,
// scheduler and RNG pickles, trainer_state.json, and a training_args.bin that pickles code)
// to a folder: the training-state files are converted alongside the weights, each loading in
// torch bit-identical to torch's load of the original with the requested tags, and
// training_args.bin is left out with a warning, never loaded.
func TestTrainerFolderLoadsInTorch(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	src := filepath.Join(host, "checkpoint-500")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{ // name in the folder → torch-written fixture
		"optimizer.pt":      "torch/training_cuda.pt",
		"scheduler.pt":      "torch/protocol4.pt",
		"rng_state.pth":     "torch/numpy_args.pt",
		"training_args.bin": "torch/malicious.pt",
	}
	for _, dir := range []string{"../testdata/hf/mistral_sharded"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			os.WriteFile(filepath.Join(src, e.Name()), b, 0o644)
		}
	}
	for name, fixture := range files {
		b, err := os.ReadFile("../testdata/" + fixture)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(src, name), b, 0o644)
	}
	os.WriteFile(filepath.Join(src, "trainer_state.json"), []byte(`{"global_step": 500}`), 0o644)
	target, _ := runtime.NewTarget(runtime.Spec{Device: "tpu"})
	dst := filepath.Join(host, "out")
	sum, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: dst, Format: formats.SafetensorsFile, Target: target,
		Plan: plan.Options{PlainData: true, KeepCUDARNG: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, "training_args.bin")); !os.IsNotExist(err) {
		t.Error("training_args.bin was carried along")
	}
	if !strings.Contains(strings.Join(sum.Messages(), "\n"), "left out training_args.bin") {
		t.Errorf("warnings %v do not name training_args.bin", sum.Warnings)
	}
	if _, err := os.Stat(filepath.Join(dst, "trainer_state.json")); err != nil {
		t.Error("trainer_state.json not copied")
	}
	if len(sum.Alongside) != 3 {
		t.Fatalf("%d files converted alongside, want 3", len(sum.Alongside))
	}
	var jobs []checkJob
	for _, sub := range sum.Alongside {
		name := filepath.Base(sub.Dst)
		if rep, err := verify.Check(context.Background(), sub.Dst, ""); err != nil || !rep.OK() {
			t.Errorf("%s: check %+v, %v", name, rep, err)
		}
		jobs = append(jobs, checkJob{Name: name, Format: string(formats.TorchFile), Src: "/repo/testdata/" + files[name],
			Out: chroot + "/out/" + name, Tag: "tpu", DType: "keep", CPU: append(sub.Remap.RNG, sub.Remap.HostData...)})
	}
	runChecks(t, o, host, chroot, jobs)
}
