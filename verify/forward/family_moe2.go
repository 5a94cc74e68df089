package forward

import (
	"fmt"
	"math"
	"strings"
)

// moreMoEFamilies are the mixtures of experts transformers composes from the parts above:
// DeepSeek-V3 routing under other attention (dots.llm1, EXAONE-MoE, GLM-4-MoE-Lite, Solar
// Open, HY-V3, AFMoE), OLMoE's under OLMo 2's norms (FlexOlmo), Qwen3-MoE's with rope per
// layer type (Mellum), Laguna's gated heads, Cohere 2's MoE and Aria's text decoder.
var moreMoEFamilies = map[string]family{
	"dots1": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		c := s.config()
		s.qkNorm(c, s.eps)
		first := g.int("first_k_dense_replace", 0)
		for i, b := range c.Blocks {
			if i >= first {
				b.MLP = &MLP{MoE: deepseekMoE(g, s.layer(i)+"mlp.", s.act)}
			}
		}
		w, mwl := g.int("sliding_window", 0), g.int("max_window_layers", 62)
		sl, err := g.layerTypes(c.Layers, func(i int) bool { return w > 0 && i >= mwl })
		if err != nil {
			return nil, err
		}
		window(c, sl, w)
		return c, nil
	},
	"exaone_moe": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.qkvBias, s.oBias, s.mlpBias = false, false, false
		c := s.config()
		if err := exaoneAttention(s, c); err != nil {
			return nil, err
		}
		first := g.int("first_k_dense_replace", 1)
		sparse, err := g.mlpTypes(c.Layers, func(i int) bool { return i >= first })
		if err != nil {
			return nil, err
		}
		for i, b := range c.Blocks {
			if !sparse[i] {
				continue
			}
			p := s.layer(i) + "mlp."
			m := deepseekMoE(g, p, s.act)
			// save_pretrained writes the correction bias under mlp., not mlp.gate.
			m.ScoreBias = either(p+"gate.e_score_correction_bias", p+"e_score_correction_bias")
			m.Experts, m.Shared = g.int("num_experts", 0), nil
			if n := g.int("num_shared_experts", 0); n > 0 {
				m.Shared = sharedMLP(p+"shared_experts.", m.Inter*n, s.act)
			}
			b.MLP = &MLP{MoE: m}
		}
		return c, nil
	},
	"flex_olmo": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.mlpBias = false
		c := s.config()
		for i, b := range c.Blocks {
			p := s.layer(i)
			// OLMo 2's post-norms and whole-projection q/k norms, OLMoE's experts.
			b.AttnNorm, b.MLPNorm = nil, nil
			b.AttnOut, b.MLPOut = s.norm(p+"post_attention_layernorm"), s.norm(p+"post_feedforward_layernorm")
			b.Attn.QNorm = &HeadNorm{Norm: *rms(p+"self_attn.q_norm", s.eps), Whole: true}
			b.Attn.KNorm = &HeadNorm{Norm: *rms(p+"self_attn.k_norm", s.eps), Whole: true}
			b.MLP = &MLP{MoE: &MoE{Experts: g.int("num_experts", 0), TopK: g.int("num_experts_per_tok", 0), Inter: s.d.inter,
				Router: lin(p+"mlp.gate", false), Scoring: Softmax, NormTopK: g.bool("norm_topk_prob", false), Act: s.act,
				Weights: stdExperts(p + "mlp.")}}
		}
		return c, nil
	},
	"cohere2_moe": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		if g.value("rms_norm_eps") == nil {
			eps := g.float("layer_norm_eps", 1e-5)
			s.norm = func(n string) *Norm { return lnorm(n, eps, false) }
		}
		s.rope.Style = Pairs
		s.mlpBias = false
		c := s.config()
		c.LogitScale = float32(g.float("logit_scale", 1))
		n := c.Layers
		// first_k_dense_replace only shapes the lists the class writes when config.json has
		// none.
		first := g.int("first_k_dense_replace", 0)
		sparse, err := g.mlpTypes(n, func(i int) bool { return i >= first })
		if err != nil {
			return nil, err
		}
		pre, pat := g.int("prefix_dense_sliding_window_pattern", 1), g.int("sliding_window_pattern", 4)
		sl, err := g.layerTypes(n, func(i int) bool {
			if i < first {
				return pre > 0 && (i+1)%pre != 0
			}
			return pat > 0 && (i-first+1)%pat != 0
		})
		if err != nil {
			return nil, err
		}
		force := make([]bool, n)
		E, K := g.int("num_experts", 0), g.int("num_experts_per_tok", 0)
		scoring := TopKSoftmax
		switch f := g.str("expert_selection_fn", "softmax"); f {
		case "softmax":
		case "sigmoid":
			scoring = TopKSigmoid
		default:
			return nil, fmt.Errorf("expert_selection_fn %q is not supported (softmax, sigmoid)", f)
		}
		avg := false
		switch f := g.str("shared_expert_combination_strategy", "average"); f {
		case "average":
			avg = true
		case "sum":
		default:
			return nil, fmt.Errorf("shared_expert_combination_strategy %q is not supported (sum, average)", f)
		}
		for i, b := range c.Blocks {
			p := s.layer(i)
			b.Residual, b.MLPNorm = Parallel, nil
			if !sparse[i] {
				force[i] = pre == 1
				b.MLP = s.mlp(p+"mlp.", g.int("prefix_dense_intermediate_size", s.d.inter))
				continue
			}
			// The top k logits, then their softmax (or sigmoids, renormalized with
			// norm_topk_prob); shared experts added or averaged in.
			m := &MoE{Experts: E, TopK: K, Inter: s.d.inter, Router: lin(p+"mlp.gate", false), Scoring: scoring,
				NormTopK: scoring == TopKSigmoid && g.bool("norm_topk_prob", true), Act: s.act, Weights: stdExperts(p + "mlp.")}
			if ns := g.int("num_shared_experts", 0); ns > 0 {
				m.Shared = sharedMLP(p+"mlp.shared_experts.", s.d.inter*ns, s.act)
				m.SharedAverage = avg
			}
			b.MLP = &MLP{MoE: m}
		}
		cohere2Rope(g, c, sl, force)
		return c, nil
	},
	"mellum": func(g *getter) (*Config, error) {
		return typedRopeMoE(g, false)
	},
	"laguna": func(g *getter) (*Config, error) {
		return typedRopeMoE(g, true)
	},
	"solar_open": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{partial: 1})
		if err != nil {
			return nil, err
		}
		s.oBias = false
		c := s.config()
		for i, b := range c.Blocks {
			b.MLP = &MLP{MoE: deepseekMoE(g, s.layer(i)+"mlp.", s.act)}
		}
		return c, nil
	},
	"glm4_moe_lite": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		c := s.config()
		if err := deepseekMLA(g, s, c); err != nil {
			return nil, err
		}
		sparse, err := g.mlpTypes(c.Layers, func(i int) bool { return i >= 1 })
		if err != nil {
			return nil, err
		}
		for i, b := range c.Blocks {
			if sparse[i] {
				b.MLP = &MLP{MoE: deepseekMoE(g, s.layer(i)+"mlp.", s.act)}
			}
		}
		return c, nil
	},
	"hy_v3": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		c := s.config()
		s.qkNorm(c, s.eps)
		sparse, err := g.mlpTypes(c.Layers, func(i int) bool { return i >= 1 })
		if err != nil {
			return nil, err
		}
		inter := g.int("moe_intermediate_size", 0)
		for i, b := range c.Blocks {
			if !sparse[i] {
				continue
			}
			p := s.layer(i) + "mlp."
			// Sigmoid scores chosen with the correction bias, renormalized, times
			// router_scaling_factor; plus the shared experts.
			// (save_pretrained writes router.gate, expert_bias and shared_mlp.)
			m := &MoE{Experts: g.int("num_experts", 0), TopK: g.int("num_experts_per_tok", 0), Inter: inter,
				Router: Linear{W: either(p+"gate.weight", p+"router.gate.weight")}, Scoring: Sigmoid,
				ScoreBias: either(p+"e_score_correction_bias", p+"expert_bias"), NormTopK: true, NormEps: 1e-20,
				RoutedScale: float32(g.float("router_scaling_factor", 1)), Act: s.act, Weights: stdExperts(p)}
			if n := g.int("num_shared_experts", 0); n > 0 {
				m.Shared = alternatives(s.mlp(p+"shared_experts.", inter*n), p+"shared_experts.", p+"shared_mlp.")
			}
			b.MLP = &MLP{MoE: m}
		}
		return c, nil
	},
	"afmoe": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.mlpBias = false
		c := s.config()
		s.qkNorm(c, s.eps)
		if g.bool("mup_enabled", false) {
			c.EmbedScale = float32(math.Sqrt(float64(s.d.hidden)))
		}
		every := g.int("global_attn_every_n_layers", 4)
		sl, err := g.layerTypes(c.Layers, func(i int) bool { return every > 0 && (i+1)%every != 0 })
		if err != nil {
			return nil, err
		}
		dense, inter := g.int("num_dense_layers", 1), g.int("moe_intermediate_size", 0)
		for i, b := range c.Blocks {
			p := s.layer(i)
			// Norms before and after both sublayers; the attention output gated by
			// sigmoid(gate_proj(x)); rope on the local (sliding) layers only.
			b.AttnOut = s.norm(p + "post_attention_layernorm")
			b.MLPNorm, b.MLPOut = s.norm(p+"pre_mlp_layernorm"), s.norm(p+"post_mlp_layernorm")
			b.Attn.Gate = lin(p+"self_attn.gate_proj", false)
			if !sl[i] {
				b.Attn.Rope = nil
			}
			if i < dense {
				continue
			}
			m := p + "mlp."
			e := &MoE{Experts: g.int("num_experts", 0), TopK: g.int("num_experts_per_tok", 0), Inter: inter,
				Router: lin(m+"router.gate", false), Scoring: Sigmoid, ScoreBias: m + "expert_bias", NormTopK: true,
				NormEps: 1e-20, RoutedScale: float32(g.float("route_scale", 1)), Act: s.act, Weights: stdExperts(m)}
			if n := g.int("num_shared_experts", 0); n > 0 {
				e.Shared = sharedMLP(m+"shared_experts.", inter*n, s.act)
			}
			b.MLP = &MLP{MoE: e}
		}
		window(c, sl, g.int("sliding_window", 0))
		return c, nil
	},
	"aria_text": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		c := s.config()
		n := g.int("moe_num_shared_experts", 2)
		for i, b := range c.Blocks {
			p := s.layer(i) + "mlp."
			// Experts fc1 [E, H, 2I] (gate then up) and fc2 [E, I, H] applied as x·W, always
			// SiLU; a softmax over the top moe_topk logits; shared experts of n×I added.
			m := &MoE{Experts: g.int("moe_num_experts", 0), TopK: g.int("moe_topk", 0), Inter: s.d.inter,
				Router: lin(p+"router", false), Scoring: TopKSoftmax, Act: "silu",
				Weights: ExpertWeights{GateUp: p + "experts.fc1.weight", Down: p + "experts.fc2.weight", Transposed: true}}
			if n > 0 {
				m.Shared = s.mlp(p+"shared_experts.", s.d.inter*n)
			}
			b.MLP = &MLP{MoE: m}
		}
		return c, nil
	},
}

// typedRopeMoE is Mellum (Laguna: true): a rope per layer type from rope_parameters keyed
// by full_attention and sliding_attention, per-head q/k RMSNorms, sparse layers by
// mlp_layer_types. Mellum's experts are Qwen3-MoE's; Laguna's are sigmoid-routed with a
// correction bias, capped router logits and shared experts, and its heads (per layer,
// num_attention_heads_per_layer) each gated by softplus(g_proj(x)).
func typedRopeMoE(g *getter, laguna bool) (*Config, error) {
	defaults := map[string]any{"full_attention": map[string]any{"rope_type": "default", "rope_theta": 500000.0},
		"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 10000.0}}
	if laguna {
		defaults["full_attention"].(map[string]any)["partial_rotary_factor"] = 0.5
		if g.bool("moe_apply_router_weight_on_input", false) {
			return nil, fmt.Errorf("moe_apply_router_weight_on_input is not supported (transformers 5.12 refuses it)")
		}
	}
	o := ropeOpts{partialOK: laguna, params: defaults}
	s, err := newStd(g, o)
	if err != nil {
		return nil, err
	}
	o.headDim = s.d.headDim
	ropes, err := g.layerRopes(o, map[string]float64{"full_attention": 500000, "sliding_attention": 10000})
	if err != nil {
		return nil, err
	}
	c := s.config()
	s.qkNorm(c, s.eps)
	n := c.Layers
	sl, err := g.layerTypes(n, func(int) bool { return false })
	if err != nil {
		return nil, err
	}
	sparse, err := g.mlpTypes(n, func(i int) bool { return !laguna || i >= 1 })
	if err != nil {
		return nil, err
	}
	heads := g.ints("num_attention_heads_per_layer")
	if heads != nil && len(heads) != n {
		return nil, fmt.Errorf("num_attention_heads_per_layer has %d entries for %d layers", len(heads), n)
	}
	E, K, inter := g.int("num_experts", 0), g.int("num_experts_per_tok", 0), g.int("moe_intermediate_size", 0)
	for i, b := range c.Blocks {
		p := s.layer(i)
		typ := "full_attention"
		if sl[i] {
			typ = "sliding_attention"
		}
		b.Attn.Rope = &RopeSpec{Rope: ropes[typ]}
		if laguna {
			if heads != nil {
				h := heads[i]
				if err := bounded("num_attention_heads_per_layer", h, maxHeads); err != nil {
					return nil, err
				}
				if s.d.kvHeads <= 0 || h%s.d.kvHeads != 0 {
					return nil, fmt.Errorf("layer %d: %d heads are not a multiple of %d key/value heads", i, h, s.d.kvHeads)
				}
				b.Attn.Heads = h
			}
			b.Attn.Gate, b.Attn.GateSoftplus, b.Attn.GateHeads = lin(p+"self_attn.g_proj", false), true, true
		}
		if !sparse[i] {
			continue
		}
		m := p + "mlp."
		e := &MoE{Experts: E, TopK: K, Inter: inter, Router: lin(m+"gate", false), Scoring: Softmax,
			NormTopK: g.bool("norm_topk_prob", true), Act: s.act, Weights: stdExperts(m)}
		if laguna {
			// (save_pretrained writes the bias under experts. and shared_expert.)
			e.Scoring, e.NormTopK = Sigmoid, true
			e.ScoreBias = either(m+"gate.e_score_correction_bias", m+"experts.e_score_correction_bias")
			e.RoutedScale = float32(g.float("moe_routed_scaling_factor", 1))
			e.RouterSoftcap = g.float("moe_router_logit_softcapping", 0)
			if si := g.int("shared_expert_intermediate_size", 0); si > 0 {
				e.Shared = alternatives(sharedMLP(m+"shared_experts.", si, s.act), m+"shared_experts.", m+"shared_expert.")
			}
		}
		b.MLP = &MLP{MoE: e}
	}
	window(c, sl, g.int("sliding_window", 0))
	return c, nil
}

// alternatives lets each of an MLP's weights named under prefix p be found under q instead
// (names transformers holds in memory and save_pretrained writes differently).
func alternatives(m *MLP, p, q string) *MLP {
	for _, l := range []*Linear{&m.Gate, &m.Up, &m.Down} {
		if l.W != "" {
			l.W = either(l.W, q+strings.TrimPrefix(l.W, p))
		}
		if l.B != "" {
			l.B = either(l.B, q+strings.TrimPrefix(l.B, p))
		}
	}
	return m
}
