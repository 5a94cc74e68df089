package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/statedict"
)

// TestInspectOptimizer shows the mapping of a real training checkpoint, as text and JSON.
func TestInspectOptimizer(t *testing.T) {
	const src = "../../testdata/optim/llama_cuda.pt"
	out, err := run(t, "inspect", "--optimizer", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"optimizer state optimizer: AdamW, index form, 2 groups, 20 parameters", "tied to model by trainer grouping: 20 parameters, 0 not tied",
		"15  1      model.layers.0.input_layernorm.weight", "not an optimizer parameter: lm_head.weight (tied to model.embed_tokens.weight)",
		"LR scheduler scheduler: LambdaLR", "RNG states: CPU rng.cpu; CUDA rng.cuda.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	out, err = run(t, "inspect", "--optimizer", "--json", src)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Training struct {
			Optimizers []struct {
				MappedBy string `json:"mapped_by"`
				Params   []struct {
					ID   int64  `json:"id"` // an int, as the optimizer saved it (issue 15, item 7)
					Name string `json:"name"`
				} `json:"params"`
			} `json:"optimizers"`
		} `json:"training"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if o := rep.Training.Optimizers; len(o) != 1 || o[0].MappedBy != "trainer grouping" || o[0].Params[19].Name != "model.norm.weight" || o[0].Params[19].ID != 19 {
		t.Errorf("training %+v", rep.Training)
	}
}

// TestInspectTrainerFolder: inspect --optimizer reads a Trainer checkpoint-N folder's
// optimizer.pt, scheduler.pt and rng_state.pth with the weights (it listed them as not
// read) and ties the optimizer by the Trainer's grouping, in the order config.json's
// model_type registers the parameters in (model.safetensors lists them by name).
func TestInspectTrainerFolder(t *testing.T) {
	out, err := run(t, "inspect", "--optimizer", "../../testdata/ecosystem/folders/trainer/checkpoint-2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"optimizer state optimizer: AdamW, index form, 2 groups, 21 parameters",
		"tied to model by trainer grouping (parameter order: model_type llama (config.json)): 21 parameters, 0 not tied",
		"5   0      model.layers.0.mlp.gate_proj.weight", "15  0      lm_head.weight", "16  1      model.layers.0.input_layernorm.weight",
		"LR scheduler scheduler: LambdaLR", "RNG states: CPU rng_state.cpu",
		"not read (weights or pickles outside this hf-safetensors checkpoint): training_args.bin"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// TestInspectOptimizerMismatch: an optimizer state saved with another model is reported
// with the parameter and the model entry at fault, and exit status 4.
func TestInspectOptimizerMismatch(t *testing.T) {
	llama, err := formats.Open(context.Background(), "../../testdata/optim/llama_cuda.pt")
	if err != nil {
		t.Fatal(err)
	}
	defer llama.Close()
	mlp, err := formats.Open(context.Background(), "../../testdata/optim/mlp_cuda.pt")
	if err != nil {
		t.Fatal(err)
	}
	defer mlp.Close()
	root := statedict.NewDict("")
	m, _ := mlp.Root.(*statedict.Dict).Get("model")
	o, _ := llama.Root.(*statedict.Dict).Get("optimizer")
	root.Set("model", m)
	root.Set("optimizer", o)
	path := filepath.Join(t.TempDir(), "mixed.pt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := torchzip.Write(f, root, torchzip.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "inspect", "--optimizer", path)
	if exitStatus(err) != exitMismatch ||
		!strings.Contains(err.Error(), `optimizer parameter 0 vs model entry "fc1.weight": exp_avg has shape [64 16], the parameter [16 8]`) {
		t.Fatalf("exit %v", err)
	}
	if !strings.Contains(out, "MISMATCH with model") || !strings.Contains(out, "not tied to a model: 20 parameters") {
		t.Errorf("report:\n%s", out)
	}
	out, err = run(t, "convert", "--to", "tpu", "--progress", "never", path, filepath.Join(t.TempDir(), "out.pt"))
	if err != nil || !strings.Contains(out, "optimizer state optimizer (AdamW, index form): 20 parameters; not tied to a model: 20 parameters (see warning)") {
		t.Errorf("%v: %s", err, out)
	}
}

// TestTorchTitanCLI: inspect --optimizer and convert say how a TorchTitan checkpoint's
// flattened optimizer state is tied to the model at its top level, how many parameters are
// not, and what becomes of the training state beside them on a 4-device mesh.
func TestTorchTitanCLI(t *testing.T) {
	const src = "../../testdata/titan/fsdp2/step-2"
	out, err := run(t, "inspect", "--optimizer", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"optimizer state optimizer: AdamW, fqn (flattened) form, 1 group, 21 parameters", "tied to (root) by fqn: 21 parameters, 0 not tied",
		"layers.1.feed_forward.w2.weight  0      layers.1.feed_forward.w2.weight  [16 44]", "LR scheduler lr_scheduler: LRScheduler"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	dst := filepath.Join(t.TempDir(), "out")
	out, err = run(t, "convert", "--to", "tpu", "--topology", "v5p-8", "--format", "dcp", "--progress", "never", src, dst)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"optimizer state optimizer (AdamW, fqn (flattened) form): 21 parameters; tied to (root) by fqn: 21 parameters, 0 not tied",
		"training state kept: lr_scheduler (LRScheduler), train_state (training state)",
		"training state dropped: dataloader (per-rank data-loader state of 2 ranks)",
		"sharded 63 tensors over 4 ranks (mesh fsdp=4)"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	// A per-device safetensors folder holds the tensors alone: nothing of the scheduler or
	// train_state is said to be kept (a warning says they are not written).
	out, err = run(t, "convert", "--to", "tpu", "--topology", "v5p-8", "--format", "safetensors", "--progress", "never", src, filepath.Join(t.TempDir(), "st"))
	if err != nil || strings.Contains(out, "training state kept") {
		t.Errorf("%v\n%s", err, out)
	}
	// verify replays the recorded plan, mesh included: the data-loader state it dropped is
	// expected to be missing, every other value checked.
	if out, err := run(t, "verify", src, dst); err != nil || !strings.Contains(out, "84 equal") {
		t.Errorf("verify: %v\n%s", err, out)
	}
}

// TestConvertTrainingFlags: --keep-cuda-rng, --optimizer-dtype and --optimizer-names.
func TestConvertTrainingFlags(t *testing.T) {
	dir := t.TempDir()
	names := filepath.Join(dir, "names.txt")
	if err := os.WriteFile(names, []byte("# ids 0-5\nfc1.weight\nfc1.bias\nbn.weight\nbn.bias\nfc2.weight\nfc2.bias\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "convert", "--json", "--keep-cuda-rng", "--optimizer-dtype", "bfloat16", "--optimizer-names", "optimizer="+names,
		"../../testdata/optim/mlp_cuda.pt", filepath.Join(dir, "out.pt"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Remap struct {
			Cast       int      `json:"cast"`
			RNG        []string `json:"rng"`
			DroppedRNG []string `json:"dropped_rng"`
			Optimizers []struct {
				MappedBy string `json:"mapped_by"`
			} `json:"optimizers"`
		} `json:"remap"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	r := sum.Remap
	if r.Cast != 6 || !slices.Equal(r.RNG, []string{"rng.cpu", "rng.cuda.0"}) || r.DroppedRNG != nil ||
		len(r.Optimizers) != 1 || r.Optimizers[0].MappedBy != "names file" {
		t.Errorf("remap %+v", r)
	}
	if _, err := run(t, "convert", "--optimizer-dtype", "int8", "../../testdata/optim/mlp_cuda.pt", filepath.Join(dir, "x.pt")); err == nil {
		t.Error("--optimizer-dtype int8 accepted")
	}
}
