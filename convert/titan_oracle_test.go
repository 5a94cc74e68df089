package convert

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/runtime"
)

// TestTorchTitanResumesOnMesh: TorchTitan checkpoints written by torch in this run
// (testdata/titan/gen.py, a replica of torchtitan's CheckpointManager save path — torchtitan
// is not packaged in Debian): by one process, by FSDP2 on 2 gloo ranks, and the same with
// torch's nested FQN optimizer form. Each converts for a v5p-8 (`--to tpu --topology v5p-8
// --format dcp`: an fsdp=4 mesh over its 4 devices; a DCP folder records no device, so CPU
// ranks read it as TPU ones would) with every weight and its exp_avg / exp_avg_sq split over
// the 4 ranks, the scheduler and train_state kept and the 2-rank (or 1-rank) data-loader
// state dropped, said so. Then check_resume.py has torch load it on 4 gloo ranks with FSDP2
// (dcp.load through torchtitan's load path): every parameter and moment equal to the
// original bit for bit, each weight and moment in 4 chunks, chunk r in rank r's file, and 3
// AdamW steps from there equal to the same 3 steps on the original layout within float32
// reduction-order tolerance (|Δ| ≤ 1e-6 + 1e-5·|p|: the two runs sum the same gradients in
// another order; Adam's update passes that on scaled by lr ≈ 8e-4, while a wrong moment,
// step or learning rate moves parameters by about lr).
func TestTorchTitanResumesOnMesh(t *testing.T) {
	resumesOnMesh(t, []resumeCase{{"single", "single", "flat"}, {"fsdp2", "fsdp2", "flat"}})
}

// TestTopLevelNestedFQNResumesOnMesh: as TestTorchTitanResumesOnMesh, with the optimizer
// state in torch's nested FQN form (get_optimizer_state_dict without flattening) beside the
// top-level model, saved by FSDP2 on 2 gloo ranks.
func TestTopLevelNestedFQNResumesOnMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute and a half of gloo ranks")
	}
	resumesOnMesh(t, []resumeCase{{"fsdp2-nested", "fsdp2", "nested"}})
}

// resumeCase is a checkpoint gen.py writes: its layout (single, fsdp2) and optimizer form
// (flat, nested).
type resumeCase struct{ name, layout, form string }

func resumesOnMesh(t *testing.T, cases []resumeCase) {
	o := oracle.Require(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			host, chroot := oracle.TempDir(t)
			for _, d := range []string{"gen", "work"} {
				if err := os.Mkdir(filepath.Join(host, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			args := []string{"testdata/titan/gen.py", tc.layout, chroot + "/src"}
			if tc.layout == "fsdp2" {
				args = append(args, chroot+"/gen", tc.form)
			}
			if _, err := o.Python(args...); err != nil {
				t.Fatal(err)
			}
			target, err := runtime.NewTarget(runtime.Spec{Device: "tpu", Topology: "v5p-8"})
			if err != nil {
				t.Fatal(err)
			}
			opts := DefaultOptions(filepath.Join(host, "src", "step-2"), filepath.Join(host, "out"))
			opts.Format, opts.Target = formats.DCPFolder, target
			sum, err := Run(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			// 21 weights, each with exp_avg and exp_avg_sq; the step counters whole.
			if s := sum.Sharding; s == nil || s.Ranks != 4 || s.Mesh != "fsdp=4" || s.Sharded != 63 {
				t.Fatalf("sharding %+v", sum.Sharding)
			}
			if len(sum.Remap.Optimizers) != 1 {
				t.Fatalf("optimizers %+v", sum.Remap.Optimizers)
			}
			if r := sum.Remap.Optimizers[0]; r.MappedBy != optimizerstate.ByFQN || r.Tied != 21 || r.NotTied != 0 || r.Flat != (tc.form == "flat") || r.Model != "" {
				t.Errorf("optimizer %+v", r)
			}
			carried := map[string]string{}
			for _, c := range sum.Remap.Carried {
				carried[c.Path] = c.Action
			}
			if want := map[string]string{"dataloader": "dropped", "lr_scheduler": "kept", "train_state": "kept"}; len(carried) != 3 ||
				carried["dataloader"] != want["dataloader"] || carried["lr_scheduler"] != want["lr_scheduler"] || carried["train_state"] != want["train_state"] {
				t.Errorf("training state %v", sum.Remap.Carried)
			}
			warned := false
			for _, w := range sum.Warnings {
				warned = warned || w.Kind == "training_state_dropped" && w.Dropped && len(w.Items) == 1 && w.Items[0] == "dataloader"
			}
			if !warned {
				t.Errorf("no warning for the dropped data-loader state: %+v", sum.Warnings)
			}
			out, err := o.Python("testdata/titan/check_resume.py", tc.layout, chroot+"/src/step-2", chroot+"/out", chroot+"/work", tc.form)
			if err != nil {
				t.Fatal(err)
			}
			var res struct {
				OK       bool     `json:"ok"`
				Errors   []string `json:"errors"`
				Compared int      `json:"compared"`
				Split    int      `json:"split"`
				MaxDiff  float64  `json:"max_diff"`
				Moved    float64  `json:"moved"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			for _, e := range res.Errors {
				t.Error(e)
			}
			// 84 tensors (21 weights, 63 optimizer tensors) bit for bit; the parameters moved by
			// far more than the tolerance in 3 steps, so a wrong resume cannot pass.
			if !res.OK || res.Compared != 84 || res.Split != 63 || res.Moved < 1e-4 {
				t.Fatalf("%s", out)
			}
			t.Logf("%s", out)
		})
	}
}
