package formats_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing/fstest"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats"
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

// Errors of every format share one family: a broken file is ckpterr.ErrCorrupt, whatever
// its format, and a *ckpterr.FormatError names the file, the tensor and the byte.
func ExampleOpen_errors() {
	_, err := formats.Open(context.Background(), "../testdata/safetensors/crafted/overlap.safetensors")
	fmt.Println(errors.Is(err, ckpterr.ErrCorrupt))
	var fe *ckpterr.FormatError
	if errors.As(err, &fe) {
		fmt.Println(fe.Format, fe.Item, fe.Offset)
	}
	fmt.Println(err)
	// Output:
	// true
	// safetensors b 62
	// ../testdata/safetensors/crafted/overlap.safetensors: safetensors: "b": byte 62: data_offsets [4, 8] overlap the previous tensor, which ends at 8
}

// Read a checkpoint from any io.ReaderAt — bytes in memory here, an HTTP range reader or
// an object in an archive as well — as archive/zip.NewReader does: no path, no folder.
func ExampleOpenFile() {
	data, err := os.ReadFile("../testdata/torch/views.pt") // or downloaded, or embedded
	if err != nil {
		panic(err)
	}
	ck, err := formats.OpenFile(context.Background(), bytes.NewReader(data), int64(len(data)), "views.pt")
	if err != nil {
		panic(err)
	}
	defer ck.Close()
	tensors, _ := ck.Tensors()
	fmt.Println(ck.Format, ck.Path, len(tensors), "tensors")
	fmt.Println(tensors[0].Name, tensors[0].Tensor.DType, tensors[0].Tensor.Shape)
	// Output:
	// torch-zip fs:///views.pt 28 tensors
	// transposed float32 [4 3]
}

// Read any checkpoint, folders included, from an fs.FS — an in-memory one here; os.DirFS,
// an os.Root's FS or embed.FS the same way. The sharded Hugging Face folder's index,
// shards and config.json all come through fsys.
func ExampleOpenFS() {
	fsys := fstest.MapFS{}
	entries, _ := os.ReadDir("../testdata/hf/mistral_sharded")
	for _, e := range entries {
		b, err := os.ReadFile("../testdata/hf/mistral_sharded/" + e.Name())
		if err != nil {
			panic(err)
		}
		fsys["models/mistral/"+e.Name()] = &fstest.MapFile{Data: b}
	}
	ck, err := formats.OpenFS(context.Background(), fsys, "models/mistral")
	if err != nil {
		panic(err)
	}
	defer ck.Close()
	tensors, _ := ck.Tensors()
	config, _ := fs.ReadFile(ck.Files, "config.json")
	fmt.Println(ck.Format, ck.Path, len(tensors), "tensors,", ck.Extras)
	fmt.Println("config.json:", len(config), "bytes")
	// Output:
	// hf-safetensors-sharded fs:///models/mistral 20 tensors, [config.json generation_config.json]
	// config.json: 672 bytes
}
