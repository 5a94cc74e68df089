package convert

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/oracle"
	"github.com/ckpt-dev/ckpt/runtime"
)

// TestShardedDCPLoadsInTorch converts a Llama-style checkpoint with its AdamW state
// (testdata/runtime/llama_adamw.py: vocabulary 61 and MLP width 44, which no mesh divides)
// into per-device DCP folders for CPU ranks on several meshes, and has torch check each
// one (check_sharded_dcp.py) with as many gloo processes as the mesh has ranks: each
// rank's local shards, built with distribute_tensor from the original, equal bit for bit
// what dcp.load gives it; its .distcp file holds only its own pieces; another layout loads
// the same values; torch's own dcp.save of the same DTensors puts every item in the same
// file; and one process reassembles the whole model and optimizer. "fsdp=2,tp=2" is
// torchtitan's order, where FSDP2 shards what TP cut (_StridedShard).
func TestShardedDCPLoadsInTorch(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	src := filepath.Join(host, "llama.pt")
	if _, err := o.Python("testdata/runtime/llama_adamw.py", chroot+"/llama.pt"); err != nil {
		t.Fatal(err)
	}
	meshes := []string{"fsdp=4", "tp=2,fsdp=2", "tp=8", "fsdp=2,tp=2"}
	if testing.Short() {
		meshes = meshes[:2]
	}
	for _, ms := range meshes {
		t.Run(ms, func(t *testing.T) {
			target, err := runtime.NewTarget(runtime.Spec{Device: "cpu", Mesh: ms})
			if err != nil {
				t.Fatal(err)
			}
			name := "out-" + filepath.Base(t.Name())
			opts := DefaultOptions(src, filepath.Join(host, name))
			opts.Format, opts.Target = formats.DCPFolder, target
			sum, err := Run(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Sharding == nil || sum.Sharding.Ranks != target.Ranks() || sum.Sharding.Sharded == 0 {
				t.Fatalf("sharding report %+v", sum.Sharding)
			}
			work := "work-" + filepath.Base(t.Name())
			if err := os.Mkdir(filepath.Join(host, work), 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := o.Python("testdata/runtime/check_sharded_dcp.py", chroot+"/llama.pt", chroot+"/"+name, ms, chroot+"/"+work)
			if err != nil {
				t.Fatal(err)
			}
			var res struct {
				OK     bool     `json:"ok"`
				Errors []string `json:"errors"`
				Ranks  []struct {
					Loaded, OwnItems, OtherLayout, TorchItems int
				} `json:"ranks"`
				SingleProcess int `json:"single_process"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			for _, e := range res.Errors {
				t.Error(e)
			}
			// 21 parameters with 3 optimizer tensors each, plus the param-group values.
			if len(res.Ranks) != target.Ranks() || res.SingleProcess < 21*4 || !res.OK {
				t.Fatalf("%d ranks checked, %d values reassembled: %s", len(res.Ranks), res.SingleProcess, out)
			}
			t.Logf("%s", out)
		})
	}
}
