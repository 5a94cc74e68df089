package optimizerstate_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/statedict"
)

// tensorAt is a float32 tensor of the given shape over a fresh storage tagged loc.
func tensorAt(loc string, shape ...int64) *statedict.Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	st := statedict.NewMappedStorage(fmt.Sprint(shape), loc, statedict.Float32, make([]byte, 4*n))
	return &statedict.Tensor{DType: statedict.Float32, Shape: shape, Strides: statedict.ContiguousStrides(shape), Storage: st}
}

func tensor(shape ...int64) *statedict.Tensor { return tensorAt("cuda:0", shape...) }

func dict(kv ...any) *statedict.Dict {
	d := statedict.NewDict("")
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

func list(items ...statedict.Value) *statedict.List { return &statedict.List{Items: items} }

// adamState is Adam's per-parameter state for a parameter of the given shape.
func adamState(shape ...int64) *statedict.Dict {
	step := tensorAt("cpu")
	return dict("step", step, "exp_avg", tensor(shape...), "exp_avg_sq", tensor(shape...))
}

// optim builds an Adam-like optimizer state dict. groups list the ids of each group (int
// positions or FQN strings); states maps an id (as printed) to its shape, nil for a
// parameter without state.
func optim(groups [][]statedict.Value, states map[string][]int64) *statedict.Dict {
	st := statedict.NewDict("")
	pg := &statedict.List{}
	for _, g := range groups {
		for _, id := range g {
			if shape, ok := states[statedict.KeyString(id)]; ok && shape != nil {
				st.Set(id, adamState(shape...))
			}
		}
		pg.Items = append(pg.Items, dict("lr", 0.1, "betas", statedict.Tuple{0.9, 0.999}, "amsgrad", false,
			"decoupled_weight_decay", true, "params", list(g...)))
	}
	return dict("state", st, "param_groups", pg)
}

// ids returns int64 ids from ints.
func ids(is ...int) []statedict.Value {
	out := make([]statedict.Value, len(is))
	for i, x := range is {
		out[i] = int64(x)
	}
	return out
}

// fqns returns string ids.
func fqns(ns ...string) []statedict.Value {
	out := make([]statedict.Value, len(ns))
	for i, x := range ns {
		out[i] = x
	}
	return out
}

// shapes maps ids 0.. to shapes.
func shapes(ss ...[]int64) map[string][]int64 {
	out := map[string][]int64{}
	for i, s := range ss {
		out[strconv.Itoa(i)] = s
	}
	return out
}

func s(d ...int64) []int64 { return d }

// open reads a fixture of testdata/optim and closes it with the test.
func open(t *testing.T, name string) *statedict.Checkpoint {
	t.Helper()
	ck, err := formats.Open(context.Background(), "../testdata/optim/"+name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// get walks a dotted path of dict keys.
func get(t *testing.T, v statedict.Value, path ...string) statedict.Value {
	t.Helper()
	for _, p := range path {
		d, ok := v.(*statedict.Dict)
		if !ok {
			t.Fatalf("%s: not a dict", p)
		}
		if v, ok = d.Get(p); !ok {
			t.Fatalf("no %q", p)
		}
	}
	return v
}
