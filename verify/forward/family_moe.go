package forward

import (
	"fmt"
	"math"
	"slices"
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
	"deepseek_v2": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.mlpBias = false
		c := s.config()
		if err := deepseekMLA(g, s, c); err != nil {
			return nil, err
		}
		first := g.int("first_k_dense_replace", 0)
		method := g.str("topk_method", "greedy")
		for i, b := range c.Blocks {
			// The rope rotates pairs in place (complex multiplication); scores are scaled by
			// (nope + rope)^-0.5 alone.
			b.Attn.Rope.Style = Pairs
			b.Attn.Scale = 1 / math.Sqrt(float64(b.Attn.HeadDim))
			if i < first {
				continue
			}
			p := s.layer(i) + "mlp."
			m := deepseekMoE(g, p, s.act)
			// Softmax scores chosen greedily, never renormalized. (transformers 5.12's
			// group_limited_greedy fails on an attribute DeepseekV2Moe lacks: nothing to match.)
			m.Scoring, m.ScoreBias, m.NormTopK, m.Groups = Softmax, "", false, 1
			if method != "greedy" {
				return nil, fmt.Errorf("topk_method %q is not supported (greedy; transformers 5.12 cannot run group_limited_greedy)", method)
			}
			b.MLP = &MLP{MoE: m}
		}
		return c, nil
	},
	"glm4_moe": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{partial: 0.5, partialOK: true})
		if err != nil {
			return nil, err
		}
		s.oBias = false
		c := s.config()
		if g.bool("use_qk_norm", false) {
			s.qkNorm(c, s.eps)
		}
		first := g.int("first_k_dense_replace", 0)
		for i, b := range c.Blocks {
			if i >= first {
				b.MLP = &MLP{MoE: deepseekMoE(g, s.layer(i)+"mlp.", s.act)}
			}
		}
		return c, nil
	},
	"ernie4_5_moe": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.rope.Style = Pairs
		bias := g.bool("use_bias", false)
		s.qkvBias, s.oBias, s.mlpBias = bias, bias, bias
		c := s.config()
		if bias {
			c.Head.B = "lm_head.bias" // lm_head has use_bias's bias too
		}
		start, end, every := g.int("moe_layer_start_index", 1), g.int("moe_layer_end_index", -1), g.int("moe_layer_interval", 1)
		if end == -1 {
			end = c.Layers - 1
		}
		E := g.int("moe_num_experts", 0)
		inter := g.int("moe_intermediate_size", 0)
		for i, b := range c.Blocks {
			if every <= 0 || (i+1)%every != 0 || i < start || i > end {
				continue
			}
			p := s.layer(i) + "mlp."
			// Softmax scores chosen with the correction bias, renormalized by their sum
			// clamped below at moe_norm_min.
			m := &MoE{Experts: E, TopK: g.int("moe_k", 0), Inter: inter, Router: lin(p+"gate", false), Scoring: Softmax,
				NormTopK: true, NormClamp: true, NormEps: float32(g.float("moe_norm_min", 1e-12)), Act: s.act,
				ScoreBias: either(p+"moe_statics.e_score_correction_bias", p+"gate.moe_statics.e_score_correction_bias"),
				Weights:   stdExperts(p)}
			if n := g.int("moe_num_shared_experts", 0); n > 0 {
				m.Shared = sharedMLP(p+"shared_experts.", inter*n, s.act)
				m.Shared.Gate.B, m.Shared.Up.B, m.Shared.Down.B = biasOf(m.Shared.Gate, bias), biasOf(m.Shared.Up, bias), biasOf(m.Shared.Down, bias)
			}
			b.MLP = &MLP{MoE: m}
		}
		return c, nil
	},
	"hunyuan_v1_moe": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.mlpBias = false
		c := s.config()
		hunyuanQKNorm(s, c)
		for i, b := range c.Blocks {
			p := s.layer(i) + "mlp."
			// Softmax over the experts, the top moe_topk renormalized, plus the shared MLP
			// of intermediate_size.
			b.MLP = &MLP{MoE: &MoE{Experts: g.perLayer("num_experts", i), TopK: g.perLayer("moe_topk", i), Inter: s.d.inter,
				Router: lin(p+"gate.wg", false), Scoring: Softmax, NormTopK: true, Act: s.act, Weights: stdExperts(p),
				Shared: sharedMLP(p+"shared_mlp.", s.d.inter, s.act)}}
		}
		return c, nil
	},
	"olmoe": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.mlpBias = false
		c := s.config()
		for i, b := range c.Blocks {
			p := s.layer(i)
			// q and k normalized over the whole projection, then clipped.
			b.Attn.QNorm = &HeadNorm{Norm: *rms(p+"self_attn.q_norm", s.eps), Whole: true}
			b.Attn.KNorm = &HeadNorm{Norm: *rms(p+"self_attn.k_norm", s.eps), Whole: true}
			b.Attn.Clip, b.Attn.ClipAfterNorm = g.float("clip_qkv", 0), true
			b.MLP = &MLP{MoE: &MoE{Experts: g.int("num_experts", 0), TopK: g.int("num_experts_per_tok", 0), Inter: s.d.inter,
				Router: lin(p+"mlp.gate", false), Scoring: Softmax, NormTopK: g.bool("norm_topk_prob", false), Act: s.act,
				Weights: stdExperts(p + "mlp.")}}
		}
		return c, nil
	},
	"granitemoe":       graniteMoE,
	"granitemoeshared": graniteMoE,
	"jetmoe": func(g *getter) (*Config, error) {
		g.raw["num_attention_heads"] = float64(g.int("num_key_value_heads", 0) * g.int("num_experts_per_tok", 0))
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.act = Act(g.str("activation_function", "silu"))
		c := s.config()
		E, K := g.int("num_local_experts", 0), g.int("num_experts_per_tok", 0)
		for i, b := range c.Blocks {
			p := s.layer(i)
			// RMSNorms of the default eps; attention of K slots of num_key_value_heads heads
			// from experts; an MLP of experts with an output bias.
			b.AttnNorm, b.MLPNorm = rms(p+"input_layernorm", 1e-6), rms(p+"post_attention_layernorm", 1e-6)
			a := p + "self_attention."
			b.Attn.QKV, b.Attn.O = QKV{}, Linear{}
			b.Attn.MoA = &MoA{Experts: E, TopK: K, Router: lin(a+"experts.router.layer", false), In: a + "experts.input_linear.weight",
				Out: a + "experts.output_linear.weight", Bias: a + "experts.bias", KV: lin(a+"kv_proj", false)}
			m := p + "mlp."
			b.MLP = &MLP{MoE: &MoE{Experts: E, TopK: K, Inter: s.d.inter, Router: lin(m+"router.layer", false), Scoring: TopKSoftmax,
				Act: s.act, Bias: m + "bias", Weights: ExpertWeights{GateUp: m + "input_linear.weight", Down: m + "output_linear.weight"}}}
		}
		c.FinalNorm = rms("model.norm", 1e-6)
		return c, nil
	},
	"minimax_m2": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{partialOK: true})
		if err != nil {
			return nil, err
		}
		s.qkvBias, s.oBias = false, false
		c := s.config()
		for i, b := range c.Blocks {
			p := s.layer(i)
			b.Attn.QNorm = &HeadNorm{Norm: *rms(p+"self_attn.q_norm", s.eps), Whole: true}
			b.Attn.KNorm = &HeadNorm{Norm: *rms(p+"self_attn.k_norm", s.eps), Whole: true}
			// Sigmoid scores chosen with the correction bias, renormalized.
			m := mixtralMoE(g, p, s.d.inter, s.act)
			m.Scoring = Sigmoid
			m.ScoreBias = either(p+"block_sparse_moe.e_score_correction_bias", p+"mlp.e_score_correction_bias")
			b.MLP = &MLP{MoE: m}
		}
		return c, nil
	},
	"phimoe": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.norm = func(n string) *Norm { return lnorm(n, s.eps, true) }
		s.mlpBias = false
		c := s.config()
		if g.bool("lm_head_bias", false) {
			c.Head.B = "lm_head.bias"
		}
		for i, b := range c.Blocks {
			p := s.layer(i)
			m := mixtralMoE(g, p, s.d.inter, s.act)
			m.Router = Linear{W: either(p+"block_sparse_moe.gate.weight", p+"mlp.router.weight")}
			m.Scoring, m.NormTopK, m.JitterEps = SparseMixer, false, g.float("router_jitter_noise", 0.01)
			b.MLP = &MLP{MoE: m}
		}
		s.allSliding(c)
		return c, nil
	},
	"llama4_text": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.rope.Style, s.mlpBias = Pairs, false
		c := s.config()
		n := c.Layers
		rope := g.ints("no_rope_layers")
		if len(rope) == 0 {
			every := g.int("no_rope_layer_interval", 4)
			for i := range n {
				r := 1
				if every > 0 && (i+1)%every == 0 {
					r = 0
				}
				rope = append(rope, r)
			}
		}
		if len(rope) != n {
			return nil, fmt.Errorf("no_rope_layers has %d entries for %d layers", len(rope), n)
		}
		moe := g.ints("moe_layers")
		if moe == nil {
			step := g.int("interleave_moe_layer_step", 1)
			for i := step - 1; step > 0 && i < n; i += step {
				moe = append(moe, i)
			}
		}
		types := g.strs("layer_types")
		if types != nil && len(types) != n {
			return nil, fmt.Errorf("layer_types has %d entries for %d layers", len(types), n)
		}
		chunk := g.int("attention_chunk_size", 0)
		qk, tune := g.bool("use_qk_norm", true), g.bool("attn_temperature_tuning", true)
		for i, b := range c.Blocks {
			p := s.layer(i)
			chunked := rope[i] != 0
			if types != nil {
				chunked = types[i] == "chunked_attention"
			}
			if chunked {
				b.Attn.Chunk = chunk
			}
			if rope[i] == 0 {
				b.Attn.Rope = nil
				if tune {
					b.Attn.TempTuning = &TempTuning{Floor: g.float("floor_scale", 8192), Scale: g.float("attn_scale", 0.1), Offset: 1}
				}
			} else if qk {
				// An L2 norm without weight, after the rope.
				b.Attn.QNorm = &HeadNorm{Norm: Norm{Kind: L2Norm, Eps: s.eps}, AfterRope: true}
				b.Attn.KNorm = &HeadNorm{Norm: Norm{Kind: L2Norm, Eps: s.eps}, AfterRope: true}
			}
			f := p + "feed_forward."
			if slices.Contains(moe, i) {
				// All experts see every token, its input scaled by the sigmoid of its routing
				// logit when among the top k (0 otherwise); plus a shared expert.
				b.MLP = &MLP{MoE: &MoE{Experts: g.int("num_local_experts", 0), TopK: g.int("num_experts_per_tok", 0), Inter: s.d.inter,
					Router: lin(f+"router", false), Scoring: TopKSigmoid, WeightInput: true, Act: s.act,
					Weights: ExpertWeights{GateUp: f + "experts.gate_up_proj", Down: f + "experts.down_proj", Transposed: true},
					Shared:  sharedMLP(f+"shared_expert.", s.d.inter, s.act)}}
			} else {
				b.MLP = s.mlp(f, g.int("intermediate_size_mlp", 0))
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

// graniteMoE is Granite-MoE (and Granite-MoE-Shared): Granite's multipliers, experts of
// fused input_linear [E, 2I, H] (gate then up) and output_linear, routed by a softmax over
// the top-k logits; with shared_intermediate_size, a shared MLP of the same shape added.
func graniteMoE(g *getter) (*Config, error) {
	s, err := newStd(g, ropeOpts{})
	if err != nil {
		return nil, err
	}
	s.scale = g.float("attention_multiplier", 1)
	c := s.config()
	granite(g, c)
	si := g.int("shared_intermediate_size", 0)
	for i, b := range c.Blocks {
		p := s.layer(i) + "block_sparse_moe."
		m := &MoE{Experts: g.int("num_local_experts", 0), TopK: g.int("num_experts_per_tok", 0), Inter: s.d.inter,
			Router: lin(p+"router.layer", false), Scoring: TopKSoftmax, Act: s.act,
			Weights: ExpertWeights{GateUp: p + "input_linear.weight", Down: p + "output_linear.weight"}}
		if si > 0 {
			q := s.layer(i) + "shared_mlp."
			m.Shared = &MLP{Inter: si, Act: s.act, GateUp: lin(q+"input_linear", false), Down: lin(q+"output_linear", false)}
		}
		b.MLP = &MLP{MoE: m}
	}
	return c, nil
}

// biasOf is l's bias name when bias, else none.
func biasOf(l Linear, bias bool) string {
	if !bias {
		return ""
	}
	return l.W[:len(l.W)-len("weight")] + "bias"
}
