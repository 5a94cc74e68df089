package accelerate

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// TestOpenKeepsShards: the stored pieces of a multi-rank FSDP model folder (the DCP
// reader's Checkpoint.Shards) stay on the checkpoint Open returns, so per-device outputs
// and the forward pass see the ranks' pieces.
func TestOpenKeepsShards(t *testing.T) {
	dir := t.TempDir()
	const m = "pytorch_model_fsdp_0"
	if err := os.Mkdir(filepath.Join(dir, m), 0o755); err != nil {
		t.Fatal(err)
	}
	w := &statedict.Tensor{DType: statedict.Float32, Shape: []int64{4}}
	piece := statedict.Shard{Piece: statedict.Piece{Offsets: []int64{2}, Sizes: []int64{2}}}
	openDCP := func(context.Context, string) (*statedict.Checkpoint, error) {
		model := statedict.NewDict("")
		model.Set("w", w)
		top := statedict.NewDict("")
		top.Set("model", model)
		return &statedict.Checkpoint{Root: top, Shards: map[*statedict.Tensor][]statedict.Shard{w: {piece}}}, nil
	}
	ck, err := Open(context.Background(), dir, []string{m}, openDCP)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if got := ck.Shards[w]; len(got) != 1 || got[0].Offsets[0] != 2 {
		t.Fatalf("shards of w: %+v, want the DCP reader's one piece", got)
	}
}
