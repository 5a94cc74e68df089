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

// TestAccelerateFSDPResumesOnMesh converts testdata/runtime/accelerate_fsdp2/ — an
// accelerate save_state folder of an FSDP2 run on 2 gloo ranks, written by accelerate's own
// save_fsdp_model, save_fsdp_optimizer and save_accelerator_state
// (testdata/runtime/accelerate_fsdp_resume.py save) — as `ckpt convert --to tpu --topology
// v5p-8 --format dcp` does, and has torch resume from the output under FSDP2 on 4 gloo
// ranks: the optimizer state, saved by parameter name, is tied by FQN; every weight and
// every exp_avg / exp_avg_sq is split over the 4 devices and bit-identical in each rank's
// shard to what the source holds; each rank's file holds its own pieces; three optimizer
// steps from the loaded state give the parameters three steps give from the source on its
// own layout, loaded by accelerate's load_fsdp_model and load_fsdp_optimizer on 2 ranks
// (float32 reduction-order tolerance, see the script).
func TestAccelerateFSDPResumesOnMesh(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	const src = "../testdata/runtime/accelerate_fsdp2"
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
	if len(rep) != 1 || rep[0].Path != "optimizer_0.optimizer" || rep[0].MappedBy != optimizerstate.ByFQN || rep[0].Params != 27 {
		t.Fatalf("optimizers %+v, want optimizer_0's 27 parameters tied by name", rep)
	}
	if sum.Sharding == nil || sum.Sharding.Ranks != 4 || sum.Sharding.Sharded != 3*27 {
		t.Fatalf("sharding %+v, want the 27 weights and their moments over 4 ranks", sum.Sharding)
	}
	for _, w := range sum.Warnings {
		if w.Dropped || w.Kind == "optimizer_unsharded" {
			t.Errorf("warning: %s", w.Message)
		}
	}
	res := checkMeshResume(t, o, host, chroot+"/work", "testdata/runtime/accelerate_fsdp_resume.py", 27, "testdata/runtime/accelerate_fsdp2", chroot+"/out")
	t.Logf("after 3 steps: max |resumed - reference| %.3g, parameters moved up to %.3g, swapped-moments control %.3g", res.MaxDiff, res.Moved, res.Control)
}
