package optimizerstate_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// groupParams lists each group's params of an optimizer state dict.
func groupParams(t *testing.T, o statedict.Value) [][]statedict.Value {
	t.Helper()
	var out [][]statedict.Value
	for _, g := range get(t, o, "param_groups").(*statedict.List).Items {
		out = append(out, get(t, g, "params").(*statedict.List).Items)
	}
	return out
}

func stateKeys(t *testing.T, o statedict.Value) []statedict.Value {
	t.Helper()
	var out []statedict.Value
	for _, e := range get(t, o, "state").(*statedict.Dict).Entries() {
		out = append(out, e.Key)
	}
	return out
}

// convertTree plans the conversion of root with o, storages tagged by the map_location
// mapLoc ("": kept), and returns the planned output tree and report.
func convertTree(root statedict.Value, mapLoc string, o plan.Options) (statedict.Value, *plan.Report, error) {
	var t *runtime.Target
	if mapLoc != "" {
		var err error
		if t, err = runtime.NewTarget(runtime.Spec{MapLocation: mapLoc}); err != nil {
			return nil, nil, err
		}
	}
	o.Layout = formats.TorchFile
	p, err := plan.Make(&statedict.Checkpoint{Path: "test", Root: root}, o, t)
	if err != nil {
		return nil, nil, err
	}
	return p.Output.Root, p.Report, nil
}

// TestRewriteFollowsModel converts real and synthetic training checkpoints with drops,
// renames, device tables and dtypes, and checks the optimizer state follows its model.
func TestRewriteFollowsModel(t *testing.T) {
	llama := open(t, "llama_cuda.pt").Root
	dcpRoot := open(t, "dcp").Root

	t.Run("dropped parameters leave state and groups, ids renumbered", func(t *testing.T) {
		out, rep, err := convertTree(llama, "tpu", plan.Options{Drop: []*regexp.Regexp{regexp.MustCompile(`^model\.model\.layers\.1\.`)}})
		if err != nil {
			t.Fatal(err)
		}
		o := get(t, out, "optimizer")
		if got := groupParams(t, o); !slices.Equal(got[0], ids(0, 1, 2, 3, 4, 5, 6, 7)) || !slices.Equal(got[1], ids(8, 9, 10)) {
			t.Errorf("groups %v", got)
		}
		if got := stateKeys(t, o); !slices.Equal(got, ids(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)) {
			t.Errorf("state keys %v", got)
		}
		r := rep.Optimizers[0]
		if !slices.Equal(r.Dropped, []string{"8", "9", "10", "11", "12", "13", "14", "17", "18"}) || !r.Renumbered || r.Params != 11 {
			t.Errorf("report %+v", r)
		}
		// The rewritten state still maps onto the rewritten model, moment for parameter.
		fs, err := optimizerstate.Find(out, nil)
		if err != nil || fs[0].Err != nil {
			t.Fatal(err, fs[0].Err)
		}
		if n := fs[0].Mapping.Params[10].Name; n != "model.norm.weight" {
			t.Errorf("id 10 maps to %s", n)
		}
	})

	t.Run("a dropped tied alias keeps the parameter", func(t *testing.T) {
		out, rep, err := convertTree(llama, "", plan.Options{Drop: []*regexp.Regexp{regexp.MustCompile(`^model\.lm_head\.weight$`)}})
		if err != nil {
			t.Fatal(err)
		}
		if r := rep.Optimizers[0]; len(r.Dropped) != 0 || r.Params != 20 {
			t.Errorf("report %+v", r)
		}
		if got := stateKeys(t, get(t, out, "optimizer")); len(got) != 20 {
			t.Errorf("%d state entries", len(got))
		}
	})

	t.Run("renames follow into FQN keys and params", func(t *testing.T) {
		out, rep, err := convertTree(dcpRoot, "", plan.Options{Renames: []remap.Rename{{Pattern: regexp.MustCompile(`^fc1\.`), Repl: "dense1."}}})
		if err != nil {
			t.Fatal(err)
		}
		o := get(t, out, "optim")
		want := [][]statedict.Value{fqns("dense1.weight", "fc2.weight"), fqns("dense1.bias", "bn.weight", "bn.bias", "fc2.bias")}
		if got := groupParams(t, o); !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("groups %v", got)
		}
		if got := stateKeys(t, o); !slices.Equal(got, fqns("dense1.weight", "fc2.weight", "dense1.bias", "bn.weight", "bn.bias", "fc2.bias")) {
			t.Errorf("state keys %v", got)
		}
		if rep.Optimizers[0].Renamed != 2 {
			t.Errorf("report %+v", rep.Optimizers[0])
		}
	})

	t.Run("moments follow their parameter's tag, step stays on the CPU", func(t *testing.T) {
		// Parameters on cuda:1, moments offloaded to the CPU.
		st := dict("step", tensorAt("cpu"), "exp_avg", tensorAt("cpu", 4), "exp_avg_sq", tensorAt("cpu", 4))
		root := dict("model", dict("w", tensorAt("cuda:1", 4)),
			"optimizer", dict("state", dict(int64(0), st), "param_groups", list(dict("betas", statedict.Tuple{0.9, 0.99}, "amsgrad", false, "params", list(int64(0))))))
		out, _, err := convertTree(root, "cuda:1=tpu", plan.Options{})
		if err != nil {
			t.Fatal(err)
		}
		got := get(t, out, "optimizer", "state").(*statedict.Dict).Entries()[0].Value
		for key, want := range map[string]string{"step": "cpu", "exp_avg": "tpu", "exp_avg_sq": "tpu"} {
			if loc := get(t, got, key).(*statedict.Tensor).Storage.Location; loc != want {
				t.Errorf("%s tagged %s, want %s", key, loc, want)
			}
		}
	})

	t.Run("moments keep float32 unless asked", func(t *testing.T) {
		for _, c := range []struct {
			optimDType statedict.DType
			want       statedict.DType
		}{{statedict.Invalid, statedict.Float32}, {statedict.BFloat16, statedict.BFloat16}} {
			out, _, err := convertTree(llama, "", plan.Options{DType: statedict.BFloat16, OptimizerDType: c.optimDType})
			if err != nil {
				t.Fatal(err)
			}
			if dt := get(t, out, "model", "model.norm.weight").(*statedict.Tensor).DType; dt != statedict.BFloat16 {
				t.Errorf("weight %s", dt)
			}
			st := get(t, out, "optimizer", "state").(*statedict.Dict).Entries()[3].Value
			if dt := get(t, st, "exp_avg").(*statedict.Tensor).DType; dt != c.want {
				t.Errorf("OptimizerDType %s: exp_avg %s, want %s", c.optimDType, dt, c.want)
			}
			if dt := get(t, st, "step").(*statedict.Tensor).DType; dt != statedict.Float32 {
				t.Errorf("step %s", dt)
			}
		}
	})

	t.Run("digit-string ids become ints again", func(t *testing.T) {
		o := optim([][]statedict.Value{ids(0, 1)}, nil)
		o.Set("state", dict("0", adamState(4), "1", adamState(3)))
		out, rep, err := convertTree(dict("model", dict("a", tensor(4), "b", tensor(3)), "optimizer", o), "", plan.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := stateKeys(t, get(t, out, "optimizer")); !slices.Equal(got, ids(0, 1)) || !rep.Optimizers[0].Renumbered {
			t.Errorf("state keys %v, report %+v", got, rep.Optimizers[0])
		}
	})

	t.Run("a drop the optimizer cannot follow is refused", func(t *testing.T) {
		root := dict("model", dict("a", tensor(4), "b", tensor(4), "c", tensor(4)),
			"optimizer", optim([][]statedict.Value{ids(0, 1)}, shapes(s(4), s(4))))
		_, _, err := convertTree(root, "", plan.Options{Drop: []*regexp.Regexp{regexp.MustCompile(`^model\.b$`)}})
		if err == nil || !strings.Contains(err.Error(), `"b" was dropped, but the optimizer state cannot follow`) || !strings.Contains(err.Error(), "could be") {
			t.Errorf("error %v", err)
		}
		// Without drops or renames the conversion goes on, with a warning.
		_, rep, err := convertTree(root, "", plan.Options{})
		if err != nil || len(rep.Warnings) != 1 || rep.Optimizers[0].Unmapped == "" {
			t.Errorf("error %v, warnings %v", err, rep.Warnings)
		}
		// A names file settles it; one for a path without an optimizer state is an error.
		_, rep, err = convertTree(root, "", plan.Options{Drop: []*regexp.Regexp{regexp.MustCompile(`^model\.b$`)},
			OptimizerNames: map[string][]string{"": {"a", "b"}}})
		if err != nil || !slices.Equal(rep.Optimizers[0].Dropped, []string{"1"}) {
			t.Errorf("error %v, report %+v", err, rep.Optimizers)
		}
		_, _, err = convertTree(root, "", plan.Options{OptimizerNames: map[string][]string{"optim": {"a", "b"}}})
		if err == nil || !strings.Contains(err.Error(), `names file for "optim": no optimizer state there (optimizer states: "optimizer")`) {
			t.Errorf("error %v", err)
		}
	})
}

func TestFindRNG(t *testing.T) {
	u8 := func() *statedict.Tensor {
		return &statedict.Tensor{DType: statedict.Uint8, Shape: []int64{16}, Strides: []int64{1},
			Storage: statedict.NewMappedStorage("r", "cpu", statedict.Uint8, make([]byte, 16))}
	}
	cases := []struct {
		name      string
		root      statedict.Value
		cpu, cuda []string
		entries   []string
	}{
		{"rng dict with a CUDA list", dict("model", dict("w", tensor(2)), "rng", dict("cpu", u8(), "cuda", list(u8(), u8()))),
			[]string{"rng.cpu"}, []string{"rng.cuda.0", "rng.cuda.1"}, []string{"rng.cuda"}},
		{"get_rng_state_all() under its own key", dict("cuda_rng_state", list(u8()), "rng_state", u8(), "epoch", int64(2)),
			[]string{"rng_state"}, []string{"cuda_rng_state.0"}, []string{"cuda_rng_state"}},
		{"transformers rng_state.pth", dict("python", statedict.Tuple{int64(3), nil}, "cpu", u8(), "cuda", u8()),
			[]string{"cpu"}, []string{"cuda"}, []string{"cuda"}},
		{"only CUDA states inside rng", dict("rng", dict("cuda", u8())), nil, []string{"rng.cuda"}, []string{"rng.cuda"}},
		{"other values stay", dict("rng", dict("cuda", dict("state", u8(), "seed", int64(1)))), nil, []string{"rng.cuda.state"}, []string{"rng.cuda.state"}},
		{"cuda outside an RNG subtree", dict("model", dict("cuda.weight", tensor(2)), "state", dict("cuda", u8())), nil, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := optimizerstate.FindRNG(c.root)
			if !slices.Equal(r.CPU, c.cpu) || !slices.Equal(r.CUDA, c.cuda) || !slices.Equal(r.CUDAEntries, c.entries) {
				t.Errorf("got %+v, want cpu %v cuda %v entries %v", r, c.cpu, c.cuda, c.entries)
			}
		})
	}
}

func TestRepairMilestones(t *testing.T) {
	counter := statedict.NewDict("collections.Counter")
	counter.Set(int64(2), int64(1))
	base := func(m statedict.Value) *statedict.Dict {
		return dict("milestones", m, "gamma", 0.5, "base_lrs", list(0.1), "last_epoch", int64(3))
	}
	cases := []struct {
		name    string
		d       *statedict.Dict
		changed bool
	}{
		{"DCP round trip", base(dict("2", int64(1), "4", int64(2))), true},
		{"plain dict with int keys", base(dict(int64(2), int64(1))), true},
		{"already a Counter", base(counter), false},
		{"keys that are no epochs", base(dict("x", int64(1))), false},
		{"not a MultiStepLR", dict("milestones", dict("2", int64(1)), "step_size", int64(2)), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := optimizerstate.RepairMilestones(c.d); got != c.changed {
				t.Fatalf("changed %v, want %v", got, c.changed)
			}
			if !c.changed {
				return
			}
			m := get(t, c.d, "milestones").(*statedict.Dict)
			if m.Class != "collections.Counter" {
				t.Errorf("class %q", m.Class)
			}
			for _, e := range m.Entries() {
				if _, ok := e.Key.(int64); !ok {
					t.Errorf("key %#v", e.Key)
				}
			}
		})
	}
}

// TestSchedulerKinds recognizes the state of every scheduler torch and transformers
// wrote in schedulers.pt, and both GradScaler states.
func TestSchedulerKinds(t *testing.T) {
	want := map[string]string{"lambda": "LambdaLR", "step": "StepLR", "multistep": "MultiStepLR", "cosine": "CosineAnnealingLR",
		"onecycle": "OneCycleLR", "linear": "LinearLR", "sequential": "SequentialLR", "plateau": "ReduceLROnPlateau",
		"hf_cosine": "LambdaLR", "hf_linear": "LambdaLR"}
	root := open(t, "schedulers.pt").Root.(*statedict.Dict)
	for _, e := range root.Entries() {
		name := e.Key.(string)
		kind, ok := optimizerstate.SchedulerKind(e.Value.(*statedict.Dict))
		if kind != want[name] || ok != (want[name] != "") {
			t.Errorf("%s: %q, want %q", name, kind, want[name])
		}
	}
	if !optimizerstate.IsGradScalerState(get(t, root, "scaler_enabled").(*statedict.Dict)) {
		t.Error("enabled GradScaler not recognized")
	}
	a, err := optimizerstate.Analyze(root, optimizerstate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Schedulers) != len(want) || len(a.Scalers) != 2 || a.Scalers[1].Detail != "disabled" {
		t.Errorf("analysis: %d schedulers, scalers %+v", len(a.Schedulers), a.Scalers)
	}
}
