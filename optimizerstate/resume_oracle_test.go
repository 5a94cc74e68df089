package optimizerstate_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// resumeJob is one check for testdata/optim/resume.py.
type resumeJob struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Ckpt    string `json:"ckpt"`
	Ref     string `json:"ref"`
	DType   string `json:"dtype"`
	CUDARNG bool   `json:"cuda_rng"`
}

type resumeResult struct {
	Name     string   `json:"name"`
	Problems []string `json:"problems"`
	Checked  int      `json:"checked"`
}

// TestResumeInTorch converts real training checkpoints saved on cuda:0 (testdata/optim:
// a tied-embedding Llama with AdamW in two groups, warmup-cosine schedule and GradScaler;
// an MLP with SGD momentum and StepLR, also saved through DCP; an FSDP2 run saved with
// DCP) for the TPU and has
// torch, without CUDA, restore model, optimizer, scheduler, scaler, counters and RNG
// from the result and train 3 more steps: the parameters must be bit-identical to the
// uninterrupted 6-step run. With --dtype bfloat16 the weights load as bfloat16, the
// moments stay float32, and training still runs. Every optimizer kind's state and every
// scheduler kind's state must come back exactly as torch saved it.
func TestResumeInTorch(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	const data = "testdata/optim/"
	cases := []struct {
		name, src, kind, dtype string
		keepCUDARNG            bool
		// want* are what the conversion must report.
		wantMappedBy string
		wantRepaired []string
	}{
		{"llama", "llama_cuda.pt", "llama", "keep", false, "trainer grouping", nil},
		{"llama-bf16", "llama_cuda.pt", "llama", "bfloat16", false, "trainer grouping", nil},
		{"llama-keep-cuda-rng", "llama_cuda.pt", "llama", "keep", true, "trainer grouping", nil},
		{"mlp", "mlp_cuda.pt", "mlp", "keep", false, "order", nil},
		{"mlp-bf16", "mlp_cuda.pt", "mlp", "bfloat16", false, "order", nil},
		// The same state through DCP: without ids turned back into ints, torch would
		// attach no momentum and the run would diverge at once.
		{"mlp-via-dcp", "mlp_dcp", "mlp", "keep", false, "order", nil},
		{"dcp", "dcp", "dcp", "keep", false, "fqn", []string{"scheduler.milestones"}},
		{"dcp-bf16", "dcp", "dcp", "bfloat16", false, "fqn", []string{"scheduler.milestones"}},
		{"optimizers", "optimizers.pt", "optimizers", "keep", false, "", nil},
		{"schedulers", "schedulers.pt", "schedulers", "keep", false, "", nil},
	}
	var jobs []resumeJob
	for _, c := range cases {
		target, err := runtime.NewTarget(runtime.Spec{Device: runtime.TPU})
		if err != nil {
			t.Fatal(err)
		}
		opts := convert.Options{Src: filepath.Join("..", data, c.src), Dst: filepath.Join(host, c.name+".pt"), Format: formats.TorchFile, Target: target,
			Plan: plan.Options{StripWrappers: true, PlainData: true, KeepCUDARNG: c.keepCUDARNG}}
		if c.dtype != "keep" {
			opts.Plan.DType, _ = statedict.ParseDType(c.dtype)
		}
		sum, err := convert.Run(t.Context(), opts)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		rep := sum.Remap
		if c.wantMappedBy != "" && (len(rep.Optimizers) != 1 || rep.Optimizers[0].MappedBy != c.wantMappedBy) {
			t.Errorf("%s: optimizers %+v, want one mapped by %s", c.name, rep.Optimizers, c.wantMappedBy)
		}
		if !slices.Equal(rep.Repaired, c.wantRepaired) {
			t.Errorf("%s: repaired %v, want %v", c.name, rep.Repaired, c.wantRepaired)
		}
		if c.src == "mlp_dcp" && !rep.Optimizers[0].Renumbered {
			t.Errorf("%s: digit-string ids not turned into ints: %+v", c.name, rep.Optimizers[0])
		}
		if c.kind == "llama" || c.kind == "mlp" {
			wantDropped := []string{"rng.cuda"}
			if c.keepCUDARNG {
				wantDropped = nil
			}
			if !slices.Equal(rep.DroppedRNG, wantDropped) || len(sum.Warnings) != len(wantDropped) {
				t.Errorf("%s: dropped RNG %v, warnings %q", c.name, rep.DroppedRNG, sum.Messages())
			}
		}
		ref := "/repo/" + data + c.kind + ".ref.pt"
		if c.kind == "optimizers" || c.kind == "schedulers" {
			ref = "/repo/" + data + c.src
		}
		jobs = append(jobs, resumeJob{Name: c.name, Kind: c.kind, Ckpt: chroot + "/" + c.name + ".pt", Ref: ref,
			DType: c.dtype, CUDARNG: c.keepCUDARNG})
	}
	b, _ := json.Marshal(jobs)
	if err := os.WriteFile(filepath.Join(host, "jobs.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := o.Python(data+"resume.py", chroot+"/jobs.json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(jobs) {
		t.Fatalf("%d results for %d jobs:\n%s", len(lines), len(jobs), out)
	}
	for i, line := range lines {
		var res resumeResult
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			t.Fatalf("%s: %v: %s", jobs[i].Name, err, line)
		}
		t.Run(res.Name, func(t *testing.T) {
			for _, p := range res.Problems {
				t.Error(p)
			}
			if res.Checked == 0 && len(res.Problems) == 0 {
				t.Error("nothing checked")
			}
		})
	}
}
