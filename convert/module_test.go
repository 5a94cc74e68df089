package convert_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/statedict"
)

// TestPickledModules converts checkpoints that pickle whole nn.Module objects (torch.save
// of a model; a dict holding a model whose class ckpt cannot import) with PlainData, as the
// CLI does, and checks each module became exactly the state_dict torch gives for it: names
// in torch's order, dtypes, shapes and bytes (testdata/modules/gen.py).
func TestPickledModules(t *testing.T) {
	b, err := os.ReadFile("../testdata/modules/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var expected map[string]json.RawMessage
	if err := json.Unmarshal(b, &expected); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"module.pt", "wrapped.pt"} {
		t.Run(file, func(t *testing.T) {
			var modules map[string][]struct {
				Name, DType, SHA256 string
				Shape               []int64
			}
			if err := json.Unmarshal(expected[file], &modules); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "out.pt")
			sum, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/modules/" + file, Dst: dst, Format: formats.TorchFile,
				Plan: plan.Options{PlainData: true}})
			if err != nil {
				t.Fatal(err)
			}
			if len(sum.Remap.Converted) != len(modules) || !strings.Contains(sum.Remap.Converted[0], "nn.Module") {
				t.Errorf("converted %v", sum.Remap.Converted)
			}
			data, _ := tensorsOf(t, dst)
			ck, err := formats.Open(context.Background(), dst)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			tensors, _ := ck.Tensors()
			for path, want := range modules {
				var got []statedict.NamedTensor
				for _, nt := range tensors {
					if rest, ok := strings.CutPrefix(nt.Name, statedict.JoinName(path, "")); ok || path == "" {
						if path == "" {
							rest = nt.Name
						}
						got = append(got, statedict.NamedTensor{Name: rest, Tensor: nt.Tensor})
					}
				}
				if len(got) != len(want) {
					t.Fatalf("%s: %d tensors, torch's state_dict has %d", path, len(got), len(want))
				}
				for i, w := range want {
					g := got[i]
					full := statedict.JoinName(path, g.Name)
					if g.Name != w.Name || g.Tensor.DType.String() != w.DType || fmt.Sprint(g.Tensor.Shape) != fmt.Sprint(w.Shape) || sha(data[full]) != w.SHA256 {
						t.Errorf("%s entry %d: got %s %s %v, torch has %s %s %v", path, i, g.Name, g.Tensor.DType, g.Tensor.Shape, w.Name, w.DType, w.Shape)
					}
					if g.Tensor.RequiresGrad || g.Tensor.Parameter {
						t.Errorf("%s: not detached as state_dict() returns it", full)
					}
				}
			}
		})
	}
}
