package paramorder

import (
	"slices"
	"strings"
	"testing"
)

// FuzzOrder reads a config.json and orders a state dict's keys (one a line) by it and by
// Structure: never a panic; an order is a permutation of the keys (parameters and
// buffers), numbered siblings by number, and ordering the order again changes nothing.
func FuzzOrder(f *testing.F) {
	f.Add([]byte(`{"model_type":"llama"}`), "model.norm.weight\nlm_head.weight\nmodel.layers.10.mlp.up_proj.weight\nmodel.layers.2.self_attn.q_proj.bias\nmodel.layers.2.self_attn.q_proj.weight")
	f.Add([]byte(`{"model_type":"qwen3_moe"}`), "model.layers.0.mlp.experts.0.gate_proj.weight\nmodel.embed_tokens.weight")
	f.Add([]byte(`{"model_type":"deepseek_v3"}`), "model.layers.1.mlp.gate.e_score_correction_bias\nmodel.layers.1.mlp.gate.weight")
	f.Add([]byte(`{"model_type":"gpt_oss"}`), "model.layers.0.self_attn.sinks\nmodel.layers.0.self_attn.q_proj.weight")
	f.Add([]byte(`{"model_type":"falcon"}`), "transformer.h.0.ln_attn.weight\ntransformer.h.0.input_layernorm.weight\nlm_head.weight")
	f.Add([]byte(`{"model_type":"modernbert-decoder"}`), "model.layers.1.attn_norm.weight\nmodel.layers.1.attn.Wo.weight\nmodel.layers.0.attn.Wo.weight")
	f.Add([]byte(`{"model_type": 7}`), "0.bias\n0.weight\n10.weight\n2.weight")
	f.Add([]byte(`{}`), "a\na.b\n.\n..x\n00.w\n0.w")
	f.Fuzz(func(t *testing.T, config []byte, keyText string) {
		keys := strings.Split(keyText, "\n")
		seen := map[string]bool{}
		keys = slices.DeleteFunc(keys, func(k string) bool { d := seen[k]; seen[k] = true; return d })
		m, err := FromConfig(config)
		if err != nil {
			m = Structure
		}
		for _, model := range []*Model{m, Structure} {
			o, err := model.Order(keys)
			if err != nil {
				continue
			}
			got := append(slices.Clone(o.Params), o.Buffers...)
			want := slices.Clone(keys)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: order %v %v is not a permutation of %v", model.Type, o.Params, o.Buffers, keys)
			}
			if a, b, ok := numberedOutOfOrder(o.Params); ok {
				t.Fatalf("%s: %q before %q: numbered siblings not by number", model.Type, a, b)
			}
			again, err := model.Order(o.Params)
			if err != nil || !slices.Equal(again.Params, o.Params) {
				t.Fatalf("%s: ordering %v again gives %v, %v", model.Type, o.Params, again, err)
			}
			for _, k := range o.Params {
				model.InLayerNorm(k)
			}
		}
	})
}

// numberedOutOfOrder finds two keys of order (the first 256) whose first differing path
// elements are both numbers, both parameters or both submodules, the larger one first.
func numberedOutOfOrder(order []string) (string, string, bool) {
	order = order[:min(len(order), 256)]
	for i, a := range order {
		pa := strings.Split(a, ".")
		for _, b := range order[i+1:] {
			pb := strings.Split(b, ".")
			for j := 0; j < len(pa) && j < len(pb); j++ {
				if pa[j] == pb[j] {
					continue
				}
				// A module's own parameters come before its submodules whatever their
				// names, so only two parameters or two submodules compare by number.
				leaves := (j == len(pa)-1) == (j == len(pb)-1)
				if leaves && isNumber(pa[j]) && isNumber(pb[j]) && compareNumbers(pa[j], pb[j]) > 0 {
					return a, b, true
				}
				break
			}
		}
	}
	return "", "", false
}
