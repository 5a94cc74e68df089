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
