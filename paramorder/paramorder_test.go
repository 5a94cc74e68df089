package paramorder

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/oracle"
)

// trainerCase is one model of testdata/cases.json, as transformers built and saved it.
type trainerCase struct {
	ModelType string         `json:"model_type"`
	Head      string         `json:"head"`
	Config    map[string]any `json:"config"`
	Stored    []string       `json:"stored"`
	Params    []string       `json:"params"`
	Decay     []string       `json:"decay"`
	Buffers   []string       `json:"buffers"`
	Fused     bool           `json:"fused"`
}

func readCases(t *testing.T, path string) []trainerCase {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Cases []trainerCase }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) == 0 {
		t.Fatal("no cases")
	}
	return doc.Cases
}

// checkCases orders each case's stored keys (sorted, as model.safetensors lists them) by its
// config's model_type and compares them with model.named_parameters(): the same names in
// the same order, the tied alias a safetensors file leaves out aside. A model whose stored
// experts are fused on load is refused, naming such a key.
func checkCases(t *testing.T, cases []trainerCase) {
	covered := map[string]bool{}
	for _, c := range cases {
		m, err := FromConfig([]byte(`{"model_type": "` + c.ModelType + `"}`))
		if err != nil {
			t.Fatal(err)
		}
		covered[c.ModelType] = true
		name := c.Head + " " + strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(toJSON(c.Config), "\n", ""), " ", ""))
		o, err := m.Order(c.Stored)
		if c.Fused {
			var sa *StoredApartError
			if !errors.As(err, &sa) {
				t.Errorf("%s: %v, want the stored experts refused", name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !slices.Equal(o.Params, c.Params) {
			t.Errorf("%s: order\n%v\nnamed_parameters()\n%v", name, o.Params, c.Params)
		}
		if !slices.Equal(o.Buffers, c.Buffers) && len(o.Buffers)+len(c.Buffers) > 0 {
			t.Errorf("%s: buffers %v, want %v", name, o.Buffers, c.Buffers)
		}
	}
	for _, f := range Families() {
		if !covered[f] {
			t.Errorf("model_type %s has no case", f)
		}
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestFamiliesMatchTransformers checks every described family against what transformers
// 5.12 listed for models built with other configurations than families.json was written
// from (testdata/cases.json, gen_cases.py): more than ten layers, variants combined, the
// base model and the sequence-classification head.
func TestFamiliesMatchTransformers(t *testing.T) {
	checkCases(t, readCases(t, "testdata/cases.json"))
}

// TestFamiliesOracle builds the cases again with the oracle's transformers and checks them
// the same way, so a transformers whose models register their parameters otherwise fails
// here rather than tying optimizer state wrongly.
func TestFamiliesOracle(t *testing.T) {
	o := oracle.Require(t)
	host, chroot := oracle.TempDir(t)
	if _, err := o.Python("paramorder/testdata/gen_cases.py", chroot+"/cases.json"); err != nil {
		t.Fatal(err)
	}
	checkCases(t, readCases(t, filepath.Join(host, "cases.json")))
}

func TestStructure(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []string
		want []string
		err  string
	}{
		{"sequential", []string{"0.bias", "0.weight", "10.weight", "2.bias", "2.weight"}, []string{"0.weight", "0.bias", "2.weight", "2.bias", "10.weight"}, ""},
		{"own parameters first", []string{"block.0.weight", "block.scale", "emb.weight"}, nil, `"block", "emb"`},
		{"leaves before modules", []string{"blk.lin.weight", "blk.weight"}, []string{"blk.weight", "blk.lin.weight"}, ""},
		{"one child", []string{"a.b.weight"}, []string{"a.b.weight"}, ""},
		{"named siblings", []string{"fc1.weight", "fc2.weight"}, nil, `the names do not say in which order the model registers "fc1", "fc2" under the top level`},
		{"scale and bias", []string{"n.bias", "n.scale"}, nil, `"bias", "scale" under n`},
		{"leading zeros", []string{"l.010.w", "l.9.w"}, []string{"l.9.w", "l.010.w"}, ""},
		{"a tensor and a module", []string{"h.1", "h.1.w", "h.2"}, nil, `h.1 names a tensor and also the module holding h.1.w`},
		{"a tensor and a module, one child", []string{"w.", "w"}, nil, `w names a tensor and also the module holding w.`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Structure.Order(tc.keys)
			if tc.err != "" {
				var ue *UnorderedError
				var ne *NestedError
				if !errors.As(err, &ue) && !errors.As(err, &ne) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("%v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.Params, tc.want) {
				t.Errorf("%v, want %v", o.Params, tc.want)
			}
		})
	}
}

func TestFromConfig(t *testing.T) {
	for _, tc := range []struct{ cfg, err string }{
		{`{"model_type": "llama", "hidden_size": 8}`, ""},
		{`{"model_type": "bert"}`, `model_type "bert": the order its parameters register in is not known`},
		{`{"hidden_size": 8}`, "config.json names no model_type"},
		{`{"model_type": 3}`, "model_type is a float64"},
		{`[`, "config.json: unexpected end"},
	} {
		m, err := FromConfig([]byte(tc.cfg))
		if tc.err == "" {
			if err != nil || m.Type != "llama" {
				t.Errorf("%s: %v %v", tc.cfg, m, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.cfg, err, tc.err)
		}
	}
}

// TestDescribedUnknownChild: a module the description lists with a child it does not know
// is refused, not placed by guess.
func TestDescribedUnknownChild(t *testing.T) {
	m, _ := FromConfig([]byte(`{"model_type":"llama"}`))
	_, err := m.Order([]string{"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.rope.weight"})
	if err == nil || !strings.Contains(err.Error(), `model_type llama has no "rope" under model.layers.0.self_attn`) {
		t.Fatal(err)
	}
}

// TestStoredApartInto: a stored key that is no parameter names the parameters transformers
// loads it into, and only those (families.json records, per such key, the parameters whose
// change changes what save_pretrained writes under it).
func TestStoredApartInto(t *testing.T) {
	for _, tc := range []struct {
		modelType, key string
		into           []string
	}{
		{"mixtral", "model.layers.3.block_sparse_moe.experts.1.w1.weight", []string{"model.layers.*.mlp.experts.gate_up_proj"}},
		{"mixtral", "model.layers.0.block_sparse_moe.experts.0.w2.weight", []string{"model.layers.*.mlp.experts.down_proj"}},
		{"mixtral", "model.layers.0.block_sparse_moe.gate.weight", []string{"model.layers.*.mlp.gate.weight"}},
		{"qwen3_moe", "layers.1.mlp.experts.7.down_proj.weight", []string{"layers.*.mlp.experts.down_proj"}},
		// renamed, not fused
		{"hy_v3", "model.layers.2.mlp.shared_mlp.up_proj.weight", []string{"model.layers.*.mlp.shared_experts.up_proj.weight"}},
		{"hy_v3", "model.layers.2.mlp.router.gate.weight", []string{"model.layers.*.mlp.gate.weight"}},
		{"laguna", "model.layers.1.mlp.shared_expert.down_proj.weight", []string{"model.layers.*.mlp.shared_experts.down_proj.weight"}},
	} {
		m, err := FromConfig([]byte(`{"model_type": "` + tc.modelType + `"}`))
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Order([]string{tc.key})
		var sa *StoredApartError
		if !errors.As(err, &sa) || !slices.Equal(sa.Into, tc.into) {
			t.Errorf("%s %s: %v, want it loaded into %v", tc.modelType, tc.key, err, tc.into)
		}
	}
}

// TestNeverTogether: two children of one module that no model transformers built held
// together — their order was never seen — are refused, naming both, not placed by the order
// of the configurations that held one or the other.
func TestNeverTogether(t *testing.T) {
	for _, tc := range []struct {
		modelType string
		keys      []string
		err       string
	}{
		{"qwen3_moe", []string{"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.experts.down_proj"},
			`model_type qwen3_moe does not say in which order the model registers "experts", "gate_proj" under model.layers.0.mlp`},
		{"deepseek_v2", []string{"model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.q_a_proj.weight"},
			`"q_a_proj", "q_proj" under model.layers.1.self_attn`},
		{"falcon", []string{"transformer.h.0.ln_attn.weight", "transformer.h.0.input_layernorm.weight"},
			`"ln_attn", "input_layernorm" under transformer.h.0`},
		{"llama", []string{"lm_head.weight", "layers.0.mlp.up_proj.weight"},
			`"lm_head", "layers" under the top level`},
		// held together by some layer: ordered
		{"qwen3_moe", []string{"model.layers.0.mlp.experts.down_proj", "model.layers.0.mlp.gate.weight", "model.layers.1.mlp.gate_proj.weight"}, ""},
	} {
		m, err := FromConfig([]byte(`{"model_type": "` + tc.modelType + `"}`))
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Order(tc.keys)
		var ue *UnorderedError
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s %v: %v", tc.modelType, tc.keys, err)
			}
			continue
		}
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s %v: %v, want %q", tc.modelType, tc.keys, err, tc.err)
		}
	}
}
