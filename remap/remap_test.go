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

func TestParseMapLocation(t *testing.T) {
	cases := []struct {
		flag, tag, want, err string
	}{
		{"tpu", "cuda:0", "tpu", ""},
		{"cpu", "cuda:3", "cpu", ""},
		{"tpu:1", "cpu", "tpu:1", ""},
		{"cuda:0=tpu,cuda:1=tpu", "cuda:1", "tpu", ""},
		{"cuda:0=tpu", "cuda:1", "cuda:1", ""}, // exact tags, as torch's dict map_location
		{"gpu", "", "", "not a device tag"},
		{"cuda:0=tpu,cuda:0=cpu", "", "", "twice"},
		{"cuda=", "", "", "FROM=TO"},
	}
	for _, c := range cases {
		f, err := ParseMapLocation(c.flag)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.flag, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.flag, err)
		}
		if got, _ := f("w", tensor(statedict.Float32, c.tag, 4)); got != c.want {
			t.Errorf("%q maps %s to %s, want %s", c.flag, c.tag, got, c.want)
		}
	}
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
		{"optimizer state keys are not renamed", dict("optimizer", dict("state", dict(int64(0), dict("exp_avg", tensor(statedict.Float32, "cpu", 1))), "param_groups", &statedict.List{})),
			Options{Renames: []Rename{{re(`exp`), "x"}}}, "", "matched no tensor name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := Apply(c.root, c.opts)
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
// fp8 codes, optimizer moments and step counters; and that shared storages stay shared —
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
	loc, _ := ParseMapLocation("tpu")
	idx := root.Entries()[0].Value.(*statedict.Dict).Entries()[2].Value.(*statedict.Tensor)
	idxStorage := idx.Storage
	out, rep, err := Apply(root, Options{Place: loc, DType: statedict.BFloat16, Consume: consume})
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

// TestPolicyNotNames: what is cast is decided by what a tensor is, not by its name — a model
// weight named "….step" is cast like any weight, and a tensor in a dict that only looks like
// an optimizer state (a list-valued "state") is no optimizer state (issue 10, item 2); an
// optimizer's own step counter is still left alone, and a policy from another package
// (quant's "kept as stored") holds whatever the name.
func TestPolicyNotNames(t *testing.T) {
	stepWeight := tensor(statedict.Float32, "cuda:0", 4)
	beside := tensor(statedict.Float32, "cuda:0", 4)
	optStep := tensor(statedict.Float32, "cpu", 1)
	optStep.Shape, optStep.Strides = []int64{}, []int64{}
	scale := tensor(statedict.Float32, "cuda:0", 2)
	root := dict(
		"model", dict("layers.0.step", stepWeight, "layers.0.weight", tensor(statedict.Float32, "cuda:0", 4), "layers.0.weight_scale", scale),
		"ema", dict("state", &statedict.List{Items: []statedict.Value{int64(1)}}, "param_groups", &statedict.List{}, "shadow", beside),
		"optimizer", dict("state", dict(int64(0), dict("step", optStep, "exp_avg", tensor(statedict.Float32, "cuda:0", 4))),
			"param_groups", &statedict.List{Items: []statedict.Value{dict("params", &statedict.List{Items: []statedict.Value{int64(0)}}, "lr", 0.1)}}),
	)
	loc, _ := ParseMapLocation("tpu")
	out, _, err := Apply(root, Options{Place: loc, DType: statedict.BFloat16,
		Policies: statedict.Policies{scale: {NoCast: true, Why: "quantized group kept"}}})
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
	for _, c := range []struct {
		t     *statedict.Tensor
		dtype statedict.DType
		loc   string
		what  string
	}{
		{get("model", "layers.0.step"), statedict.BFloat16, "tpu", "a weight named .step is cast"},
		{get("ema", "shadow"), statedict.BFloat16, "tpu", "a tensor beside a list-valued state is cast"},
		{get("model", "layers.0.weight_scale"), statedict.Float32, "tpu", "a kept quantized group's scale is not cast"},
		{get("optimizer", "state", int64(0), "step"), statedict.Float32, "cpu", "the optimizer's step counter stays as it was"},
		{get("optimizer", "state", int64(0), "exp_avg"), statedict.Float32, "tpu", "a moment keeps its dtype"},
	} {
		if c.t.DType != c.dtype || c.t.Storage.Location != c.loc {
			t.Errorf("%s: got %s on %s, want %s on %s", c.what, c.t.DType, c.t.Storage.Location, c.dtype, c.loc)
		}
	}
}
