package formats_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Open any checkpoint — a torch.save file here; a safetensors file, a Hugging Face folder or
// a DCP directory the same way — and walk its tensors without reading their bytes.
func ExampleOpen() {
	ck, err := formats.Open(context.Background(), "../testdata/torch/shufflenet_cuda.pt")
	if err != nil {
		panic(err)
	}
	defer ck.Close()
	tensors, _ := ck.Tensors()
	var total int64
	for _, nt := range tensors {
		total += nt.Tensor.NBytes()
	}
	first := tensors[0]
	fmt.Println(ck.Format, len(tensors), "tensors,", total, "bytes")
	fmt.Println(first.Name, first.Tensor.DType, first.Tensor.Shape, "saved on", first.Tensor.Storage.Location)
	// Output:
	// torch-zip 338 tensors, 1440424 bytes
	// conv1.0.weight float32 [24 3 3 3] saved on cuda:0
}

// Errors of every format share one family: a broken file is statedict.ErrCorrupt, whatever
// its format, and the message still names the file and the byte.
func ExampleOpen_errors() {
	_, err := formats.Open(context.Background(), "../testdata/safetensors/crafted/overlap.safetensors")
	fmt.Println(errors.Is(err, statedict.ErrCorrupt))
	fmt.Println(err)
	// Output:
	// true
	// ../testdata/safetensors/crafted/overlap.safetensors: safetensors: tensor "b": byte 62: data_offsets [4, 8] overlap the previous tensor, which ends at 8
}
