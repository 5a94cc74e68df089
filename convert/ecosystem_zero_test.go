package convert_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/inspect"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/verify"
)

// zeroFixture is one folder of testdata/ecosystem/zero.json: the state dict DeepSpeed's
// zero_to_fp32 algorithm consolidates from the replica's partitions.
type zeroFixture struct {
	Tensors orderedListing    `json:"tensors"`
	Tied    map[string]string `json:"tied"`
	// Optimizer is the optimizer state by parameter name DeepSpeed's ds_to_universal.py
	// extracts from the same partitions.
	Optimizer orderedListing `json:"optimizer"`
}

func zeroFixtures(t *testing.T) map[string]zeroFixture {
	t.Helper()
	b, err := os.ReadFile("../testdata/ecosystem/zero.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(b, &raw)
	out := map[string]zeroFixture{}
	for _, name := range []string{"zero2", "zero3"} {
		var f zeroFixture
		if err := json.Unmarshal(raw[name], &f); err != nil || len(f.Tensors.Names) == 0 || len(f.Optimizer.Names) == 0 {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = f
	}
	return out
}

// TestZeROConsolidation reads DeepSpeed ZeRO-2 (two ranks, two groups, padding on the last
// rank, a tied parameter, a frozen one) and ZeRO-3 (three ranks, every parameter padded,
// placeholders in the module) folders as the state dict DeepSpeed's zero_to_fp32 algorithm
// gives on the same partitions: same names in the same order, dtypes, shapes, bytes, and
// the shared parameter shares its tensor.
func TestZeROConsolidation(t *testing.T) {
	for name, want := range zeroFixtures(t) {
		for _, dir := range []string{name, name + "/global_step3"} {
			ck, err := formats.Open(context.Background(), "../testdata/ecosystem/zero/"+dir)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := inspect.Build(context.Background(), ck, inspect.Options{Hash: true})
			ck.Close()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tn := range rep.Tensors {
				got = append(got, tn.Name)
				if g, w := (torchEntry{tn.DType, tn.Shape, tn.SHA256}), want.Tensors.Entries[tn.Name]; !reflect.DeepEqual(g, w) {
					t.Errorf("%s %s: %+v, zero_to_fp32 gives %+v", dir, tn.Name, g, w)
				}
				if a, ok := want.Tied[tn.Name]; ok && tn.SharesStorageWith != a {
					t.Errorf("%s %s shares storage with %q, want %q", dir, tn.Name, tn.SharesStorageWith, a)
				}
			}
			if !reflect.DeepEqual(got, want.Tensors.Names) {
				t.Errorf("%s: %v, zero_to_fp32 gives %v", dir, got, want.Tensors.Names)
			}
		}
	}
}

// TestZeRO3ModelStatesAlone: a ZeRO-3 model-states file, whose parameters are [0]-shaped
// placeholders, reads as the consolidation of its folder — any rank's file, with or
// without the optimizer state — the same tensors zero_to_fp32 gives; it converts and
// verifies. Copied without the ranks' optimizer-state files, it is refused, naming the
// folder that lacks them.
func TestZeRO3ModelStatesAlone(t *testing.T) {
	want := zeroFixtures(t)["zero3"]
	dir := "../testdata/ecosystem/zero/zero3/global_step3"
	for r := range 3 {
		path := filepath.Join(dir, fmt.Sprintf("zero_pp_rank_%d_mp_rank_00_model_states.pt", r))
		for _, withOptim := range []bool{false, true} {
			ck, err := formats.OpenWith(context.Background(), path, formats.OpenOptions{ZeROOptimizer: withOptim})
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			rep, err := inspect.Build(context.Background(), ck, inspect.Options{Hash: true})
			ck.Close()
			if err != nil {
				t.Fatal(err)
			}
			prefix, n := "", 0
			if withOptim {
				prefix = "model."
			}
			for _, tn := range rep.Tensors {
				name, ok := strings.CutPrefix(tn.Name, prefix)
				if !ok {
					continue
				}
				n++
				if g, w := (torchEntry{tn.DType, tn.Shape, tn.SHA256}), want.Tensors.Entries[name]; !reflect.DeepEqual(g, w) {
					t.Errorf("%s %s: %+v, zero_to_fp32 gives %+v", path, tn.Name, g, w)
				}
			}
			if rep.Format != "deepspeed-zero" || n != len(want.Tensors.Names) {
				t.Errorf("%s: %s, %d model tensors, zero_to_fp32 gives %d", path, rep.Format, n, len(want.Tensors.Names))
			}
			if withOptim && !slices.ContainsFunc(rep.Tensors, func(tn inspect.Tensor) bool { return strings.HasPrefix(tn.Name, "optimizer.state.") }) {
				t.Errorf("%s: no optimizer state read", path)
			}
		}
	}
	path := filepath.Join(dir, "zero_pp_rank_0_mp_rank_00_model_states.pt")
	dst := filepath.Join(t.TempDir(), "x.safetensors")
	if _, err := convert.Run(t.Context(), convert.Options{Src: path, Dst: dst, Format: formats.SafetensorsFile}); err != nil {
		t.Fatal(err)
	}
	if rep, err := verify.Parity(t.Context(), path, dst, verify.ParityOptions{}); err != nil || !rep.OK() || rep.Equal != len(want.Tensors.Names)-len(want.Tied) {
		t.Errorf("verify: %+v, %v", rep, err)
	}
	alone := filepath.Join(t.TempDir(), "zero_pp_rank_0_mp_rank_00_model_states.pt")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = formats.Open(context.Background(), alone)
	if !errors.Is(err, ckpterr.ErrUnsupported) || !strings.Contains(err.Error(), "placeholders") || !strings.Contains(err.Error(), "which "+filepath.Dir(alone)+" does not hold") {
		t.Errorf("got %v", err)
	}
	if _, err := convert.Run(t.Context(), convert.Options{Src: alone, Dst: filepath.Join(t.TempDir(), "y.safetensors"), Format: formats.SafetensorsFile}); err == nil {
		t.Error("converted placeholders")
	}
}

// TestZeROConvertLoadsInTorch converts both ZeRO folders to every format; torch loads each
// output with every tensor bit-identical to zero_to_fp32's consolidation.
func TestZeROConvertLoadsInTorch(t *testing.T) {
	o := oracle.Require(t)
	fx := zeroFixtures(t)
	host, chroot := oracle.TempDir(t)
	var jobs []ecosystemJob
	var wants []zeroFixture
	for name, want := range fx {
		for _, format := range []formats.Layout{formats.TorchFile, formats.SafetensorsFile, formats.DCPFolder} {
			dst := filepath.Join(host, name+"-"+string(format))
			if format == formats.TorchFile {
				dst += ".pt"
			}
			if _, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/ecosystem/zero/" + name, Dst: dst, Format: format}); err != nil {
				t.Fatalf("%s → %s: %v", name, format, err)
			}
			if rep, err := verify.Check(context.Background(), dst, ""); err != nil || !rep.OK() {
				t.Errorf("%s → %s: check %+v %v", name, format, rep, err)
			}
			jobs = append(jobs, ecosystemJob{Out: chrootPath(host, chroot, dst), Format: string(format), WeightsOnly: true})
			wants = append(wants, want)
		}
	}
	res := loadInTorch(t, o, host, jobs)
	for i, job := range jobs {
		if res[i].Error != "" {
			t.Fatalf("%s: %s", job.Out, res[i].Error)
		}
		want := wants[i].Tensors
		if job.Format == string(formats.SafetensorsFile) {
			// A safetensors file keeps a tied tensor once (its alias in the metadata).
			for alias, of := range wants[i].Tied {
				if _, ok := res[i].Tensors[of]; ok {
					res[i].Tensors[alias] = res[i].Tensors[of]
				}
			}
		}
		sameTensors(t, res[i].Tensors, want, "")
	}
}

// TestZeROOptimizerState reads both ZeRO folders with their optimizer state consolidated
// (convert --zero-optimizer): the model is zero_to_fp32's weights, unchanged, and the
// optimizer state by parameter name is what DeepSpeed's ds_to_universal.py extracts from
// the same partitions (the ZeRO-2 moments keep the last rank's padding, stripped here) —
// same names in the same order, bytes, and every parameter's step its own tensor. Converted
// to a torch file, a DCP folder and a safetensors file, torch loads it bit-identical.
func TestZeROOptimizerState(t *testing.T) {
	fx := zeroFixtures(t)
	for name, want := range fx {
		ck, err := formats.OpenWith(context.Background(), "../testdata/ecosystem/zero/"+name, formats.OpenOptions{ZeROOptimizer: true})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := inspect.Build(context.Background(), ck, inspect.Options{Hash: true})
		ck.Close()
		if err != nil {
			t.Fatal(err)
		}
		var model, optim []string
		for _, tn := range rep.Tensors {
			g := torchEntry{tn.DType, tn.Shape, tn.SHA256}
			switch {
			case strings.HasPrefix(tn.Name, "model."):
				n := strings.TrimPrefix(tn.Name, "model.")
				model = append(model, n)
				if w := want.Tensors.Entries[n]; !reflect.DeepEqual(g, w) {
					t.Errorf("%s %s: %+v, zero_to_fp32 gives %+v", name, tn.Name, g, w)
				}
			case strings.HasPrefix(tn.Name, "optimizer."):
				n := strings.TrimPrefix(tn.Name, "optimizer.")
				optim = append(optim, n)
				if w := want.Optimizer.Entries[n]; !reflect.DeepEqual(g, w) {
					t.Errorf("%s %s: %+v, ds_to_universal gives %+v", name, tn.Name, g, w)
				}
				if strings.HasSuffix(n, ".step") && tn.SharesStorageWith != "" {
					t.Errorf("%s %s shares storage with %s", name, tn.Name, tn.SharesStorageWith)
				}
			default:
				t.Errorf("%s: unexpected %s", name, tn.Name)
			}
		}
		if !reflect.DeepEqual(model, want.Tensors.Names) || !reflect.DeepEqual(optim, want.Optimizer.Names) {
			t.Errorf("%s: model %v optimizer %v\nwant %v %v", name, model, optim, want.Tensors.Names, want.Optimizer.Names)
		}
	}
	if _, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/ecosystem/dcp/zstd", Dst: filepath.Join(t.TempDir(), "x.pt"), Format: formats.TorchFile, Plan: plan.Options{ZeROOptimizer: true}}); !errors.Is(err, ckpterr.ErrUnsupported) || !strings.Contains(err.Error(), "not one") {
		t.Errorf("ZeROOptimizer on a DCP folder: %v", err)
	}
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	var jobs []ecosystemJob
	var wants []zeroFixture
	for name, want := range fx {
		for _, format := range []formats.Layout{formats.TorchFile, formats.SafetensorsFile, formats.DCPFolder} {
			dst := filepath.Join(host, name+"-optim-"+string(format))
			if format == formats.TorchFile {
				dst += ".pt"
			}
			if _, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/ecosystem/zero/" + name, Dst: dst, Format: format, Plan: plan.Options{ZeROOptimizer: true}}); err != nil {
				t.Fatalf("%s → %s: %v", name, format, err)
			}
			if rep, err := verify.Check(context.Background(), dst, ""); err != nil || !rep.OK() {
				t.Errorf("%s → %s: check %+v %v", name, format, rep, err)
			}
			jobs = append(jobs, ecosystemJob{Out: chrootPath(host, chroot, dst), Format: string(format), WeightsOnly: true})
			wants = append(wants, want)
		}
	}
	res := loadInTorch(t, o, host, jobs)
	for i, job := range jobs {
		if res[i].Error != "" {
			t.Fatalf("%s: %s", job.Out, res[i].Error)
		}
		if job.Format == string(formats.SafetensorsFile) {
			for alias, of := range wants[i].Tied {
				if v, ok := res[i].Tensors["model."+of]; ok {
					res[i].Tensors["model."+alias] = v
				}
			}
		}
		sameTensors(t, res[i].Tensors, wants[i].Tensors, "model")
		sameTensors(t, res[i].Tensors, wants[i].Optimizer, "optimizer")
	}
}
