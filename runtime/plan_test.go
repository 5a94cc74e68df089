package runtime

import (
	"strings"
	"testing"
)

func TestBuiltinPlan(t *testing.T) {
	const (
		R  = "Replicate()"
		S0 = "Shard(dim=0)"
		S1 = "Shard(dim=1)"
	)
	w2 := []int64{64, 32}
	v := []int64{32}
	experts := []int64{8, 64, 32}
	for _, tc := range []struct {
		mesh, name string
		shape      []int64
		want       string // Sharding.String()
	}{
		// FSDP2: Shard(0) for every tensor with a dimension 0.
		{"fsdp=8", "model.layers.0.self_attn.q_proj.weight", w2, "(" + S0 + ")"},
		{"fsdp=8", "model.norm.weight", v, "(" + S0 + ")"},
		{"fsdp=8", "step", nil, "(" + R + ")"},
		// Megatron-style TP on Hugging Face names.
		{"tp=8", "model.layers.0.self_attn.q_proj.weight", w2, "(" + S0 + ")"},
		{"tp=8", "model.layers.0.self_attn.k_proj.bias", v, "(" + S0 + ")"},
		{"tp=8", "model.layers.0.self_attn.v_proj.weight", w2, "(" + S0 + ")"},
		{"tp=8", "model.layers.0.self_attn.o_proj.weight", w2, "(" + S1 + ")"},
		{"tp=8", "model.layers.0.self_attn.o_proj.bias", v, "(" + R + ")"},
		{"tp=8", "model.layers.0.mlp.gate_proj.weight", w2, "(" + S0 + ")"},
		{"tp=8", "model.layers.0.mlp.up_proj.weight", w2, "(" + S0 + ")"},
		{"tp=8", "model.layers.0.mlp.down_proj.weight", w2, "(" + S1 + ")"},
		{"tp=8", "model.embed_tokens.weight", w2, "(" + S0 + ")"},
		{"tp=8", "lm_head.weight", w2, "(" + S0 + ")"},
		{"tp=8", "model.layers.0.input_layernorm.weight", v, "(" + R + ")"},
		{"tp=8", "model.layers.0.self_attn.q_norm.weight", v, "(" + R + ")"},
		{"tp=8", "model.layers.0.mlp.gate.weight", w2, "(" + R + ")"},
		{"tp=8", "model.layers.0.mlp.experts.gate_up_proj", experts, "(" + R + ")"},
		// Meta / torchtitan names, Mixtral's per-expert tensors.
		{"tp=8", "layers.3.attention.wq.weight", w2, "(" + S0 + ")"},
		{"tp=8", "layers.3.attention.wo.weight", w2, "(" + S1 + ")"},
		{"tp=8", "layers.3.feed_forward.w1.weight", w2, "(" + S0 + ")"},
		{"tp=8", "layers.3.feed_forward.w2.weight", w2, "(" + S1 + ")"},
		{"tp=8", "layers.3.feed_forward.w3.weight", w2, "(" + S0 + ")"},
		{"tp=8", "tok_embeddings.weight", w2, "(" + S0 + ")"},
		{"tp=8", "output.weight", w2, "(" + S0 + ")"},
		{"tp=8", "model.layers.0.block_sparse_moe.experts.3.w2.weight", w2, "(" + S1 + ")"},
		{"tp=8", "model.layers.0.self_attn.o_proj_weight", w2, "(" + R + ")"}, // not the module
		// FSDP on top of TP: the same dimension is cut by tp first.
		{"dp=2,fsdp=2,tp=2", "model.layers.0.self_attn.q_proj.weight", w2, "(" + R + ", " + S0 + ", " + S0 + ") order [0 2 1]"},
		{"dp=2,fsdp=2,tp=2", "model.embed_tokens.weight", w2, "(" + R + ", " + S0 + ", " + S0 + ") order [0 2 1]"},
		{"dp=2,fsdp=2,tp=2", "model.layers.0.self_attn.o_proj.weight", w2, "(" + R + ", " + S0 + ", " + S1 + ")"},
		{"dp=2,fsdp=2,tp=2", "model.norm.weight", v, "(" + R + ", " + S0 + ", " + R + ")"},
		{"tp=2,fsdp=4", "model.layers.0.mlp.up_proj.weight", w2, "(" + S0 + ", " + S0 + ")"},
		// Expert parallelism: stacked experts on ep; with fsdp, ep also FSDP-shards the rest.
		{"ep=4", "model.layers.0.mlp.experts.gate_up_proj", experts, "(" + S0 + ")"},
		{"ep=4", "model.layers.0.mlp.experts.down_proj", experts, "(" + S0 + ")"},
		{"ep=4", "layers.0.moe.experts.w1", experts, "(" + S0 + ")"},
		{"ep=4", "model.layers.0.mlp.experts.gate_up_proj_bias", []int64{8, 64}, "(" + S0 + ")"},
		{"ep=4", "model.layers.0.self_attn.q_proj.weight", w2, "(" + R + ")"},
		{"ep=4", "model.layers.0.mlp.experts.3.gate_proj.weight", w2, "(" + R + ")"},
		{"fsdp=2,ep=4", "model.layers.0.mlp.experts.down_proj", experts, "(" + S0 + ", " + S0 + ") order [1 0]"},
		{"fsdp=2,ep=4", "model.layers.0.self_attn.q_proj.weight", w2, "(" + S0 + ", " + S0 + ")"},
		{"dp_shard=2,cp=2", "model.norm.weight", v, "(" + S0 + ", " + R + ")"},
		{"ddp=2,dp_replicate=2", "x", w2, "(" + R + ", " + R + ")"},
	} {
		m, err := ParseMesh(tc.mesh)
		if err != nil {
			t.Fatal(err)
		}
		var p *Plan // nil: built-in
		s, err := p.Sharding(tc.name, tc.shape, m)
		if err != nil {
			t.Errorf("%s on %s: %v", tc.name, tc.mesh, err)
			continue
		}
		if s.String() != tc.want {
			t.Errorf("%s %v on %s: %s, want %s", tc.name, tc.shape, tc.mesh, s, tc.want)
		}
	}
}

func TestPlanFile(t *testing.T) {
	p, err := ParsePlan([]byte(`{"rules": [
		{"match": "lm_head\\.weight$", "placements": {"tp": "Replicate()"}},
		{"match": "\\.mlp\\.experts\\.", "placements": {"tp": "S(-1)", "fsdp": "R"}},
		{"match": "^custom\\.", "placements": {"mp": "Shard(1)", "tp": "Shard(0)"}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := ParseMesh("fsdp=2,tp=2")
	for _, tc := range []struct {
		name  string
		shape []int64
		want  string
	}{
		// the file overrides tp only; fsdp keeps its built-in Shard(0)
		{"lm_head.weight", []int64{8, 4}, "(Shard(dim=0), Replicate())"},
		// Shard(-1) is normalized to the dimension it names
		{"model.layers.0.mlp.experts.down_proj", []int64{8, 4, 4}, "(Replicate(), Shard(dim=2))"},
		// unmatched: built-in
		{"model.layers.0.mlp.down_proj.weight", []int64{8, 4}, "(Shard(dim=0), Shard(dim=1))"},
	} {
		s, err := p.Sharding(tc.name, tc.shape, m)
		if err != nil || s.String() != tc.want {
			t.Errorf("%s: %s, %v; want %s", tc.name, s, err, tc.want)
		}
	}
	// An axis of no known kind needs the file to name it.
	custom, _ := ParseMesh("mp=2,tp=2")
	if s, err := p.Sharding("custom.w", []int64{4, 4}, custom); err != nil || s.String() != "(Shard(dim=1), Shard(dim=0))" {
		t.Errorf("custom axis: %s, %v", s, err)
	}
	if s, err := p.Sharding("other.w", []int64{4, 4}, custom); err != nil || s.String() != "(Replicate(), Replicate())" {
		t.Errorf("custom axis, unmatched tensor: %s, %v", s, err)
	}
	var builtin *Plan
	for mesh, why := range map[string]string{"mp=2,tp=2": "not a known kind", "pp=2,tp=2": "pipeline"} {
		m, _ := ParseMesh(mesh)
		if _, err := builtin.Sharding("w", []int64{4}, m); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v", mesh, err)
		}
	}
	// A file rule sharding a dimension the tensor lacks is an error naming it.
	if _, err := p.Sharding("lm_head.bias", []int64{4}, m); err != nil {
		t.Errorf("replicate on a vector: %v", err)
	}
	if _, err := p.Sharding("x.mlp.experts.b", []int64{}, m); err == nil || !strings.Contains(err.Error(), "x.mlp.experts.b") || !strings.Contains(err.Error(), "rule 1") {
		t.Errorf("Shard(-1) of a scalar: %v", err)
	}
}

func TestParsePlanErrors(t *testing.T) {
	for in, why := range map[string]string{
		`{"rules": [{"match": "(", "placements": {"tp": "R"}}]}`:         "rule 0",
		`{"rules": [{"match": "x", "placements": {"tp": "Partial()"}}]}`: "placement",
		`{"rules": [{"match": "x", "placements": {}}]}`:                  "no placements",
		`{"rules": [{"match": "x", "placements": {"T P": "R"}}]}`:        "mesh axis name",
		`{"rules": [{"match": "x", "placements": {"tp": "R"}, "y": 1}]}`: "unknown field",
		`{"rules": []} {}`: "trailing",
		`[]`:               "cannot unmarshal",
	} {
		if _, err := ParsePlan([]byte(in)); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParsePlan(%s) = %v, want an error about %q", in, err, why)
		}
	}
}

func FuzzParsePlan(f *testing.F) {
	f.Add([]byte(`{"rules": [{"match": "lm_head", "placements": {"tp": "Replicate()", "fsdp": "S(0)"}}]}`))
	f.Add([]byte(`{"rules": []}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePlan(b)
		if err != nil {
			return
		}
		m, _ := ParseMesh("fsdp=2,tp=2,ep=2")
		for _, shape := range [][]int64{nil, {3}, {5, 7}, {2, 3, 4}} {
			s, err := p.Sharding("model.layers.0.mlp.experts.down_proj", shape, m)
			if err != nil {
				continue
			}
			if err := s.Check(len(shape), m); err != nil {
				t.Fatalf("%s: plan gave an invalid sharding %s: %v", b, s, err)
			}
		}
	})
}

func TestStateSharding(t *testing.T) {
	param := Sharding{Placements: []Placement{Shard(0), Shard(0), Replicate}, Order: []int{1, 0, 2}}
	for _, tc := range []struct {
		state []int64
		want  string
	}{
		{[]int64{64, 32}, param.String()},                        // exp_avg: the parameter's layout
		{nil, "(Replicate(), Replicate(), Replicate())"},         // step
		{[]int64{64}, param.String()},                            // a row factor keeps dim 0
		{[]int64{32}, "(Replicate(), Replicate(), Replicate())"}, // a column factor: dim 0 differs
	} {
		if got := StateSharding(param, []int64{64, 32}, tc.state); got.String() != tc.want {
			t.Errorf("state %v: %s, want %s", tc.state, got, tc.want)
		}
	}
	tp := Sharding{Placements: []Placement{Shard(0), Shard(1)}}
	if got := StateSharding(tp, []int64{64, 32}, []int64{64}); got.String() != "(Shard(dim=0), Replicate())" {
		t.Errorf("row factor of an fsdp×tp parameter: %s", got)
	}
}

func TestPlanBuiltInGo(t *testing.T) {
	p := &Plan{Rules: []FileRule{{Match: `norm\.weight$`, Placements: map[string]Placement{"fsdp": Replicate}}}}
	m, _ := ParseMesh("fsdp=2")
	if s, err := p.Sharding("model.norm.weight", []int64{8}, m); err != nil || !s.Replicated() {
		t.Errorf("%s, %v", s, err)
	}
	bad := &Plan{Rules: []FileRule{{Match: `(`, Placements: map[string]Placement{"fsdp": Replicate}}}}
	if _, err := bad.Sharding("x", []int64{8}, m); err == nil {
		t.Error("a bad regexp built in Go was accepted")
	}
}
