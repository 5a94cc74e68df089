package optimizerstate_test

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/paramorder"
	"github.com/ckpt-dev/ckpt/statedict"
)

// transformersCases are paramorder/testdata/cases.json: models transformers built, the
// keys save_pretrained stored, named_parameters() and Trainer.get_decay_parameter_names.
func transformersCases(t *testing.T) []struct {
	ModelType string   `json:"model_type"`
	Head      string   `json:"head"`
	Stored    []string `json:"stored"`
	Params    []string `json:"params"`
	Decay     []string `json:"decay"`
	Fused     bool     `json:"fused"`
} {
	b, err := os.ReadFile("../paramorder/testdata/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			ModelType string   `json:"model_type"`
			Head      string   `json:"head"`
			Stored    []string `json:"stored"`
			Params    []string `json:"params"`
			Decay     []string `json:"decay"`
			Fused     bool     `json:"fused"`
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Cases) == 0 {
		t.Fatal(err)
	}
	return doc.Cases
}

// TestTrainerGroupingMatchesTransformers builds, for every model transformers built in
// paramorder/testdata/cases.json (every model type paramorder describes, three heads), the
// optimizer state its Trainer would save — group 0 the parameters get_decay_parameter_names
// lists, group 1 the others, each in named_parameters() order — and the model state dict
// model.safetensors holds (keys sorted). Every tensor has the same shape, so shapes decide
// nothing: only the registration order and the Trainer's rule can tie each id to its
// parameter. Models whose stored experts transformers fuses on load are refused, naming such
// a key.
func TestTrainerGroupingMatchesTransformers(t *testing.T) {
	for _, c := range transformersCases(t) {
		model := statedict.NewDict("")
		for _, k := range c.Stored {
			model.Set(k, tensor(4, 4))
		}
		decay := map[string]bool{}
		for _, n := range c.Decay {
			decay[n] = true
		}
		var want []string
		var g0, g1 []statedict.Value
		states := map[string][]int64{}
		for _, pass := range []bool{true, false} {
			for _, n := range c.Params {
				if decay[n] == pass {
					id := int64(len(want))
					states[statedict.KeyString(id)] = []int64{4, 4}
					if pass {
						g0 = append(g0, id)
					} else {
						g1 = append(g1, id)
					}
					want = append(want, n)
				}
			}
		}
		od := optim([][]statedict.Value{g0, g1}, states)
		pg, _ := od.Get("param_groups")
		pg.(*statedict.List).Items[0].(*statedict.Dict).Set("weight_decay", 0.1)
		pg.(*statedict.List).Items[1].(*statedict.Dict).Set("weight_decay", 0.0)
		model.NameOrder = true // as model.safetensors reads
		cfg := []byte(`{"model_type": "` + c.ModelType + `"}`)
		dec, err := optimizerstate.Decide(dict("model", model, "optimizer", od), optimizerstate.Options{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		f := dec.Found[0]
		if c.Fused {
			var oe *optimizerstate.OrderError
			var sa *paramorder.StoredApartError
			if !errors.As(f.Err, &oe) || !errors.As(f.Err, &sa) || !errors.Is(f.Err, optimizerstate.ErrNotFitting) {
				t.Errorf("%s %s: %v, want the fused experts refused", c.ModelType, c.Head, f.Err)
			}
			continue
		}
		if f.Err != nil {
			t.Errorf("%s %s: %v", c.ModelType, c.Head, f.Err)
			continue
		}
		var got []string
		for _, p := range f.Mapping.Params {
			got = append(got, p.Name)
		}
		if !slices.Equal(got, want) || f.Mapping.By != optimizerstate.ByTrainerGrouping || f.Mapping.Order != "model_type "+c.ModelType+" (config.json)" {
			t.Errorf("%s %s: tied %v by %s (%s)\nwant %v", c.ModelType, c.Head, got, f.Mapping.By, f.Mapping.Order, want)
		}
	}
}

// TestRegistrationOrder: how an optimizer saved by position is tied to a model state dict
// that does not list its entries in the model's order.
func TestRegistrationOrder(t *testing.T) {
	// A transformers Llama as model.safetensors lists it, with its Trainer optimizer.
	llama := func() *statedict.Dict {
		return nameOrder("lm_head.weight", tensor(8, 4), "model.embed_tokens.weight", tensor(8, 4),
			"model.layers.0.input_layernorm.weight", tensor(4), "model.layers.0.mlp.down_proj.weight", tensor(4, 6),
			"model.layers.0.mlp.gate_proj.weight", tensor(6, 4), "model.layers.0.mlp.up_proj.weight", tensor(6, 4),
			"model.layers.0.post_attention_layernorm.weight", tensor(4), "model.layers.0.self_attn.k_proj.weight", tensor(2, 4),
			"model.layers.0.self_attn.o_proj.weight", tensor(4, 4), "model.layers.0.self_attn.q_proj.weight", tensor(4, 4),
			"model.layers.0.self_attn.v_proj.weight", tensor(2, 4), "model.norm.weight", tensor(4))
	}
	trainer := func(decay, keep []statedict.Value, shp map[string][]int64) *statedict.Dict {
		od := optim([][]statedict.Value{decay, keep}, shp)
		pg, _ := od.Get("param_groups")
		pg.(*statedict.List).Items[1].(*statedict.Dict).Set("weight_decay", 0.0)
		return od
	}
	full := trainer(ids(0, 1, 2, 3, 4, 5, 6, 7, 8), ids(9, 10, 11), shapes(s(8, 4), s(4, 4), s(2, 4), s(2, 4), s(4, 4), s(6, 4), s(6, 4), s(4, 6), s(8, 4), s(4), s(4), s(4)))
	// lm_head frozen: the decayed group has one parameter fewer.
	frozen := trainer(ids(0, 1, 2, 3, 4, 5, 6, 7), ids(8, 9, 10), shapes(s(8, 4), s(4, 4), s(2, 4), s(2, 4), s(4, 4), s(6, 4), s(6, 4), s(4, 6), s(4), s(4), s(4)))
	// k_proj frozen: shapes cannot tell whether k_proj or v_proj is left out.
	kFrozen := trainer(ids(0, 1, 2, 3, 4, 5, 6, 7), ids(8, 9, 10), shapes(s(8, 4), s(4, 4), s(2, 4), s(4, 4), s(6, 4), s(6, 4), s(4, 6), s(8, 4), s(4), s(4), s(4)))
	seq := nameOrder("0.bias", tensor(16), "0.weight", tensor(16, 8), "2.bias", tensor(4), "2.weight", tensor(4, 16))
	seqOpt := optim([][]statedict.Value{ids(0, 1, 2, 3)}, shapes(s(16, 8), s(16), s(4, 16), s(4)))
	named := nameOrder("fc1.bias", tensor(4), "fc1.weight", tensor(4, 4), "fc2.bias", tensor(4), "fc2.weight", tensor(4, 4))
	namedOpt := optim([][]statedict.Value{ids(0, 1, 2, 3)}, shapes(s(4, 4), s(4), s(4, 4), s(4)))
	for _, tc := range []struct {
		name   string
		model  *statedict.Dict
		optim  *statedict.Dict
		config string
		want   []string
		by     string
		order  string
		err    string
	}{
		{name: "Trainer grouping in the config's order", model: llama(), optim: full, config: `{"model_type":"llama"}`,
			want: []string{"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
				"model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
				"model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight", "lm_head.weight",
				"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight", "model.norm.weight"},
			by: optimizerstate.ByTrainerGrouping, order: "model_type llama (config.json)"},
		{name: "a frozen parameter the shapes place", model: llama(), optim: frozen, config: `{"model_type":"llama"}`,
			want: []string{"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
				"model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
				"model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
				"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight", "model.norm.weight"},
			by: optimizerstate.ByTrainerGrouping, order: "model_type llama (config.json)"},
		{name: "a frozen parameter the shapes do not place", model: llama(), optim: kFrozen, config: `{"model_type":"llama"}`,
			err: `optimizer parameter 2 could be "model.layers.0.self_attn.k_proj.weight" or "model.layers.0.self_attn.v_proj.weight"`},
		{name: "name order without a config", model: llama(), optim: full,
			err: `does not list its entries in the order the model registers them (which numbers the optimizer's parameters), and that order cannot be derived: lm_head.weight: the names do not say in which order the model registers "lm_head", "model" under the top level; list the parameter names in id order in a names file`},
		{name: "a config of another family", model: llama(), optim: full, config: `{"model_type":"bert"}`,
			err: `(config.json: model_type "bert": the order its parameters register in is not known`},
		{name: "the names' structure orders a Sequential", model: seq, optim: seqOpt,
			want: []string{"0.weight", "0.bias", "2.weight", "2.bias"}, by: optimizerstate.ByOrder, order: optimizerstate.OrderFromStructure},
		{name: "named modules in name order", model: named, optim: namedOpt,
			err: `"fc1", "fc2" under the top level`},
		{name: "no order, but the shapes leave one choice", model: nameOrder("enc.weight", tensor(4, 8), "dec.weight", tensor(8, 4), "dec.bias", tensor(8)),
			optim: optim([][]statedict.Value{ids(0, 1, 2)}, shapes(s(4, 8), s(8, 4), s(8))),
			want:  []string{"enc.weight", "dec.weight", "dec.bias"}, by: optimizerstate.ByShapes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg []byte
			if tc.config != "" {
				cfg = []byte(tc.config)
			}
			dec, err := optimizerstate.Decide(dict("model", tc.model, "optimizer", tc.optim), optimizerstate.Options{Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			f := dec.Found[0]
			if tc.err != "" {
				if f.Err == nil || !strings.Contains(f.Err.Error(), tc.err) || !errors.Is(f.Err, optimizerstate.ErrNotFitting) {
					t.Fatalf("%v, want %q", f.Err, tc.err)
				}
				return
			}
			if f.Err != nil {
				t.Fatal(f.Err)
			}
			var got []string
			for _, p := range f.Mapping.Params {
				got = append(got, p.Name)
			}
			if !slices.Equal(got, tc.want) || f.Mapping.By != tc.by || f.Mapping.Order != tc.order {
				t.Errorf("%v by %s (%s), want %v by %s (%s)", got, f.Mapping.By, f.Mapping.Order, tc.want, tc.by, tc.order)
			}
		})
	}
}

// nameOrder is a model state dict as a safetensors file reads: its entries in name order.
func nameOrder(kv ...any) *statedict.Dict {
	d := dict(kv...)
	d.NameOrder = true
	return d
}
