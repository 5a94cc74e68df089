package optimizerstate_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/statedict"
)

// fuzzShape reads "4x4" (at most 3 small dimensions).
func fuzzShape(s string) []int64 {
	out := []int64{}
	for _, d := range strings.Split(s, "x") {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n > 64 || len(out) == 3 {
			break
		}
		out = append(out, int64(n))
	}
	return out
}

// FuzzMapTrainer ties a fuzzed optimizer state saved by position to a fuzzed model state
// dict, with a fuzzed config.json, in either order a reader may list it: never a panic,
// and a tie always gives each optimizer parameter its own model entry, every state tensor
// fitting it.
func FuzzMapTrainer(f *testing.F) {
	f.Add(`{"model_type":"llama"}`, "model.embed_tokens.weight:8x4\nmodel.layers.0.self_attn.q_proj.weight:4x4\nmodel.norm.weight:4\nlm_head.weight:8x4", "0,1,2|3", "8x4;4x4;8x4;4", true, 0.0)
	f.Add(``, "0.bias:16\n0.weight:16x8\n2.bias:4\n2.weight:4x16", "0,1,2,3", "16x8;16;4x16;4", true, 0.1)
	f.Add(`{"model_type":"qwen2"}`, "a.weight:4\nb.weight:4\nb.bias:4", "0|1,2", "4;4;", false, 0.0)
	f.Add(`{"model_type":"mixtral"}`, "model.layers.0.block_sparse_moe.experts.0.w1.weight:4x4", "0|", "4x4", true, 0.0)
	f.Fuzz(func(t *testing.T, config, keys, groups, states string, nameOrder bool, wd float64) {
		model := statedict.NewDict("")
		model.NameOrder = nameOrder
		for _, line := range strings.Split(keys, "\n") {
			name, shape, _ := strings.Cut(line, ":")
			if _, dup := model.Get(name); dup || model.Len() == 64 {
				continue
			}
			model.Set(name, tensor(fuzzShape(shape)...))
		}
		shapes := strings.Split(states, ";")
		st := statedict.NewDict("")
		pg := &statedict.List{}
		id := int64(0)
		for g, part := range strings.Split(groups, "|") {
			if g == 4 {
				break
			}
			var ps []statedict.Value
			for _, x := range strings.Split(part, ",") {
				if x == "" || id == 64 {
					continue
				}
				ps = append(ps, id)
				if int(id) < len(shapes) && shapes[id] != "" {
					st.Set(id, adamState(fuzzShape(shapes[id])...))
				}
				id++
			}
			pg.Items = append(pg.Items, dict("lr", 0.1, "betas", statedict.Tuple{0.9, 0.999}, "amsgrad", false,
				"weight_decay", wd, "params", list(ps...)))
		}
		var cfg []byte
		if config != "" {
			cfg = []byte(config)
		}
		dec, err := optimizerstate.Decide(dict("model", model, "optimizer", dict("state", st, "param_groups", pg)), optimizerstate.Options{Config: cfg})
		if err != nil {
			return
		}
		for _, fd := range dec.Found {
			if fd.Mapping == nil {
				continue
			}
			used := map[string]bool{}
			for i, mp := range fd.Mapping.Params {
				v, ok := model.Get(mp.Name)
				if !ok || used[mp.Name] {
					t.Fatalf("parameter %d tied to %q: not a model entry, or tied twice", i, mp.Name)
				}
				used[mp.Name] = true
				p := fd.Optimizer.Params[i]
				if p.State == nil {
					continue
				}
				for _, e := range p.State.Entries() {
					s, _ := e.Value.(*statedict.Tensor)
					want, known := optimizerstate.ExpectedShape(statedict.KeyString(e.Key), v.(*statedict.Tensor).Shape)
					if s != nil && known && want != nil && !equalShape(s.Shape, want) {
						t.Fatalf("parameter %d tied to %q %v: %s %v", i, mp.Name, v.(*statedict.Tensor).Shape, statedict.KeyString(e.Key), s.Shape)
					}
				}
			}
		}
	})
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
