package remap

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

func tensor(dt statedict.DType, loc string, n int64) *statedict.Tensor {
	st := statedict.NewMappedStorage("k", loc, dt, make([]byte, n*int64(dt.Size())))
	return &statedict.Tensor{DType: dt, Shape: []int64{n}, Strides: []int64{1}, Storage: st}
}

func dict(kv ...any) *statedict.Dict {
	d := statedict.NewDict("")
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

func names(t *testing.T, v statedict.Value) string {
	t.Helper()
	leaves, err := statedict.Flatten(v)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range leaves {
		out = append(out, l.Name)
	}
	return strings.Join(out, " ")
}

// decisions stands in for a plan: dicts of names to tensors are model state dicts, and
// the policies are given.
type decisions statedict.Policies

func (d decisions) Policy(_ string, v statedict.Value) statedict.Policy {
	t, _ := v.(*statedict.Tensor)
	return d[t]
}

// inline stands for a plan that finds a model in the tensor entries of every dict holding
// a tensor beside other values.
type inline struct{ decisions }

func (inline) Model(d *statedict.Dict) (bool, bool) {
	tensors, others := 0, 0
	for _, e := range d.Entries() {
		if _, ok := e.Value.(*statedict.Tensor); ok {
			tensors++
		} else {
			others++
		}
	}
	return tensors > 0, others > 0
}

func (decisions) Model(d *statedict.Dict) (bool, bool) {
	for _, e := range d.Entries() {
		if _, ok := e.Value.(*statedict.Tensor); !ok {
			return false, false
		}
	}
	return d.Len() > 0, false
}

func TestApplyNames(t *testing.T) {
	re := regexp.MustCompile
	cases := []struct {
		name string
		root statedict.Value
		opts Options
		want string // flattened names after remapping
		err  string
	}{
		{"strip DDP and compile prefixes", dict("_orig_mod.module.a", tensor(statedict.Float32, "cpu", 1), "_orig_mod.module.b", tensor(statedict.Float32, "cpu", 1)),
			Options{StripWrappers: true}, "a b", ""},
		{"no strip when one name lacks the prefix", dict("module.a", tensor(statedict.Float32, "cpu", 1), "b", tensor(statedict.Float32, "cpu", 1)),
			Options{StripWrappers: true}, "module.a b", ""},
		{"rename in order", dict("model.layers.0.w", tensor(statedict.Float32, "cpu", 1)),
			Options{Renames: []Rename{{re(`^model\.`), ""}, {re(`layers\.(\d+)`), "blocks.$1"}}}, "blocks.0.w", ""},
		{"rename collision", dict("a.w", tensor(statedict.Float32, "cpu", 1), "b.w", tensor(statedict.Float32, "cpu", 1)),
			Options{Renames: []Rename{{re(`^[ab]\.`), ""}}}, "", `both "a.w" and "b.w"`},
		{"rename hitting nothing", dict("a", tensor(statedict.Float32, "cpu", 1)),
			Options{Renames: []Rename{{re(`^zzz`), ""}}}, "", "matched no tensor name"},
		{"select and drop", dict("state_dict", dict("w", tensor(statedict.Float32, "cpu", 1), "rotary.inv_freq", tensor(statedict.Float32, "cpu", 1)), "epoch", int64(3)),
			Options{Select: "state_dict", Drop: []*regexp.Regexp{re(`inv_freq$`)}}, "w", ""},
		{"select missing key", dict("model", dict()), Options{Select: "state_dict"}, "", `no key "state_dict" (keys: model)`},
		{"only model state dicts are renamed", dict("step", int64(3), "exp", tensor(statedict.Float32, "cpu", 1)),
			Options{Renames: []Rename{{re(`exp`), "x"}}}, "", "matched no tensor name"},
		// A model in a dict's tensor entries (torchtitan's top level): the rules touch those
		// alone, and a rename onto a key beside them collides.
		{"a model in the tensor entries", dict("module.w", tensor(statedict.Float32, "cpu", 1), "optimizer", dict("lr", 0.1), "module.b", tensor(statedict.Float32, "cpu", 1)),
			Options{StripWrappers: true, Renames: []Rename{{re(`^`), "m."}}, Decisions: inline{}}, "m.w optimizer.lr m.b", ""},
		{"a model in the tensor entries renamed onto a key beside it", dict("w", tensor(statedict.Float32, "cpu", 1), "optimizer", dict("lr", 0.1)),
			Options{Renames: []Rename{{re(`^w$`), "optimizer"}}, Decisions: inline{}}, "", `both "w" and "optimizer"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.opts.Decisions == nil {
				c.opts.Decisions = decisions{}
			}
			out, _, _, err := Apply(c.root, c.opts)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(t, out); got != c.want {
				t.Errorf("names %q, want %q", got, c.want)
			}
		})
	}
}

// TestApplyStorages checks locations, casts and what is left alone: integer tensors,
// fp8 codes, and what the policies exempt (an optimizer moment is not cast, a step counter
// keeps its device); and that shared storages stay shared —
// copying the source's tensors, or remapping them in place (Options.Consume), where the
// tensors are the source's own and a cast storage still is a new one.
func TestApplyStorages(t *testing.T) {
	for _, consume := range []bool{false, true} {
		t.Run(fmt.Sprintf("consume=%v", consume), func(t *testing.T) { testApplyStorages(t, consume) })
	}
}

func testApplyStorages(t *testing.T, consume bool) {
	w := tensor(statedict.Float32, "cuda:0", 4)
	tied := *w // a second tensor object viewing the same storage
	step := tensor(statedict.Float32, "cpu", 1)
	step.Shape, step.Strides = []int64{}, []int64{}
	root := dict(
		"model", dict("w", w, "lm_head", &tied, "idx", tensor(statedict.Int64, "cuda:0", 2), "fp8", tensor(statedict.Float8E4M3FN, "cuda:0", 2)),
		"optimizer", dict("state", dict(int64(0), dict("step", step, "exp_avg", tensor(statedict.Float32, "cuda:0", 4))), "param_groups", &statedict.List{}),
	)
	idx := root.Entries()[0].Value.(*statedict.Dict).Entries()[2].Value.(*statedict.Tensor)
	idxStorage := idx.Storage
	moment, _ := root.Entries()[1].Value.(*statedict.Dict).Entries()[0].Value.(*statedict.Dict).Entries()[0].Value.(*statedict.Dict).Get("exp_avg")
	pol := decisions{step: {KeepDevice: true, NoCast: true}, moment.(*statedict.Tensor): {NoCast: true}}
	out, rep, _, err := Apply(root, Options{Device: func(string) string { return "tpu" }, DType: statedict.BFloat16, Decisions: pol, Consume: consume})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path ...any) *statedict.Tensor {
		v := statedict.Value(out)
		for _, p := range path {
			v, _ = v.(*statedict.Dict).Get(p)
		}
		return v.(*statedict.Tensor)
	}
	checks := []struct {
		t         *statedict.Tensor
		dtype     statedict.DType
		loc, what string
	}{
		{get("model", "w"), statedict.BFloat16, "tpu", "weight cast and moved"},
		{get("model", "idx"), statedict.Int64, "tpu", "int64 not cast"},
		{get("model", "fp8"), statedict.Float8E4M3FN, "tpu", "fp8 codes not cast"},
		{get("optimizer", "state", int64(0), "exp_avg"), statedict.Float32, "tpu", "moment stays float32"},
		{get("optimizer", "state", int64(0), "step"), statedict.Float32, "cpu", "step stays on cpu"},
	}
	for _, c := range checks {
		if c.t.DType != c.dtype || c.t.Storage.Location != c.loc {
			t.Errorf("%s: got %s on %s", c.what, c.t.DType, c.t.Storage.Location)
		}
	}
	if get("model", "w").Storage != get("model", "lm_head").Storage {
		t.Error("tied tensors no longer share a storage")
	}
	if rep.Cast != 2 || rep.Locations["cuda:0"] != "tpu" {
		t.Errorf("report %+v", rep)
	}
	if !consume {
		if w.DType != statedict.Float32 || w.Storage.Location != "cuda:0" || idx.Storage.Location != "cuda:0" {
			t.Error("the source tree was modified")
		}
		return
	}
	if get("model", "w") != w || get("model", "idx") != idx || idx.Storage != idxStorage {
		t.Error("consumed: the source's tensors and uncast storages were copied")
	}
	if w.Storage.DType != statedict.BFloat16 || w.Storage == idxStorage {
		t.Error("consumed: the cast weight does not have its cast storage")
	}
}
