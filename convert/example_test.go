package convert_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/optimizerstate"
)

// A loader in thirty lines: open a checkpoint in any format, list its tensors, decode one
// to float32, find its AdamW moments by the parameter's name, then convert it for the TPU
// with a context cancelled halfway — and see that nothing was left behind.
func Example_loader() {
	ck, err := formats.Open(context.Background(), "../testdata/torch/training_cuda.pt")
	if err != nil {
		panic(err)
	}
	defer ck.Close()
	tensors, _ := ck.Tensors()
	fmt.Println(len(tensors), "tensors, first", tensors[0].Name, tensors[0].Tensor.Shape)

	w, _ := ck.Tensor("model.fc2.bias")
	vals, _ := codec.Float32s(w)
	fmt.Printf("model.fc2.bias[0] = %.4f\n", vals[0])

	st, _ := optimizerstate.StateFor(ck.Root, "model.fc2.bias")
	fmt.Println("optimizer id", st.ID, "has exp_avg", st.Tensor("exp_avg").Shape, "exp_avg_sq", st.Tensor("exp_avg_sq").Shape)

	dir, _ := os.MkdirTemp("", "ckpt-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	opts := convert.DefaultOptions(ck.Path, filepath.Join(dir, "tpu.pt"))
	opts.Progress = func(done, total int64) {
		if done >= total/2 {
			cancel() // the user pressed Ctrl-C halfway
		}
	}
	_, err = convert.Run(ctx, opts)
	left, _ := os.ReadDir(dir)
	fmt.Println("cancelled:", errors.Is(err, context.Canceled), "files left:", len(left))
	// Output:
	// 26 tensors, first model.fc1.weight [16 8]
	// model.fc2.bias[0] = 0.0924
	// optimizer id 5 has exp_avg [4] exp_avg_sq [4]
	// cancelled: true files left: 0
}

// Convert a checkpoint as `ckpt convert --to tpu` does and read the summary.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "ckpt-example")
	defer os.RemoveAll(dir)
	opts := convert.DefaultOptions("../testdata/torch/training_cuda.pt", filepath.Join(dir, "model.safetensors"))
	sum, err := convert.Run(context.Background(), opts)
	if err != nil {
		panic(err)
	}
	fmt.Println(sum.Format, sum.Tensors, "tensors; storages tagged cuda:0 →", sum.Remap.Locations["cuda:0"])
	fmt.Println("manifest:", filepath.Base(sum.Manifest))
	// Output:
	// safetensors 25 tensors; storages tagged cuda:0 → tpu
	// manifest: model.safetensors.ckpt-manifest.json
}
