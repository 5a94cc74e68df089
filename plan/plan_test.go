package plan

import (
	"regexp"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

func tensor(dt statedict.DType, loc string, n int64) *statedict.Tensor {
	st := statedict.NewMappedStorage("k", loc, dt, make([]byte, n*int64(dt.Size())))
	return &statedict.Tensor{DType: dt, Shape: []int64{n}, Strides: []int64{1}, Storage: st}
}

func scalar(dt statedict.DType, loc string) *statedict.Tensor {
	t := tensor(dt, loc, 1)
	t.Shape, t.Strides = []int64{}, []int64{}
	return t
}

func dict(kv ...any) *statedict.Dict {
	d := statedict.NewDict("")
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

func list(items ...statedict.Value) *statedict.List { return &statedict.List{Items: items} }

func tpu(t *testing.T) *runtime.Target {
	t.Helper()
	tg, err := runtime.NewTarget(runtime.Spec{Device: "tpu"})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func get(t *testing.T, v statedict.Value, path ...any) *statedict.Tensor {
	t.Helper()
	for _, p := range path {
		d, ok := v.(*statedict.Dict)
		if !ok {
			t.Fatalf("%v: not a dict at %v", path, p)
		}
		v, _ = d.Get(p)
	}
	x, ok := v.(*statedict.Tensor)
	if !ok {
		t.Fatalf("%v: %T", path, v)
	}
	return x
}

// TestPolicyNotNames: what is cast is decided by what a tensor is, not by its name — a model
// weight named "….step" is cast like any weight, and a tensor in a dict that only looks like
// an optimizer state (a list-valued "state") is no optimizer state (issue 10, item 2); an
// optimizer's own step counter is still left alone, moments keep their dtype, and RNG
// states stay on the CPU.
func TestPolicyNotNames(t *testing.T) {
	stepWeight := tensor(statedict.Float32, "cuda:0", 3) // not a parameter the moment (4) could be
	root := dict(
		"model", dict("layers.0.step", stepWeight, "layers.0.weight", tensor(statedict.Float32, "cuda:0", 4)),
		"ema", dict("state", list(int64(1)), "param_groups", list(), "shadow", tensor(statedict.Float32, "cuda:0", 4)),
		"optimizer", dict("state", dict(int64(0), dict("step", scalar(statedict.Float32, "cpu"), "exp_avg", tensor(statedict.Float32, "cuda:0", 4))),
			"param_groups", list(dict("params", list(int64(0)), "lr", 0.1))),
		"rng", dict("cpu", tensor(statedict.Uint8, "cpu", 8), "cuda", list(tensor(statedict.Uint8, "cuda:0", 8))),
	)
	p, err := Make(&statedict.Checkpoint{Path: "t", Root: root}, Options{Layout: formats.TorchFile, DType: statedict.BFloat16}, tpu(t))
	if err != nil {
		t.Fatal(err)
	}
	out := p.Output.Root
	for _, c := range []struct {
		path  []any
		dtype statedict.DType
		loc   string
		what  string
	}{
		{[]any{"model", "layers.0.step"}, statedict.BFloat16, "tpu", "a weight named .step is cast"},
		{[]any{"ema", "shadow"}, statedict.BFloat16, "tpu", "a tensor beside a list-valued state is cast"},
		{[]any{"optimizer", "state", int64(0), "step"}, statedict.Float32, "cpu", "the optimizer's step counter stays as it was"},
		{[]any{"optimizer", "state", int64(0), "exp_avg"}, statedict.Float32, "tpu", "a moment keeps its dtype"},
		{[]any{"rng", "cpu"}, statedict.Uint8, "cpu", "an RNG state stays on the CPU"},
	} {
		x := get(t, out, c.path...)
		if x.DType != c.dtype || x.Storage.Location != c.loc {
			t.Errorf("%s: got %s on %s, want %s on %s", c.what, x.DType, x.Storage.Location, c.dtype, c.loc)
		}
	}
	if r := p.Report; len(r.DroppedRNG) != 1 || r.DroppedRNG[0] != "rng.cuda" || len(r.RNG) != 1 || r.Optimizers[0].MappedBy == "" {
		t.Errorf("report %+v", r)
	}
	// Each says what every tensor is.
	roles := map[string]Role{}
	params := map[string]string{}
	if err := p.Each(func(e Entry) error {
		roles[e.Name], params[e.Name] = e.Role, e.Param
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]Role{"model.layers.0.step": Weight, "model.layers.0.weight": Weight, "ema.shadow": Other,
		"optimizer.state.0.step": Step, "optimizer.state.0.exp_avg": Moment, "rng.cpu": RNG} {
		if roles[name] != want {
			t.Errorf("%s is a %q, want %q", name, roles[name], want)
		}
	}
	if params["optimizer.state.0.exp_avg"] != "model.layers.0.weight" {
		t.Errorf("exp_avg follows %q", params["optimizer.state.0.exp_avg"])
	}
	if len(roles) != 6 {
		t.Errorf("%d tensors: %v (the CUDA RNG state is dropped)", len(roles), roles)
	}
}

// TestOptimizerKeysNotRenamed: the per-parameter dicts of an optimizer state look like model
// state dicts (names to tensors) but are not one: renames never apply to them.
func TestOptimizerKeysNotRenamed(t *testing.T) {
	root := dict("optimizer", dict("state", dict(int64(0), dict("exp_avg", tensor(statedict.Float32, "cpu", 1))), "param_groups", list()))
	_, err := Make(&statedict.Checkpoint{Path: "t", Root: root}, Options{Layout: formats.TorchFile,
		Renames: []remap.Rename{{Pattern: regexp.MustCompile(`exp`), Repl: "x"}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "matched no tensor name") {
		t.Fatalf("%v", err)
	}
}

// TestShardFollowsRenames: on a mesh, each moment takes its parameter's placement under
// the parameter's output name, so a rename that changes which rule places the parameter
// moves its moments too.
func TestShardFollowsRenames(t *testing.T) {
	w := tensor(statedict.Float32, "cuda:0", 16)
	w.Shape, w.Strides = []int64{4, 4}, []int64{4, 1}
	m := tensor(statedict.Float32, "cuda:0", 16)
	m.Shape, m.Strides = []int64{4, 4}, []int64{4, 1}
	root := dict("model", dict("layers.0.o.weight", w),
		"optimizer", dict("state", dict(int64(0), dict("step", scalar(statedict.Float32, "cpu"), "exp_avg", m)),
			"param_groups", list(dict("params", list(int64(0)), "lr", 0.1))))
	tg, err := runtime.NewTarget(runtime.Spec{Device: "cpu", Mesh: "tp=2"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Make(&statedict.Checkpoint{Path: "t", Root: root}, Options{Layout: formats.DCPFolder,
		Renames: []remap.Rename{{Pattern: regexp.MustCompile(`\.o\.`), Repl: ".o_proj."}}}, tg)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	p.Each(func(e Entry) error {
		if e.Sharding != nil {
			got[e.Name] = strings.Join(e.Sharding.Placements, ",")
		}
		return nil
	})
	// o_proj is row-parallel: Shard(1) on tp; its moment follows; the step stays whole.
	want := map[string]string{"model.layers.0.o_proj.weight": "Shard(dim=1)", "optimizer.state.0.exp_avg": "Shard(dim=1)"}
	if len(got) != len(want) {
		t.Fatalf("sharded %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}
