package forward

import (
	"fmt"
	"maps"
	"math"
)

// llamaFamilies are the dense decoders shaped like Llama.
var llamaFamilies = map[string]family{
	"llama": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		return s.config(), nil
	},
	"mistral": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.qkvBias, s.oBias, s.mlpBias = false, false, false
		c := s.config()
		s.allSliding(c)
		return c, nil
	},
	"qwen2": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.qkvBias, s.oBias = true, false
		c := s.config()
		return c, s.qwenWindow(c)
	},
	"qwen3": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		c := s.config()
		s.qkNorm(c, s.eps)
		return c, s.qwenWindow(c)
	},
	"phi3": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{longropeAliases: true, partialOK: true})
		if err != nil {
			return nil, err
		}
		s.qkvBias, s.oBias = false, false
		c := s.config()
		for i, b := range c.Blocks {
			p := s.layer(i)
			// qkv_proj holds q, k and v one after the other; gate_up_proj gate then up.
			b.Attn.QKV = QKV{Fused: lin(p+"self_attn.qkv_proj", false), Layout: Concat}
			b.MLP.Gate, b.MLP.Up = Linear{}, Linear{}
			b.MLP.GateUp, b.MLP.Layout = lin(p+"mlp.gate_up_proj", false), GateFirst
		}
		s.allSliding(c)
		return c, nil
	},
	"olmo2": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		c := s.config()
		for i, b := range c.Blocks {
			p := s.layer(i)
			// No norm before the sublayers: each output is normalized before it joins the
			// residual; q and k are normalized over all heads at once.
			b.AttnNorm, b.MLPNorm = nil, nil
			b.AttnOut, b.MLPOut = s.norm(p+"post_attention_layernorm"), s.norm(p+"post_feedforward_layernorm")
			b.Attn.QNorm = &HeadNorm{Norm: *rms(p+"self_attn.q_norm", s.eps), Whole: true}
			b.Attn.KNorm = &HeadNorm{Norm: *rms(p+"self_attn.k_norm", s.eps), Whole: true}
		}
		return c, nil
	},
	"granite": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.scale = g.float("attention_multiplier", 1)
		c := s.config()
		granite(g, c)
		return c, nil
	},
	"starcoder2": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		eps := g.float("norm_epsilon", 1e-5)
		bias := g.bool("use_bias", true)
		s.norm = func(n string) *Norm { return lnorm(n, eps, true) }
		s.qkvBias, s.oBias, s.mlpBias = bias, bias, bias
		c := s.config()
		for i, b := range c.Blocks {
			p := s.layer(i) + "mlp."
			b.MLP = &MLP{Inter: s.d.inter, Act: s.act, Up: lin(p+"c_fc", bias), Down: lin(p+"c_proj", bias)}
		}
		s.allSliding(c)
		return c, nil
	},
	"stablelm": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{partial: 0.25, partialOK: true})
		if err != nil {
			return nil, err
		}
		eps := g.float("layer_norm_eps", 1e-5)
		s.norm = func(n string) *Norm { return lnorm(n, eps, true) }
		s.qkvBias, s.oBias = g.bool("use_qkv_bias", false), false
		c := s.config()
		parallel := g.bool("use_parallel_residual", false)
		qkLN := g.bool("qk_layernorm", false)
		for i, b := range c.Blocks {
			p := s.layer(i)
			if parallel {
				b.Residual, b.MLPNorm = Parallel, nil
			}
			if qkLN {
				// A bias-free LayerNorm per head, each head with its own weight.
				b.Attn.QNorm = &HeadNorm{Norm: Norm{Kind: LayerNorm, Weight: p + "self_attn.q_layernorm.norms.%d.weight", Eps: eps}, PerHead: true}
				b.Attn.KNorm = &HeadNorm{Norm: Norm{Kind: LayerNorm, Weight: p + "self_attn.k_layernorm.norms.%d.weight", Eps: eps}, PerHead: true}
			}
		}
		return c, nil
	},
	"cohere":  cohere(false),
	"cohere2": cohere(true),
	"glm":     glm(false),
	"glm4":    glm(true),
	"ernie4_5": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.rope.Style = Pairs
		b := g.bool("use_bias", false)
		s.qkvBias, s.oBias, s.mlpBias = b, b, b
		return s.config(), nil
	},
	"hunyuan_v1_dense": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.mlpBias = false
		c := s.config()
		hunyuanQKNorm(s, c)
		return c, nil
	},
	"olmo": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		// A LayerNorm without weight or bias, eps 1e-5 whatever the config says.
		s.norm = func(string) *Norm { return &Norm{Kind: LayerNorm, Eps: 1e-5} }
		s.mlpBias = false
		c := s.config()
		for _, b := range c.Blocks {
			b.Attn.Clip = g.float("clip_qkv", 0)
		}
		return c, nil
	},
	"olmo3": func(g *getter) (*Config, error) {
		c, err := families["olmo2"](g)
		if err != nil {
			return nil, err
		}
		sl, err := g.layerTypes(c.Layers, func(i int) bool { return (i+1)%4 != 0 })
		if err != nil {
			return nil, err
		}
		window(c, sl, g.int("sliding_window", 0))
		return c, nil
	},
	"ministral": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.qkvBias, s.oBias, s.mlpBias = false, false, false
		c := s.config()
		w := g.int("sliding_window", 0)
		sl, err := g.layerTypes(c.Layers, func(int) bool { return w > 0 })
		if err != nil {
			return nil, err
		}
		window(c, sl, w)
		return c, nil
	},
	"ministral3": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{params: map[string]any{"type": "yarn", "rope_theta": 1e6, "factor": 16.0,
			"original_max_position_embeddings": 16384.0, "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0,
			"llama_4_scaling_beta": 0.1}})
		if err != nil {
			return nil, err
		}
		s.qkvBias, s.oBias, s.mlpBias = false, false, false
		c := s.config()
		s.allSliding(c)
		// Queries scaled by 1 + β·log(1 + floor(p / original_max_position_embeddings)).
		if beta, _ := s.rope.Rope.num("llama_4_scaling_beta", 0, false); beta != 0 {
			orig, err := s.rope.Rope.num("original_max_position_embeddings", 0, true)
			if err != nil || orig <= 0 {
				return nil, fmt.Errorf("llama_4_scaling_beta needs original_max_position_embeddings")
			}
			for _, b := range c.Blocks {
				b.Attn.TempTuning = &TempTuning{Floor: orig, Scale: beta}
			}
		}
		return c, nil
	},
	"nemotron": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{partial: 0.5, partialOK: true})
		if err != nil {
			return nil, err
		}
		eps := g.float("norm_eps", 1e-5)
		s.norm = func(n string) *Norm { r := lnorm(n, eps, true); r.PlusOne = true; return r }
		s.gated = false
		return s.config(), nil
	},
	"helium": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.rope.Style, s.oBias = Pairs, false
		return s.config(), nil
	},
	"arcee": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.gated = false
		return s.config(), nil
	},
	"apertus": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{params: map[string]any{"rope_type": "llama3", "rope_theta": 12e6, "factor": 8.0,
			"original_max_position_embeddings": 8192.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}})
		if err != nil {
			return nil, err
		}
		s.gated, s.mlpBias = false, false
		c := s.config()
		s.qkNorm(c, s.eps)
		for i, b := range c.Blocks {
			p := s.layer(i)
			b.AttnNorm, b.MLPNorm = s.norm(p+"attention_layernorm"), s.norm(p+"feedforward_layernorm")
			if b.MLP.Act == "xielu" {
				a := p + "mlp.act_fn."
				b.MLP.ActParams = map[string]string{"alpha_p": a + "alpha_p", "alpha_n": a + "alpha_n", "beta": a + "beta", "eps": a + "eps"}
			}
		}
		return c, nil
	},
	"seed_oss": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.oBias = g.bool("attention_out_bias", false)
		return s.config(), nil
	},
	"jais2": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		eps := g.float("layer_norm_eps", 1e-5)
		s.norm = func(n string) *Norm { return lnorm(n, eps, true) }
		s.gated = false
		return s.config(), nil
	},
	"smollm3": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		c := s.config()
		interval := g.int("no_rope_layer_interval", 4)
		rope := g.ints("no_rope_layers")
		if rope == nil {
			for i := range c.Layers {
				r := 1
				if interval > 0 && (i+1)%interval == 0 {
					r = 0
				}
				rope = append(rope, r)
			}
		}
		if len(rope) != c.Layers {
			return nil, fmt.Errorf("no_rope_layers has %d entries for %d layers", len(rope), c.Layers)
		}
		w := 0
		if g.bool("use_sliding_window", false) {
			w = g.int("sliding_window", 0)
		}
		sl, err := g.layerTypes(c.Layers, func(i int) bool { return w > 0 && rope[i] == 0 })
		if err != nil {
			return nil, err
		}
		for i, b := range c.Blocks {
			if rope[i] == 0 { // no_rope_layers lists 1 for the layers that use it
				b.Attn.Rope = nil
			}
		}
		window(c, sl, w)
		return c, nil
	},
	"exaone4": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.qkvBias, s.oBias, s.mlpBias = false, false, false
		c := s.config()
		for i, b := range c.Blocks {
			p := s.layer(i)
			b.AttnNorm, b.MLPNorm = nil, nil
			b.AttnOut, b.MLPOut = s.norm(p+"post_attention_layernorm"), s.norm(p+"post_feedforward_layernorm")
		}
		return c, exaoneAttention(s, c)
	},
	"youtu": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		// Llama's layers with DeepSeek-V3's multi-head latent attention.
		c := s.config()
		return c, deepseekMLA(g, s, c)
	},
	"diffllama": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.mlpBias = false
		c := s.config()
		for i, b := range c.Blocks {
			a := s.layer(i) + "self_attn."
			b.Attn.Diff = &DiffAttn{LambdaQ1: a + "lambda_q1", LambdaK1: a + "lambda_k1", LambdaQ2: a + "lambda_q2",
				LambdaK2: a + "lambda_k2", Init: 0.8 - 0.6*math.Exp(-0.3*float64(i)), Eps: s.eps}
		}
		return c, nil
	},
	"bitnet": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		c := s.config()
		for i, b := range c.Blocks {
			p := s.layer(i)
			// RMSNorms inside both sublayers: over the attention context before o_proj, over
			// the MLP's hidden activations before down_proj. (Weights as floats; packed
			// ternary BitLinear checkpoints are not read.)
			b.Attn.SubNorm = rms(p+"self_attn.attn_sub_norm", s.eps)
			b.MLP.SubNorm = rms(p+"mlp.ffn_sub_norm", s.eps)
		}
		return c, nil
	},
	"cwm": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{params: map[string]any{"rope_theta": 1e6, "factor": 16.0, "high_freq_factor": 4.0,
			"low_freq_factor": 1.0, "original_max_position_embeddings": 8192.0, "rope_type": "llama3"}})
		if err != nil {
			return nil, err
		}
		s.qkvBias, s.oBias = false, false
		c := s.config()
		sl, err := g.layerTypes(c.Layers, func(i int) bool { return i%4 != 0 })
		if err != nil {
			return nil, err
		}
		window(c, sl, g.int("sliding_window", 0))
		return c, nil
	},
	"hyperclovax": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.scale = g.float("attention_multiplier", s.scale)
		c := s.config()
		c.EmbedScale = float32(g.float("embedding_multiplier", 1))
		c.LogitScale = float32(g.float("logits_scaling", 1))
		rs := float32(g.float("residual_multiplier", 1))
		post := g.bool("use_post_norm", true)
		for i, b := range c.Blocks {
			p := s.layer(i)
			b.ResidualScale = rs
			if post {
				b.AttnOut, b.MLPOut = s.norm(p+"post_norm1"), s.norm(p+"post_norm2")
			}
		}
		return c, nil
	},
	"nanochat": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		// RMSNorms without weights everywhere, the embeddings normalized too; q and k
		// normalized after a rope that turns the other way; an ungated fc1/fc2 MLP.
		s.norm = func(string) *Norm { return &Norm{Kind: RMSNorm, Eps: s.eps} }
		s.rope.Style = HalvesInverse
		c := s.config()
		c.EmbedNorm = s.norm("")
		c.FinalSoftcap = g.float("final_logit_softcapping", 0)
		for i, b := range c.Blocks {
			p := s.layer(i) + "mlp."
			b.MLP = plainMLP(p+"fc1", p+"fc2", s.d.inter, s.act, false, false)
			b.Attn.QNorm = &HeadNorm{Norm: *s.norm(""), AfterRope: true}
			b.Attn.KNorm = &HeadNorm{Norm: *s.norm(""), AfterRope: true}
		}
		return c, nil
	},
	"vaultgemma": func(g *getter) (*Config, error) {
		c, err := gemma(2)(g)
		if err != nil {
			return nil, err
		}
		for _, b := range c.Blocks {
			b.AttnOut, b.MLPOut = nil, nil
		}
		return c, nil
	},
	"gemma":       gemma(1),
	"gemma2":      gemma(2),
	"gemma3_text": gemma(3),
}

// granite applies Granite's multipliers: embeddings, each residual branch and the logits.
func granite(g *getter, c *Config) {
	c.EmbedScale = float32(g.float("embedding_multiplier", 1))
	c.LogitDiv = float32(g.float("logits_scaling", 1))
	rs := float32(g.float("residual_multiplier", 1))
	for _, b := range c.Blocks {
		b.ResidualScale = rs
	}
}

// gemma is Gemma's decoder, version 1, 2 or 3: embeddings scaled by √hidden, RMSNorm
// weights applied as 1 + w; Gemma 2 adds norms around both sublayers,
// query_pre_attn_scalar, soft-capping and alternating sliding layers; Gemma 3 per-head q/k
// norms and a rope of its own for the sliding layers.
func gemma(version int) family {
	return func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		s.norm = func(n string) *Norm { r := rms(n, s.eps); r.PlusOne = true; return r }
		if version == 1 {
			s.act = Act(g.str("hidden_act", "gelu_pytorch_tanh"))
		} else {
			s.act = Act(g.str("hidden_activation", "gelu_pytorch_tanh"))
			s.scale = 1 / math.Sqrt(g.float("query_pre_attn_scalar", 256))
			if g.bool("use_bidirectional_attention", false) {
				return nil, fmt.Errorf("use_bidirectional_attention is not supported")
			}
		}
		var ropes map[string]*Rope
		if version == 3 {
			// Gemma3TextConfig.convert_rope_params_to_dict: a dict per layer type; legacy
			// rope_scaling updates the full-attention one; rope_theta and
			// rope_local_base_freq give the thetas.
			o := ropeOpts{headDim: s.d.headDim}
			dict := func(v any) map[string]any {
				if m, ok := v.(map[string]any); ok {
					return maps.Clone(m)
				}
				return map[string]any{}
			}
			rp, _ := g.lookup("rope_parameters")
			full, local := dict(dict(rp)["full_attention"]), dict(dict(rp)["sliding_attention"])
			if rs, ok := g.lookup("rope_scaling"); ok {
				maps.Copy(full, dict(rs))
			}
			if _, ok := local["rope_theta"]; !ok {
				local["rope_theta"] = g.float("rope_local_base_freq", g.theta("local"))
			}
			fr, err := g.resolveRope(full, o, g.theta("global"))
			if err != nil {
				return nil, err
			}
			lr, err := g.resolveRope(local, o, g.theta("local"))
			if err != nil {
				return nil, err
			}
			ropes = map[string]*Rope{"full": fr, "sliding": lr}
		}
		c := s.config()
		c.EmbedScale = float32(math.Sqrt(float64(s.d.hidden)))
		if version >= 2 {
			c.FinalSoftcap = g.float("final_logit_softcapping", 0)
			softcap := g.float("attn_logit_softcapping", 0)
			pattern := 2
			if version == 3 {
				pattern = g.int("sliding_window_pattern", 6)
			}
			sl, err := g.layerTypes(c.Layers, func(i int) bool { return pattern > 0 && (i+1)%pattern != 0 })
			if err != nil {
				return nil, err
			}
			for i, b := range c.Blocks {
				p := s.layer(i)
				b.AttnOut = s.norm(p + "post_attention_layernorm")
				b.MLPNorm = s.norm(p + "pre_feedforward_layernorm")
				b.MLPOut = s.norm(p + "post_feedforward_layernorm")
				b.Attn.Softcap = softcap
				if version == 3 {
					b.Attn.QNorm = &HeadNorm{Norm: *s.norm(p + "self_attn.q_norm")}
					b.Attn.KNorm = &HeadNorm{Norm: *s.norm(p + "self_attn.k_norm")}
					b.Attn.Rope = &RopeSpec{Rope: ropes["full"]}
					if sl[i] {
						b.Attn.Rope = &RopeSpec{Rope: ropes["sliding"]}
					}
				}
			}
			window(c, sl, g.int("sliding_window", 0))
		}
		return c, nil
	}
}

// cohere is Cohere's decoder: bias-free LayerNorms, a parallel residual of one norm, rope
// in pairs, optional per-head q/k LayerNorms (weights [heads, head_dim]) and logits scaled
// by logit_scale. Cohere 2 alternates sliding layers (sliding_window_pattern, 4), the rope
// on those only, and fixes head_dim to hidden/heads.
func cohere(v2 bool) family {
	return func(g *getter) (*Config, error) {
		if v2 {
			if h, n := g.int("hidden_size", 0), g.int("num_attention_heads", 0); n > 0 {
				g.raw["head_dim"] = float64(h / n)
			}
		}
		s, err := newStd(g, ropeOpts{})
		if err != nil {
			return nil, err
		}
		eps := g.float("layer_norm_eps", 1e-5)
		s.norm = func(n string) *Norm { return lnorm(n, eps, false) }
		s.rope.Style = Pairs
		s.mlpBias = false
		s.tie = g.bool("tie_word_embeddings", true)
		c := s.config()
		c.LogitScale = float32(g.float("logit_scale", 1))
		qk := !v2 && g.bool("use_qk_norm", false)
		for i, b := range c.Blocks {
			p := s.layer(i)
			b.Residual, b.MLPNorm = Parallel, nil
			if qk {
				b.Attn.QNorm = &HeadNorm{Norm: *lnorm(p+"self_attn.q_norm", eps, false), PerHead: true}
				b.Attn.KNorm = &HeadNorm{Norm: *lnorm(p+"self_attn.k_norm", eps, false), PerHead: true}
			}
		}
		if v2 {
			pattern := g.int("sliding_window_pattern", 4)
			sl, err := g.layerTypes(c.Layers, func(i int) bool { return pattern > 0 && (i+1)%pattern != 0 })
			if err != nil {
				return nil, err
			}
			cohere2Rope(g, c, sl, nil)
		}
		return c, nil
	}
}

// glm is GLM (and GLM-4, which adds norms after both sublayers): a fused gate_up_proj,
// partial rotary (0.5) in pairs, q/k/v biases (attention_bias) and none on o.
func glm(v4 bool) family {
	return func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{partial: 0.5, partialOK: true})
		if err != nil {
			return nil, err
		}
		s.rope.Style, s.oBias, s.mlpBias = Pairs, false, false
		c := s.config()
		for i, b := range c.Blocks {
			p := s.layer(i)
			b.MLP.Gate, b.MLP.Up = Linear{}, Linear{}
			b.MLP.GateUp, b.MLP.Layout = lin(p+"mlp.gate_up_proj", false), GateFirst
			if v4 {
				b.AttnOut, b.MLPOut = s.norm(p+"post_self_attn_layernorm"), s.norm(p+"post_mlp_layernorm")
			}
		}
		return c, nil
	}
}

// hunyuanQKNorm gives HunYuan's per-head RMSNorms of q and k, applied after the rope.
func hunyuanQKNorm(s *std, c *Config) {
	for i, b := range c.Blocks {
		p := s.layer(i) + "self_attn."
		b.Attn.QNorm = &HeadNorm{Norm: *rms(p+"query_layernorm", s.eps), AfterRope: true}
		b.Attn.KNorm = &HeadNorm{Norm: *rms(p+"key_layernorm", s.eps), AfterRope: true}
	}
}

// exaoneAttention is EXAONE 4's attention: per-head q/k RMSNorms; with a sliding_window,
// every sliding_window_pattern-th layer global (layer_types may say) and without rope.
func exaoneAttention(s *std, c *Config) error {
	g := s.g
	s.qkNorm(c, s.eps)
	w := g.int("sliding_window", 0)
	pattern := g.int("sliding_window_pattern", 4)
	sl, err := g.layerTypes(c.Layers, func(i int) bool { return w > 0 && pattern > 0 && (i+1)%pattern != 0 })
	if err != nil {
		return err
	}
	for i, b := range c.Blocks {
		if w > 0 && !sl[i] { // global layers have no position embedding
			b.Attn.Rope = nil
		}
	}
	window(c, sl, w)
	return nil
}

// cohere2Rope is Cohere 2's windowing: the sliding layers windowed and, when sliding_window
// is set, rotated; the others (global) without rope unless force says (Cohere 2 MoE's dense
// prefix).
func cohere2Rope(g *getter, c *Config, sliding, force []bool) {
	set := g.value("sliding_window") != nil
	for i, b := range c.Blocks {
		if !(sliding[i] && set) && !(force != nil && force[i]) {
			b.Attn.Rope = nil
		}
	}
	window(c, sliding, g.int("sliding_window", 0))
}
