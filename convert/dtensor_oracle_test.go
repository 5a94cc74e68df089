package convert

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/runtime"
)

// TestDTensorRanksConvert: the per-rank FSDP2 saves of testdata/dtensor (written by real
// torch: uneven and empty shards on 2 ranks, HSDP on a 2x2 mesh, FSDP2 over tensor
// parallelism with _StridedShard, split evenly and not), each read from its folder and from one rank file alone,
// convert to a torch file that torch.load(weights_only=True) reads as every tensor of the
// ranks' full_tensor(), bit for bit — weights and AdamW moments — and to a DCP folder for a
// v5p-8 (fsdp=4) that 4 gloo ranks running FSDP2 resume from with dcp.load: every
// parameter, moment and step as saved, lr and epoch kept (testdata/dtensor/check.py).
func TestDTensorRanksConvert(t *testing.T) {
	o := oracle.Require(t)
	for _, tc := range []struct{ layout, file string }{{"fsdp2", "rank1.pt"}, {"hsdp", "part-3.pt"}, {"fsdp_tp", "rank2.pt"}, {"fsdp_tp_uneven", "rank0.pt"}} {
		t.Run(tc.layout, func(t *testing.T) {
			host, chroot := oracle.TempDir(t)
			expected := "testdata/dtensor/" + tc.layout + ".json"
			src := filepath.Join("..", "testdata", "dtensor", tc.layout)
			check := func(args ...string) {
				t.Helper()
				out, err := o.Python(append([]string{"testdata/dtensor/check.py"}, args...)...)
				if err != nil {
					t.Fatal(err)
				}
				var res struct {
					OK       bool     `json:"ok"`
					Errors   []string `json:"errors"`
					Compared int      `json:"compared"`
				}
				if err := json.Unmarshal(out, &res); err != nil {
					t.Fatalf("%v: %s", err, out)
				}
				for _, e := range res.Errors {
					t.Error(e)
				}
				if !res.OK || res.Compared == 0 {
					t.Fatalf("%s", out)
				}
			}
			for i, in := range []string{src, filepath.Join(src, tc.file)} {
				name := []string{"folder.pt", "file.pt"}[i]
				opts := DefaultOptions(in, filepath.Join(host, name))
				opts.Format = formats.TorchFile
				if _, err := Run(context.Background(), opts); err != nil {
					t.Fatal(err)
				}
				check("load", chroot+"/"+name, expected)
			}
			target, err := runtime.NewTarget(runtime.Spec{Device: "tpu", Topology: "v5p-8"})
			if err != nil {
				t.Fatal(err)
			}
			opts := DefaultOptions(src, filepath.Join(host, "dcp"))
			opts.Format, opts.Target = formats.DCPFolder, target
			sum, err := Run(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			if s := sum.Sharding; s == nil || s.Ranks != 4 || s.Mesh != "fsdp=4" {
				t.Fatalf("sharding %+v", sum.Sharding)
			}
			if len(sum.Remap.Optimizers) != 1 {
				t.Fatalf("optimizers %+v", sum.Remap.Optimizers)
			}
			check("resume", chroot+"/dcp", expected, tc.layout, chroot)
		})
	}
}
