package convert_test

import (
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/runtime"
)

// TestTrainerResumesOnMesh runs transformers' Trainer in the oracle (two AdamW steps on a
// tiny random model, CPU; testdata/runtime/trainer_resume.py), converts its checkpoint-2/
// as `ckpt convert --to tpu --topology v5p-8 --format dcp` does, and has torch resume from
// the output on 4 gloo CPU ranks under FSDP2: every weight and every exp_avg / exp_avg_sq
// is tied by the Trainer's grouping, split over the 4 devices and bit-identical to the
// Trainer's files in each rank's shard, each rank's file holds its own pieces, and three
// optimizer steps from the loaded state give the parameters three steps from the
// Trainer's own files give on the original layout (float32 reduction-order tolerance, see
// the script). Qwen2 has biases on q/k/v, so the Trainer's no-decay group interleaves
// biases and norms in the model's order; Llama with attention_bias too, in full runs.
func TestTrainerResumesOnMesh(t *testing.T) {
	o := oracle.Require(t)
	families := []string{"qwen2", "llama"}
	if testing.Short() {
		families = families[:1]
	}
	for _, mt := range families {
		t.Run(mt, func(t *testing.T) {
			host, chroot := oracle.TempDir(t)
			if _, err := o.Python("testdata/runtime/trainer_resume.py", "train", mt, chroot); err != nil {
				t.Fatal(err)
			}
			src := filepath.Join(host, "checkpoint-2")
			target, err := runtime.NewTarget(runtime.Spec{Device: runtime.TPU, Topology: "v5p-8"})
			if err != nil {
				t.Fatal(err)
			}
			opts := convert.DefaultOptions(src, filepath.Join(host, "out"))
			opts.Format, opts.Target = formats.DCPFolder, target
			sum, err := convert.Run(t.Context(), opts)
			if err != nil {
				t.Fatal(err)
			}
			rep := sum.Remap.Optimizers
			if len(rep) != 1 || rep[0].MappedBy != optimizerstate.ByTrainerGrouping || rep[0].ParamOrder != "model_type "+mt+" (config.json)" {
				t.Fatalf("optimizers %+v, want one tied by the Trainer's grouping in %s's order", rep, mt)
			}
			// Every weight and its two moments are split over the 4 devices.
			if sum.Sharding == nil || sum.Sharding.Ranks != 4 || sum.Sharding.Sharded != 3*rep[0].Params {
				t.Fatalf("sharding %+v, want the %d weights and their moments over 4 ranks", sum.Sharding, rep[0].Params)
			}
			for _, w := range sum.Warnings {
				if w.Kind == "optimizer_unsharded" || w.Kind == "optimizer_unmapped" {
					t.Errorf("warning: %s", w.Message)
				}
			}
			res := checkMeshResume(t, o, host, chroot+"/work", "testdata/runtime/trainer_resume.py", rep[0].Params, chroot+"/checkpoint-2", chroot+"/out")
			t.Logf("%d parameters; after 3 steps: max |resumed - reference| %.3g, parameters moved up to %.3g, swapped-moments control %.3g",
				res.Params, res.MaxDiff, res.Moved, res.Control)
		})
	}
}
