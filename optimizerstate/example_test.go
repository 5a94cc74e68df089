package optimizerstate_test

import (
	"context"
	"fmt"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/optimizerstate"
)

// Find a parameter's optimizer state by the parameter's name: the optimizer is mapped onto
// its model first (ids, order and shapes checked), so the moments found are that
// parameter's.
func ExampleStateFor() {
	ck, err := formats.Open(context.Background(), "../testdata/torch/training_cuda.pt")
	if err != nil {
		panic(err)
	}
	defer ck.Close()
	st, err := optimizerstate.StateFor(ck.Root, "model.fc1.weight")
	if err != nil {
		panic(err)
	}
	lr, _ := st.Options.Get("lr")
	fmt.Println("id", st.ID, "group", st.Group, "lr", lr)
	fmt.Println("exp_avg", st.Tensor("exp_avg").Shape, "step on", st.Tensor("step").Storage.Location)
	// Output:
	// id 0 group 0 lr 0.000905463412215599
	// exp_avg [16 8] step on cpu
}
