package convert

import (
	"fmt"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/statedict"
)

// BenchmarkPlanManyTensors plans the conversion of a state dict of 20,000 small tensors to
// an HF folder: the remap, the content check and the byte total, walks of the tree whose
// allocations grow with the tensor count.
func BenchmarkPlanManyTensors(b *testing.B) {
	const n = 20000
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		root := statedict.NewDictSize("", n)
		for i := range n {
			shape := []int64{4, 2}
			st := statedict.NewMappedStorage(fmt.Sprint(i), "cpu", statedict.Float32, make([]byte, 32))
			root.Set(fmt.Sprintf("model.layers.%d.w", i), &statedict.Tensor{DType: statedict.Float32, Shape: shape, Strides: statedict.ContiguousStrides(shape), Storage: st})
		}
		ck := &statedict.Checkpoint{Format: "safetensors", Path: "bench", Root: root}
		b.StartTimer()
		p, err := newPlan(ck, Options{Src: "bench", Dst: "out", Format: formats.SafetensorsFile}, formats.HFFolder)
		if err != nil {
			b.Fatal(err)
		}
		if p.sum.Tensors != n || p.Bytes != 32*n {
			b.Fatalf("planned %d tensors, %d bytes", p.sum.Tensors, p.Bytes)
		}
	}
}
