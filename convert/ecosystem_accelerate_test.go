package convert_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/inspect"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/verify"
)

// accelerateFixtures is testdata/ecosystem/accelerate.json: per folder, torch's listing of
// the model accelerate's load_state loads and of each training-state file or folder.
func accelerateFixtures(t *testing.T) map[string]map[string]orderedListing {
	t.Helper()
	b, err := os.ReadFile("../testdata/ecosystem/accelerate.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(b, &raw)
	out := map[string]map[string]orderedListing{}
	for _, name := range []string{"accelerate", "accelerate_fsdp"} {
		var f map[string]orderedListing
		if err := json.Unmarshal(raw[name], &f); err != nil || len(f["model"].Names) == 0 {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = f
	}
	return out
}

// TestAccelerateInspect reads accelerate save_state folders — model.safetensors, and under
// FSDP's sharded state dict the DCP folder pytorch_model_fsdp_0/ (real torch fully_shard
// DTensors) — as the model accelerate loads, the training state listed as ignored.
func TestAccelerateInspect(t *testing.T) {
	for name, want := range accelerateFixtures(t) {
		ck, err := formats.Open(context.Background(), filepath.Join(folders, name))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := inspect.Build(context.Background(), ck, inspect.Options{Hash: true})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]torchEntry{}
		for _, tn := range rep.Tensors {
			got[tn.Name] = torchEntry{tn.DType, tn.Shape, tn.SHA256}
		}
		if len(got) != len(want["model"].Names) {
			t.Errorf("%s: %d tensors, accelerate loads %d", name, len(got), len(want["model"].Names))
		}
		sameTensors(t, got, want["model"], "")
		var training []string
		for f := range want {
			if f != "model" {
				if f == "optimizer_0" {
					f += "/"
				}
				training = append(training, f)
			}
		}
		for _, f := range training {
			if !strings.Contains(strings.Join(ck.Ignored, " "), f) {
				t.Errorf("%s: %s not listed as ignored training state: %v", name, f, ck.Ignored)
			}
		}
		ck.Close()
	}
}

// TestAccelerateConvertTrainingState converts both folders to a torch file, a DCP folder
// and a Hugging Face folder: the training state is never left out — inside the torch file
// under each file's stem next to "model", converted alongside into folder outputs (an FSDP
// optimizer_0/ DCP folder carried as it is). torch loads every output and every training
// file with each tensor bit-identical to accelerate's.
func TestAccelerateConvertTrainingState(t *testing.T) {
	o := oracle.Require(t)
	fx := accelerateFixtures(t)
	host, chroot := oracle.TempDir(t)
	type check struct {
		src, part string // part: "model" or the training file checked
		prefix    string // where its tensors are in the loaded output
	}
	var checks []check
	var jobs []ecosystemJob
	for name, want := range fx {
		for _, format := range []formats.Layout{formats.TorchFile, formats.DCPFolder, formats.SafetensorsFile} {
			dst := filepath.Join(host, name+"-"+string(format))
			if format == formats.TorchFile {
				dst += ".pt"
			} else {
				dst += "/"
			}
			sum, err := convert.Run(t.Context(), convert.Options{Src: filepath.Join(folders, name), Dst: dst, Format: format, Plan: plan.Options{PlainData: true}})
			if err != nil {
				t.Fatalf("%s → %s: %v", name, format, err)
			}
			if rep, err := verify.Check(context.Background(), dst, ""); err != nil || !rep.OK() {
				t.Errorf("%s → %s: check %+v %v", name, format, rep, err)
			}
			for _, w := range sum.Warnings {
				if w.Dropped {
					t.Errorf("%s → %s: %s", name, format, w.Message)
				}
			}
			out := chrootPath(host, chroot, dst)
			for part := range want {
				switch {
				case format == formats.TorchFile:
					stem := strings.TrimSuffix(part, filepath.Ext(part))
					checks = append(checks, check{name, part, stem})
					jobs = append(jobs, ecosystemJob{Out: out, Format: "torch"})
				case part == "model":
					checks = append(checks, check{name, part, ""})
					jobs = append(jobs, ecosystemJob{Out: out, Format: string(format)})
				case part == "optimizer_0":
					checks = append(checks, check{name, part, ""})
					jobs = append(jobs, ecosystemJob{Out: out + "/" + part, Format: "dcp"})
				default:
					checks = append(checks, check{name, part, ""})
					jobs = append(jobs, ecosystemJob{Out: out + "/" + part, Format: "torch"})
				}
			}
		}
	}
	res := loadInTorch(t, o, host, jobs)
	for i, c := range checks {
		if res[i].Error != "" {
			t.Errorf("%s %s (%s): %s", c.src, c.part, jobs[i].Out, res[i].Error)
			continue
		}
		want := fx[c.src][c.part]
		if len(want.Names) == 0 && c.part != "scheduler.bin" {
			t.Errorf("%s %s: nothing to compare", c.src, c.part)
		}
		sameTensors(t, res[i].Tensors, want, c.prefix)
	}
}
