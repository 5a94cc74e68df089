package dcp

import (
	"context"
	"fmt"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// BenchmarkOpenManyTensors opens a DCP checkpoint of 2,000 small tensors (the shape of a
// large model's state dict with its optimizer state), written by this package: one rank,
// and the same tensors split by rows over 4 ranks. Open's per-tensor work — the storage
// lookup of each chunk, the shards a multi-rank checkpoint records — is what it measures.
func BenchmarkOpenManyTensors(b *testing.B) {
	const n = 2000
	for _, ranks := range []int{1, 4} {
		b.Run(fmt.Sprintf("ranks=%d", ranks), func(b *testing.B) {
			root := statedict.NewDict("")
			sh := &statedict.Sharding{Ranks: ranks, Tensors: map[*statedict.Tensor]*statedict.TensorSharding{}}
			for i := range n {
				x := f32(i, 4, 2)
				root.Set(fmt.Sprintf("layers.%d.w", i), x)
				ts := &statedict.TensorSharding{}
				for r := range ranks {
					ts.Pieces = append(ts.Pieces, statedict.Piece{Offsets: []int64{int64(4 / ranks * r), 0}, Sizes: []int64{int64(4 / ranks), 2}, Ranks: []int{r}})
				}
				sh.Tensors[x] = ts
			}
			opts := statedict.WriteOptions{}
			if ranks > 1 {
				opts.Sharding = sh
			}
			dir := b.TempDir()
			if _, err := Write(dirOutput(dir), &statedict.Checkpoint{Root: root}, opts); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				ck, err := Open(context.Background(), dir)
				if err != nil {
					b.Fatal(err)
				}
				if got := len(ck.Shards); (ranks > 1) != (got == n) {
					b.Fatalf("%d tensors with shards", got)
				}
				ck.Close()
			}
		})
	}
}
