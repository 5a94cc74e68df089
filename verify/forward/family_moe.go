package forward

import (
	"fmt"
	"math"
)

// moeFamilies are the decoders whose feed-forward blocks are mixtures of experts.
var moeFamilies = map[string]family{
	"qwen2_moe": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.qkvBias, s.oBias = g.bool("qkv_bias", true), false
		c := s.config()
		qwenMoE(g, s, c, true)
		return c, s.qwenWindow(c)
	},
	"qwen3_moe": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		c := s.config()
		s.qkNorm(c, s.eps)
		qwenMoE(g, s, c, false)
		return c, s.qwenWindow(c)
	},
	"mixtral": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.qkvBias, s.oBias = false, false
		c := s.config()
		for i, b := range c.Blocks {
			b.MLP = &MLP{MoE: mixtralMoE(g, s.layer(i), s.d.inter, s.act)}
		}
		s.allSliding(c)
		return c, nil
	},
	"deepseek_v3": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		c := s.config()
		if err := deepseekMLA(g, s, c); err != nil {
			return nil, err
		}
		first := g.int("first_k_dense_replace", 0)
		for i, b := range c.Blocks {
			if i >= first {
				b.MLP = &MLP{MoE: deepseekMoE(g, s.layer(i)+"mlp.", s.act)}
			}
		}
		return c, nil
	},
	"gpt_oss": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{params: map[string]any{"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
			"beta_slow": 1.0, "truncate": false, "original_max_position_embeddings": 4096.0}})
		if err != nil {
			return nil, err
		}
		c := s.config()
		E := g.int("num_local_experts", 0)
		for i, b := range c.Blocks {
			p := s.layer(i)
			b.Attn.Sinks = p + "self_attn.sinks"
			// The router has a bias; each expert's gate and up are interleaved along the
			// output, stored x·W ([E, H, 2I], [E, I, H]) with biases, MXFP4 or bfloat16.
			b.MLP = &MLP{MoE: &MoE{Experts: E, TopK: g.int("num_experts_per_tok", 0), Inter: s.d.inter,
				Router: lin(p+"mlp.router", true), Scoring: TopKSoftmax, Act: "gpt_oss_swiglu",
				Weights: ExpertWeights{GateUp: p + "mlp.experts.gate_up_proj", Down: p + "mlp.experts.down_proj",
					GateUpBias: p + "mlp.experts.gate_up_proj_bias", DownBias: p + "mlp.experts.down_proj_bias",
					Layout: Interleaved, Transposed: true}}}
		}
		sl, err := g.layerTypes(c.Layers, func(i int) bool { return i%2 == 0 })
		if err != nil {
			return nil, err
		}
		window(c, sl, g.int("sliding_window", 0))
		return c, nil
	},
}

// qwenMoE makes the sparse layers (decoder_sparse_step, mlp_only_layers) Qwen-MoE blocks:
// softmax over num_experts, the top num_experts_per_tok renormalized when norm_topk_prob,
// and for Qwen2-MoE a shared expert weighted by sigmoid(shared_expert_gate(x)).
func qwenMoE(g *getter, s *std, c *Config, shared bool) {
	sparse := g.sparseStep(c.Layers)
	E := g.int("num_experts", 0)
	for i, b := range c.Blocks {
		if !sparse[i] || E <= 0 {
			continue
		}
		p := s.layer(i) + "mlp."
		m := &MoE{Experts: E, TopK: g.int("num_experts_per_tok", 0), Inter: g.int("moe_intermediate_size", 0),
			Router: lin(p+"gate", false), Scoring: Softmax, NormTopK: g.bool("norm_topk_prob", false), Act: s.act,
			Weights: stdExperts(p)}
		if shared {
			if si := g.int("shared_expert_intermediate_size", 0); si > 0 {
				m.Shared = sharedMLP(p+"shared_expert.", si, s.act)
				m.SharedGate = lin(p+"shared_expert_gate", false)
			}
		}
		b.MLP = &MLP{MoE: m}
	}
}

// mixtralMoE is Mixtral's block at layer prefix p: softmax over num_local_experts, the top
// num_experts_per_tok renormalized; experts block_sparse_moe.experts.E.w1/w3/w2 as
// checkpoints store them, or stacked under mlp. as transformers 5 holds them.
func mixtralMoE(g *getter, p string, inter int, act Act) *MoE {
	b, m := p+"block_sparse_moe.", p+"mlp."
	return &MoE{Experts: g.int("num_local_experts", 0), TopK: g.int("num_experts_per_tok", 0), Inter: inter,
		Router: Linear{W: either(b+"gate.weight", m+"gate.weight")}, Scoring: Softmax, NormTopK: true, Act: act,
		Weights: ExpertWeights{GateUp: m + "experts.gate_up_proj", Down: m + "experts.down_proj",
			PerGate: b + "experts.%d.w1.weight", PerUp: b + "experts.%d.w3.weight", PerDown: b + "experts.%d.w2.weight"}}
}

// deepseekMoE is DeepSeek-V3's block at p ("…mlp."): sigmoid scores; each group of experts
// scored by the sum of its two best bias-corrected scores, the topk_group best groups kept;
// the top-k bias-corrected scores among them chosen, weighted by their uncorrected scores
// (renormalized when norm_topk_prob) times routed_scaling_factor; plus n_shared_experts.
func deepseekMoE(g *getter, p string, act Act) *MoE {
	inter := g.int("moe_intermediate_size", 0)
	m := &MoE{Experts: g.int("n_routed_experts", 0), TopK: g.int("num_experts_per_tok", 0), Inter: inter,
		Router: lin(p+"gate", false), Scoring: Sigmoid, NormTopK: g.bool("norm_topk_prob", true), NormEps: 1e-20,
		ScoreBias: p + "gate.e_score_correction_bias", Groups: g.int("n_group", 1), TopKGroups: g.int("topk_group", 1),
		RoutedScale: float32(g.float("routed_scaling_factor", 1)), Act: act, Weights: stdExperts(p)}
	if n := g.int("n_shared_experts", 0); n > 0 {
		m.Shared = sharedMLP(p+"shared_experts.", inter*n, act)
	}
	return m
}

// deepseekMLA gives every layer DeepSeek's multi-head latent attention: q_a/q_b (or q_proj
// when q_lora_rank is null), kv_a_proj_with_mqa and kv_b_proj; the rope on each head's last
// qk_rope_head_dim features (rope_interleave: pairs rotated into halves); scores scaled by
// (nope + rope)^-0.5, times mscale² for a scaled rope with mscale_all_dim.
func deepseekMLA(g *getter, s *std, c *Config) error {
	q := g.int("q_lora_rank", 0)
	m := MLA{QLoraRank: q, KVLoraRank: g.int("kv_lora_rank", 0), NopeDim: g.int("qk_nope_head_dim", 0),
		RopeDim: g.int("qk_rope_head_dim", 0), VDim: g.int("v_head_dim", 0)}
	if m.RopeDim <= 0 || m.RopeDim > maxHeadDim || m.NopeDim < 0 || m.NopeDim > maxHeadDim {
		return fmt.Errorf("qk_rope_head_dim %d or qk_nope_head_dim %d out of range", m.RopeDim, m.NopeDim)
	}
	r, err := g.rope(ropeOpts{headDim: m.RopeDim})
	if err != nil {
		return err
	}
	style := Halves
	if g.bool("rope_interleave", true) {
		style = PairsToHalves
	}
	scale := 1 / math.Sqrt(float64(m.NopeDim+m.RopeDim))
	if r.Type != "default" {
		mad, _ := r.params["mscale_all_dim"].(float64)
		f, _ := r.params["factor"].(float64)
		if mad != 0 {
			ms := 1.0
			if f > 1 {
				ms = 0.1*mad*math.Log(f) + 1
			}
			scale *= ms * ms
		}
	}
	bias := g.bool("attention_bias", false)
	for i, b := range c.Blocks {
		p := s.layer(i) + "self_attn."
		a := m
		if q > 0 {
			a.QA, a.QB = lin(p+"q_a_proj", bias), lin(p+"q_b_proj", false)
			a.QANorm = rms(p+"q_a_layernorm", 1e-6) // DeepseekV3RMSNorm's default eps, not the config's
		} else {
			a.Q = lin(p+"q_proj", false)
		}
		a.KVA, a.KVB = lin(p+"kv_a_proj_with_mqa", bias), lin(p+"kv_b_proj", false)
		a.KVANorm = rms(p+"kv_a_layernorm", 1e-6)
		b.Attn = &Attention{Heads: s.d.heads, KVHeads: s.d.heads, HeadDim: m.NopeDim + m.RopeDim, VDim: m.VDim,
			MLA: &a, O: lin(p+"o_proj", bias), Scale: scale, Rope: &RopeSpec{Rope: r, Style: style}}
	}
	return nil
}
