package plan_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// A training checkpoint saved on cuda:0, planned for TorchTPU in bfloat16: the weights are
// cast and tagged "tpu", the AdamW moments keep float32 and follow their parameters, the
// step counters stay where torch put them, and the CUDA RNG state is dropped.
func Example() {
	ck, err := formats.Open(context.Background(), "../testdata/torch/training_cuda.pt")
	if err != nil {
		log.Fatal(err)
	}
	defer ck.Close()
	target, err := runtime.NewTarget(runtime.Spec{Device: "tpu"})
	if err != nil {
		log.Fatal(err)
	}
	p, err := plan.Make(ck, plan.Options{Layout: formats.TorchFile, DType: statedict.BFloat16, StripWrappers: true, PlainData: true}, target)
	if err != nil {
		log.Fatal(err)
	}
	p.Each(func(e plan.Entry) error {
		if e.Name == "model.fc1.weight" || e.Param == "model.fc1.weight" || e.Role == plan.RNG {
			fmt.Println(strings.TrimSpace(fmt.Sprintf("%-40s %-16s %-8s %s %s", e.Name, e.Role, e.Tensor.DType, e.Tensor.Storage.Location, e.Param)))
		}
		return nil
	})
	for _, w := range p.Warnings {
		fmt.Println("warning:", w.Message)
	}
	// Output:
	// model.fc1.weight                         weight           bfloat16 tpu
	// optimizer.state.0.step                   optimizer step   float32  cpu model.fc1.weight
	// optimizer.state.0.exp_avg                optimizer moment float32  tpu model.fc1.weight
	// optimizer.state.0.exp_avg_sq             optimizer moment float32  tpu model.fc1.weight
	// rng.cpu                                  rng state        uint8    cpu
	// warning: dropped 1 CUDA RNG state (rng.cuda): they mean nothing on a TPU
}
