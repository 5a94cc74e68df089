package convert_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/verify"
)

// TestTrainingFolderPerDevice converts the real Trainer checkpoint-2 and accelerate
// save_state folders of testdata/ecosystem per device for a v5p-8 as DCP: the training
// state is inside the output, every optimizer state is tied to the model (the Trainer's by
// its grouping in config.json's order, accelerate's Sequential by the order the names'
// structure fixes though model.safetensors lists them by name) and each of its moments is
// split over the 4 devices with its parameter; ckpt verify finds every value of the source
// in the output. The torch-file output of the same folders verifies too (it held the
// training state in its tree before, and verify compared it with the weights alone).
func TestTrainingFolderPerDevice(t *testing.T) {
	for _, tc := range []struct {
		src, by, order string
		params         int
	}{
		{"trainer/checkpoint-2", "trainer grouping", "model_type llama (config.json)", 21},
		{"accelerate", "order", "the names' structure", 4},
	} {
		t.Run(tc.src, func(t *testing.T) {
			src := filepath.Join(folders, tc.src)
			target, err := runtime.NewTarget(runtime.Spec{Device: runtime.TPU, Topology: "v5p-8"})
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "out")
			opts := convert.DefaultOptions(src, dst)
			opts.Format, opts.Target = formats.DCPFolder, target
			sum, err := convert.Run(t.Context(), opts)
			if err != nil {
				t.Fatal(err)
			}
			rep := sum.Remap.Optimizers
			if len(rep) != 1 || rep[0].MappedBy != tc.by || rep[0].ParamOrder != tc.order || rep[0].Params != tc.params {
				t.Fatalf("optimizers %+v, want %d parameters tied by %s (%s)", rep, tc.params, tc.by, tc.order)
			}
			if sum.Sharding == nil || sum.Sharding.Ranks != 4 || sum.Sharding.Sharded != 3*tc.params {
				t.Errorf("sharding %+v, want %d weights and their two moments each split", sum.Sharding, tc.params)
			}
			if len(sum.Alongside) != 0 {
				t.Errorf("%d files converted alongside; the training state belongs in the tree", len(sum.Alongside))
			}
			for _, out := range []string{dst, filepath.Join(t.TempDir(), "out.pt")} {
				if out != dst {
					o := convert.DefaultOptions(src, out)
					o.Format = formats.TorchFile
					if _, err := convert.Run(t.Context(), o); err != nil {
						t.Fatal(err)
					}
				}
				pr, err := verify.Parity(t.Context(), src, out, verify.ParityOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !pr.OK() || pr.Equal < 3*tc.params {
					t.Errorf("%s: verify: %d equal, problems %v", out, pr.Equal, pr.Problems[:min(3, len(pr.Problems))])
				}
			}
		})
	}
}

// TestTrainerFolderPerDeviceSafetensors: per-rank safetensors files hold tensors only, so
// a per-device safetensors output of a Trainer folder converts its training-state files
// alongside, whole, for the same device, and says so (it failed: each file was converted
// for the mesh, which a torch file cannot hold); ckpt verify checks them too.
func TestTrainerFolderPerDeviceSafetensors(t *testing.T) {
	src := filepath.Join(folders, "trainer/checkpoint-2")
	target, err := runtime.NewTarget(runtime.Spec{Device: runtime.TPU, Topology: "v5p-8"})
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	opts := convert.DefaultOptions(src, dst)
	opts.Format, opts.Target = formats.SafetensorsFile, target
	sum, err := convert.Run(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Alongside) != 3 || !slices.ContainsFunc(sum.Warnings, func(w plan.Warning) bool { return w.Kind == "training_state_whole" }) {
		t.Errorf("%d files alongside, warnings %q", len(sum.Alongside), sum.Messages())
	}
	pr, err := verify.Parity(t.Context(), src, dst, verify.ParityOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !pr.OK() || len(pr.Alongside) != 3 {
		t.Errorf("verify: %+v", pr)
	}
}
