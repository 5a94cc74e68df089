package optimizerstate_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/statedict"
)

// fuzzTree builds a TorchTitan-like tree from lines: "m NAME d,d" a top-level tensor of that
// shape, "o KEY d,d" a tensor in the flattened optimizer, "o KEY =VALUE" a float, "n KEY
// VALUE" a nested optimizer's param_groups entry… anything else an entry of train_state.
func fuzzTree(data string) *statedict.Dict {
	root, flat := statedict.NewDict(""), statedict.NewDict("")
	train := statedict.NewDict("")
	shape := func(s string) []int64 {
		var out []int64
		for _, p := range strings.Split(s, ",") {
			if n, err := strconv.ParseInt(p, 10, 64); err == nil && n >= 0 && n < 64 && len(out) < 4 {
				out = append(out, n)
			}
		}
		return out
	}
	lines := strings.Split(data, "\n")
	if len(lines) > 256 {
		lines = lines[:256]
	}
	for _, l := range lines {
		kind, rest, _ := strings.Cut(l, " ")
		key, val, _ := strings.Cut(rest, " ")
		switch {
		case kind == "m":
			root.Set(key, tensorAt("cuda:0", shape(val)...))
		case kind == "o" && strings.HasPrefix(val, "="):
			f, _ := strconv.ParseFloat(val[1:], 64)
			flat.Set(key, f)
		case kind == "o":
			flat.Set(key, tensorAt("cpu", shape(val)...))
		default:
			train.Set(l, int64(len(l)))
		}
	}
	root.Set("optimizer", flat)
	root.Set("train_state", train)
	root.Set("dataloader", dict("dp_rank_0", []byte("x"), "world_size", int64(1)))
	return root
}

// FuzzFlatOptimizer feeds hostile flattened optimizer states (and the top-level models
// beside them) to every step that reads them — Parse, Find, Decide for a 4-rank mesh, a
// conversion with a rename and a drop — which must return errors, never panic; each state
// tensor is some one parameter's; an optimizer tied before the conversion is tied after it
// to the parameters the conversion kept.
func FuzzFlatOptimizer(f *testing.F) {
	f.Add("m a.weight 4,2\nm a.bias 4\no state.a.weight.exp_avg 4,2\no state.a.weight.step \no param_groups.a.weight.lr =0.1\no param_groups.a.bias.lr =0.1\no state.a.bias.exp_avg 4")
	f.Add("m l.0.w 3\nm l.1.w 3\no state.l.0.w.exp_avg 3\no state.l.1.w.exp_avg 3\no param_groups.l.0.w.lr =0.1\no param_groups.l.1.w.lr =0.2\no state.l.w.x 1")
	f.Add("m x 2\no param_groups.x.lr =1\no param_groups.x.weight_decay =0\no state.x.exp_avg 3")
	f.Add("m a 1\no param_groups.a. =1\no state. 1\no state.a.b.c 1\no param_groups.a.b.lr =1")
	f.Add("m output.weight 2,2\no state.output.weight.exp_avg 2,2\no param_groups.output.weight.lr =0.5\nepoch")
	f.Fuzz(func(t *testing.T, data string) {
		root := fuzzTree(data)
		flat, _ := root.Get("optimizer")
		if optimizerstate.IsOptimizerState(flat) {
			if o, err := optimizerstate.Parse(flat.(*statedict.Dict)); err == nil {
				owner := map[*statedict.Tensor]string{}
				for _, p := range o.Params {
					if p.State == nil {
						continue
					}
					for _, e := range p.State.Entries() {
						if x, ok := e.Value.(*statedict.Tensor); ok {
							if prev, dup := owner[x]; dup {
								t.Fatalf("a state tensor belongs to %s and %s", prev, p.Name)
							}
							owner[x] = p.Name
						}
					}
				}
			}
		}
		found, err := optimizerstate.Find(root, nil)
		if err != nil {
			return
		}
		if _, err := optimizerstate.Decide(root, optimizerstate.Options{DataParallel: 4}); err != nil {
			t.Fatalf("Decide: %v", err)
		}
		out, _, err := convertTree(root, "tpu", plan.Options{
			Renames: []remap.Rename{{Pattern: regexp.MustCompile(`^a\.`), Repl: "b."}},
			Drop:    []*regexp.Regexp{regexp.MustCompile(`^output\.`)},
		})
		if err != nil {
			return
		}
		after, err := optimizerstate.Find(out, nil)
		if err != nil {
			t.Fatalf("the output does not parse: %v", err)
		}
		if len(found) == 1 && found[0].Mapping != nil {
			if len(after) != 1 || after[0].Mapping == nil {
				t.Fatalf("tied before the conversion, not after: %v", fmt.Sprint(after[0].Err))
			}
		}
	})
}
