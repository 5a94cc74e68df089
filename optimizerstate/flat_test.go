package optimizerstate_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/statedict"
)

// openTitan reads a TorchTitan checkpoint of testdata/titan (gen.py: the model's entries at
// the top level beside a flattened "optimizer", "lr_scheduler", "dataloader", "train_state").
func openTitan(t *testing.T, name string) *statedict.Checkpoint {
	t.Helper()
	ck, err := formats.Open(context.Background(), "../testdata/titan/"+name+"/step-2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// TestTorchTitanTied: in the checkpoints torchtitan writes (one process, and FSDP2 on 2
// ranks, whose DCP keeps the state entries in another order), the flattened "optimizer" is
// an AdamW state in the FQN form, its groups rebuilt from the options each parameter
// carries, and it is tied by FQN to the model held in the root's own tensor entries: every
// one of them a parameter with its step, exp_avg and exp_avg_sq, of its shape.
func TestTorchTitanTied(t *testing.T) {
	for _, name := range []string{"single", "fsdp2"} {
		t.Run(name, func(t *testing.T) {
			root := openTitan(t, name).Root.(*statedict.Dict)
			found, err := optimizerstate.Find(root, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(found) != 1 {
				t.Fatalf("%d optimizer states", len(found))
			}
			f := found[0]
			if f.Err != nil {
				t.Fatal(f.Err)
			}
			o := f.Optimizer
			if f.Path != "optimizer" || f.ModelPath != "" || f.Model != root || f.Mapping.By != optimizerstate.ByFQN {
				t.Errorf("optimizer %q mapped onto %q (root: %v) by %s", f.Path, f.ModelPath, f.Model == root, f.Mapping.By)
			}
			if !o.Flat || o.Form != optimizerstate.ByName || o.Kind != "AdamW" || len(o.Groups) != 1 || len(o.Orphans) != 0 {
				t.Errorf("flat %v, form %s, kind %s, %d groups, orphans %v", o.Flat, o.Form, o.Kind, len(o.Groups), o.Orphans)
			}
			if lr, _ := o.Groups[0].Options.Get("lr"); lr != 0.0007 {
				t.Errorf("lr %v", lr)
			}
			var weights []string
			for _, e := range root.Entries() {
				if w, ok := e.Value.(*statedict.Tensor); ok {
					weights = append(weights, e.Key.(string))
					i := slices.IndexFunc(f.Mapping.Params, func(m optimizerstate.ModelParam) bool { return m.Name == e.Key })
					if i < 0 {
						t.Errorf("%s: no optimizer parameter", e.Key)
						continue
					}
					p := o.Params[i]
					for _, key := range []string{"exp_avg", "exp_avg_sq", "step"} {
						v, _ := p.State.Get(key)
						st, ok := v.(*statedict.Tensor)
						want := w.Shape
						if key == "step" {
							want = nil
						}
						if !ok || !slices.Equal(st.Shape, want) {
							t.Errorf("%s %s: %v", e.Key, key, v)
						}
					}
				}
			}
			if len(weights) != 21 || len(o.Params) != 21 {
				t.Errorf("%d weights, %d parameters", len(weights), len(o.Params))
			}
			dec, err := optimizerstate.Decide(root, optimizerstate.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !dec.Models[root] || !dec.Inline[root] || len(dec.States) != 63 || len(dec.Schedulers) != 1 || dec.Schedulers[0].Path != "lr_scheduler" {
				t.Errorf("model %v inline %v, %d states, schedulers %+v", dec.Models[root], dec.Inline[root], len(dec.States), dec.Schedulers)
			}
		})
	}
}

// TestTorchTitanFollows converts a TorchTitan checkpoint with renames and a drop: the
// flattened optimizer's keys follow their parameters (renamed, dropped), the rules touch
// the model's entries at the top level and never the training state beside them, and the
// output maps again, moment for parameter.
func TestTorchTitanFollows(t *testing.T) {
	root := openTitan(t, "single").Root
	out, rep, err := convertTree(root, "tpu", plan.Options{
		Renames: []remap.Rename{{Pattern: regexp.MustCompile(`^layers\.(\d+)\.`), Repl: "blocks.$1."}, {Pattern: regexp.MustCompile(`^`), Repl: "m."}},
		Drop:    []*regexp.Regexp{regexp.MustCompile(`^output\.weight$`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var top []string
	for _, e := range out.(*statedict.Dict).Entries() {
		if _, ok := e.Value.(*statedict.Tensor); !ok {
			top = append(top, e.Key.(string))
		}
	}
	if !slices.Equal(top, []string{"train_state", "optimizer", "dataloader", "lr_scheduler"}) {
		t.Errorf("training-state entries %v", top)
	}
	o := get(t, out, "optimizer").(*statedict.Dict)
	var keys []string
	for _, e := range o.Entries() {
		k := e.Key.(string)
		keys = append(keys, k)
		if strings.Contains(k, "output.weight") || strings.Contains(k, "layers.") || !strings.Contains(k, ".m.") {
			t.Errorf("key %s", k)
		}
		if tn, ok := e.Value.(*statedict.Tensor); ok && strings.HasSuffix(k, ".exp_avg") && tn.Storage.Location != "tpu" {
			t.Errorf("%s on %s", k, tn.Storage.Location)
		}
		if tn, ok := e.Value.(*statedict.Tensor); ok && strings.HasSuffix(k, ".step") && tn.Storage.Location != "cpu" {
			t.Errorf("%s on %s: a CPU step stays on the CPU", k, tn.Storage.Location)
		}
	}
	for _, k := range []string{"state.m.blocks.0.attention.wq.weight.exp_avg", "param_groups.m.blocks.1.ffn_norm.weight.lr", "state.m.tok_embeddings.weight.step"} {
		if !slices.Contains(keys, k) {
			t.Errorf("no %s in %v", k, keys)
		}
	}
	r := rep.Optimizers[0]
	if r.Params != 20 || !slices.Equal(r.Dropped, []string{"output.weight"}) || r.Renamed != 20 || r.MappedBy != optimizerstate.ByFQN {
		t.Errorf("report %+v", r)
	}
	found, err := optimizerstate.Find(out, nil)
	if err != nil || len(found) != 1 || found[0].Err != nil || len(found[0].Mapping.Params) != 20 {
		t.Fatalf("%v %+v", err, found)
	}
}

// TestFlatForms: the flattened form parsed from what torch writes — groups rebuilt from
// their options, state keys split at the longest parameter name, nested state — and the
// shapes it is refused or recognized in.
func TestFlatForms(t *testing.T) {
	opts := func(wd float64) []any {
		return []any{"lr", 0.1, "betas", statedict.Tuple{0.9, 0.95}, "weight_decay", wd, "amsgrad", false, "decoupled_weight_decay", true}
	}
	flat := func(params map[string]float64, order []string, state ...any) *statedict.Dict {
		d := statedict.NewDict("")
		for i := 0; i < len(state); i += 2 {
			d.Set(state[i], state[i+1])
		}
		for _, p := range order {
			kv := opts(params[p])
			for i := 0; i < len(kv); i += 2 {
				d.Set("param_groups."+p+"."+kv[i].(string), kv[i+1])
			}
		}
		return d
	}
	t.Run("groups and nested state", func(t *testing.T) {
		d := flat(map[string]float64{"a.weight": 0.1, "a.bias": 0, "a.weight.x": 0.1}, []string{"a.weight", "a.bias", "a.weight.x"},
			"state.a.weight.exp_avg", tensor(2, 3), "state.a.weight.x.exp_avg", tensor(4), "state.a.bias.precond.L", tensor(2), "state.gone.exp_avg", tensor(1))
		o, err := optimizerstate.Parse(d)
		if err != nil {
			t.Fatal(err)
		}
		if o.Kind != "AdamW" || len(o.Groups) != 2 || !slices.Equal(o.Groups[0].Params, []int{0, 2}) || !slices.Equal(o.Groups[1].Params, []int{1}) {
			t.Fatalf("kind %s, groups %+v", o.Kind, o.Groups)
		}
		if _, ok := o.Params[2].State.Get("exp_avg"); !ok {
			t.Error("a.weight.x's state went to a.weight")
		}
		if _, ok := o.Params[1].State.Get("precond.L"); !ok {
			t.Error("nested state key lost")
		}
		if !slices.Equal(o.Orphans, []string{"gone.exp_avg"}) {
			t.Errorf("orphans %v", o.Orphans)
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, key := range []string{"param_groups.lr", "param_groups..lr", "param_groups.a."} {
			d := dict("state.a.step", tensor(), key, 0.1)
			if _, err := optimizerstate.Parse(d); err == nil || !strings.Contains(err.Error(), key) {
				t.Errorf("%s: %v", key, err)
			}
		}
	})
	t.Run("not flat", func(t *testing.T) {
		for _, d := range []*statedict.Dict{
			dict("state.a.exp_avg", tensor(2)),                         // no param_groups key
			dict("state.a.exp_avg", tensor(2), "param_groups", list()), // a nested form's key
			dict("param_groups.a.lr", 0.1, "other", 1.0),
			dict(int64(1), 0.1),
		} {
			if optimizerstate.IsOptimizerState(d) {
				t.Errorf("%v taken for an optimizer state", d.Entries())
			}
		}
	})
}

// TestInlineModel: a dict's own tensor entries are a model state dict when an optimizer
// state (either form) sits beside them and no model state dict does; the nested FQN form
// maps onto them as the flattened one does.
func TestInlineModel(t *testing.T) {
	w, b := tensor(4, 2), tensor(4)
	nested := optim([][]statedict.Value{fqns("l.weight", "l.bias")}, map[string][]int64{"l.weight": s(4, 2), "l.bias": s(4)})
	root := dict("l.weight", w, "l.bias", b, "optimizer", nested, "epoch", int64(3), "rng", dict("cpu", &statedict.Tensor{DType: statedict.Uint8, Shape: s(8), Strides: s(1)}))
	view := optimizerstate.InlineModel(root)
	if view == nil || view.Len() != 2 {
		t.Fatalf("view %v", view)
	}
	found, err := optimizerstate.Find(root, nil)
	if err != nil || found[0].Err != nil || found[0].Model != root || found[0].Mapping.By != optimizerstate.ByFQN || len(found[0].Mapping.Unused) != 0 {
		t.Fatalf("%v %+v", err, found[0])
	}
	for name, d := range map[string]*statedict.Dict{
		"a model dict beside":  dict("extra", tensor(2), "model", dict("l.weight", w), "optimizer", nested),
		"no optimizer":         dict("l.weight", w, "epoch", int64(3)),
		"integer tensors only": dict("ids", &statedict.Tensor{DType: statedict.Int64, Shape: s(2), Strides: s(1)}, "optimizer", nested),
	} {
		if optimizerstate.InlineModel(d) != nil {
			t.Errorf("%s: taken for a model", name)
		}
	}
}
