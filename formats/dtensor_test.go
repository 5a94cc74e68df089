package formats

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// dtensorExpected is testdata/dtensor/LAYOUT.json: what torch's DTensor.full_tensor()
// gives for every tensor of the ranks' saves (gen.py).
type dtensorExpected struct {
	World   int `json:"world"`
	Tensors map[string]struct {
		Shape      []int64  `json:"shape"`
		DType      string   `json:"dtype"`
		SHA256     string   `json:"sha256"`
		Placements []string `json:"placements"`
	} `json:"tensors"`
}

func readDTensorExpected(t *testing.T, layout string) dtensorExpected {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "dtensor", layout+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var e dtensorExpected
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// checkDTensorListing asserts that ck holds exactly the tensors torch lists, each
// bit-identical to DTensor.full_tensor().
func checkDTensorListing(t *testing.T, ck *statedict.Checkpoint, e dtensorExpected) {
	t.Helper()
	ts, err := ck.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != len(e.Tensors) {
		t.Errorf("%d tensors, torch lists %d", len(ts), len(e.Tensors))
	}
	for _, nt := range ts {
		want, ok := e.Tensors[nt.Name]
		if !ok {
			t.Errorf("%s: not in torch's listing", nt.Name)
			continue
		}
		if nt.Tensor.DTensor != nil {
			t.Errorf("%s: a shard, not the whole tensor", nt.Name)
		}
		if !slices.Equal(nt.Tensor.Shape, want.Shape) || nt.Tensor.DType.String() != want.DType {
			t.Errorf("%s: %s %v, torch %s %v", nt.Name, nt.Tensor.DType, nt.Tensor.Shape, want.DType, want.Shape)
			continue
		}
		b, err := nt.Tensor.Bytes()
		if err != nil {
			t.Errorf("%s: %v", nt.Name, err)
			continue
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want.SHA256 {
			t.Errorf("%s: sha256 %s, torch's full_tensor() %s", nt.Name, got, want.SHA256)
		}
	}
}

// TestDTensorRanks reads real FSDP2 per-rank saves (uneven and empty shards, HSDP's
// (Replicate, Shard) on a 2-D mesh, FSDP2 over tensor parallelism with _StridedShard) as
// the folder and as each rank file alone: every tensor, weights and AdamW moments, is
// what torch's full_tensor() gives, bit for bit.
func TestDTensorRanks(t *testing.T) {
	ctx := context.Background()
	for _, layout := range []string{"fsdp2", "hsdp", "fsdp_tp"} {
		t.Run(layout, func(t *testing.T) {
			e := readDTensorExpected(t, layout)
			dir := filepath.Join("..", "testdata", "dtensor", layout)
			paths := []string{dir}
			files, _ := filepath.Glob(filepath.Join(dir, "*.pt"))
			if len(files) != e.World {
				t.Fatalf("%d rank files, world %d", len(files), e.World)
			}
			paths = append(paths, files...)
			for _, p := range paths {
				ck, err := Open(ctx, p)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if ck.Format != DTensorRanks {
					t.Errorf("%s: format %q", p, ck.Format)
				}
				checkDTensorListing(t, ck, e)
				if epoch, _ := ck.Root.(*statedict.Dict).Get("epoch"); epoch != int64(3) {
					t.Errorf("%s: epoch %v, want 3 (kept once)", p, epoch)
				}
				ck.Close()
			}
		})
	}
}
