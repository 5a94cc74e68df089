package forward

import (
	"fmt"
	"math"
)

// gptFamilies are the decoders of the GPT lineage: learned, rotary or ALiBi positions,
// LayerNorms with biases, fused or Conv1D projections, parallel residuals.
var gptFamilies = map[string]family{
	"gpt2":    gpt2,
	"gpt-sw3": gpt2,
	"gpt_bigcode": func(g *getter) (*Config, error) {
		c, d, err := gptBase(g, "transformer.", "wte", "ln_f")
		if err != nil {
			return nil, err
		}
		mq := g.bool("multi_query", true)
		eps := g.float("layer_norm_epsilon", 1e-5)
		for i := range c.Blocks {
			p := fmt.Sprintf("transformer.h.%d.", i)
			a := gptAttention(g, d, p+"attn.c_attn", p+"attn.c_proj", false)
			// Multi-query: all query heads, then one key and one value head; else each
			// head's query, key and value together.
			if mq {
				a.KVHeads = 1
			} else {
				a.QKV.Layout = PerHead
			}
			c.Blocks[i] = &Block{AttnNorm: lnorm(p+"ln_1", eps, true), MLPNorm: lnorm(p+"ln_2", eps, true), Attn: a,
				MLP: plainMLP(p+"mlp.c_fc", p+"mlp.c_proj", g.int("n_inner", 4*d.hidden), Act(g.str("activation_function", "")), true, false)}
		}
		c.Positions = &Positions{Weight: "transformer.wpe.weight"}
		return c, nil
	},
	"gpt_neox": func(g *getter) (*Config, error) {
		return neox(g, "gpt_neox.", 0.25, false)
	},
	"gpt_neox_japanese": func(g *getter) (*Config, error) {
		return neox(g, "gpt_neox_japanese.", 1, true)
	},
	"gptj":    gptj(false),
	"codegen": gptj(true),
	"bloom": func(g *getter) (*Config, error) {
		g.rename("n_embed", "hidden_size")
		c, d, err := gptBase(g, "transformer.", "word_embeddings", "ln_f")
		if err != nil {
			return nil, err
		}
		eps := g.float("layer_norm_epsilon", 1e-5)
		c.EmbedNorm = lnorm("transformer.word_embeddings_layernorm", eps, true)
		slopes := alibiSlopes(d.heads, false)
		normed := g.bool("apply_residual_connection_post_layernorm", false)
		for i := range c.Blocks {
			p := fmt.Sprintf("transformer.h.%d.", i)
			a := &Attention{Heads: d.heads, KVHeads: d.heads, HeadDim: d.headDim, Scale: 1 / math.Sqrt(float64(d.headDim)), ALiBi: slopes,
				QKV: QKV{Fused: lin(p+"self_attention.query_key_value", true), Layout: PerHead}, O: lin(p+"self_attention.dense", true)}
			c.Blocks[i] = &Block{AttnNorm: lnorm(p+"input_layernorm", eps, true), MLPNorm: lnorm(p+"post_attention_layernorm", eps, true),
				NormedResidual: normed, Attn: a,
				MLP: plainMLP(p+"mlp.dense_h_to_4h", p+"mlp.dense_4h_to_h", 4*d.hidden, "bloom_gelu", true, false)}
		}
		return c, nil
	},
	"opt": func(g *getter) (*Config, error) {
		c, d, err := gptBase(g, "model.decoder.", "embed_tokens", "")
		if err != nil {
			return nil, err
		}
		ed := g.int("word_embed_proj_dim", d.hidden)
		if ed != d.hidden {
			c.EmbedDim = ed
			c.ProjIn, c.ProjOut = lin("model.decoder.project_in", false), lin("model.decoder.project_out", false)
		}
		c.Positions = &Positions{Weight: "model.decoder.embed_positions.weight", Offset: 2}
		affine := g.bool("layer_norm_elementwise_affine", true)
		norm := func(n string) *Norm {
			if !affine {
				return &Norm{Kind: LayerNorm, Eps: 1e-5}
			}
			return lnorm(n, 1e-5, true)
		}
		before := g.bool("do_layer_norm_before", true)
		if before && !g.bool("_remove_final_layer_norm", false) {
			c.FinalNorm = norm("model.decoder.final_layer_norm")
		}
		bias := g.bool("enable_bias", true)
		for i := range c.Blocks {
			p := fmt.Sprintf("model.decoder.layers.%d.", i)
			a := &Attention{Heads: d.heads, KVHeads: d.heads, HeadDim: d.headDim, Scale: 1 / math.Sqrt(float64(d.headDim)),
				QKV: QKV{Q: lin(p+"self_attn.q_proj", bias), K: lin(p+"self_attn.k_proj", bias), V: lin(p+"self_attn.v_proj", bias)},
				O:   lin(p+"self_attn.out_proj", bias)}
			b := &Block{AttnNorm: norm(p + "self_attn_layer_norm"), MLPNorm: norm(p + "final_layer_norm"), Attn: a,
				MLP: plainMLP(p+"fc1", p+"fc2", g.int("ffn_dim", 0), Act(g.str("activation_function", "relu")), bias, false)}
			if !before {
				b.Residual = PostNorm
			}
			c.Blocks[i] = b
		}
		return c, nil
	},
	"mpt": func(g *getter) (*Config, error) {
		c, d, err := gptBase(g, "transformer.", "wte", "")
		if err != nil {
			return nil, err
		}
		eps := g.float("layer_norm_epsilon", 1e-5)
		c.FinalNorm = lnorm("transformer.norm_f", eps, false)
		ac := g.sub("attn_config")
		scale := ac.float("softmax_scale", 1/math.Sqrt(float64(d.hidden)/float64(d.heads)))
		// MptModel builds the bias with the default alibi_bias_max of 8, whatever the
		// configuration says.
		slopes := mptSlopes(d.heads, 8)
		for i := range c.Blocks {
			p := fmt.Sprintf("transformer.blocks.%d.", i)
			// MptAttention always adds the ALiBi bias and has no biases; its MLP is 4×
			// hidden with an exact GELU, whatever expansion_ratio says.
			a := &Attention{Heads: d.heads, KVHeads: d.heads, HeadDim: d.headDim, Scale: scale, ALiBi: slopes, Clip: ac.float("clip_qkv", 0),
				QKV: QKV{Fused: lin(p+"attn.Wqkv", false)}, O: lin(p+"attn.out_proj", false)}
			c.Blocks[i] = &Block{AttnNorm: lnorm(p+"norm_1", eps, false), MLPNorm: lnorm(p+"norm_2", eps, false), Attn: a,
				MLP: plainMLP(p+"ffn.up_proj", p+"ffn.down_proj", 4*d.hidden, "gelu", false, false)}
		}
		return c, nil
	},
	"falcon": func(g *getter) (*Config, error) {
		g.rename("n_embed", "hidden_size")
		c, d, err := gptBase(g, "transformer.", "word_embeddings", "ln_f")
		if err != nil {
			return nil, err
		}
		eps := g.float("layer_norm_epsilon", 1e-5)
		bias := g.bool("bias", false)
		newArch := g.bool("new_decoder_architecture", false)
		mq := g.bool("multi_query", true)
		parallel := g.bool("parallel_attn", true)
		nln := g.int("num_ln_in_parallel_attn", 0)
		if nln == 0 && newArch {
			nln = 2
		}
		a0 := &Attention{Heads: d.heads, KVHeads: d.heads, HeadDim: d.headDim, Scale: 1 / math.Sqrt(float64(d.headDim))}
		switch {
		case newArch:
			a0.KVHeads, a0.QKV.Layout = g.int("num_kv_heads", d.heads), Grouped
		case mq:
			a0.KVHeads, a0.QKV.Layout = 1, Concat
		default:
			a0.QKV.Layout = PerHead
		}
		if g.bool("alibi", false) {
			// The causal mask carries the ALiBi bias once more, scaled like the scores: the
			// bfloat16-rounded slopes count twice, times head_dim^-0.5.
			s := alibiSlopes(d.heads, true)
			for i := range s {
				s[i] *= float32(2 / math.Sqrt(float64(d.headDim)))
			}
			a0.ALiBi = s
		} else {
			r, err := g.rope(ropeOpts{headDim: d.headDim})
			if err != nil {
				return nil, err
			}
			a0.Rope = &RopeSpec{Rope: r}
		}
		for i := range c.Blocks {
			p := fmt.Sprintf("transformer.h.%d.", i)
			a := *a0
			a.QKV.Fused, a.O = lin(p+"self_attention.query_key_value", bias), lin(p+"self_attention.dense", bias)
			b := &Block{Attn: &a, MLP: plainMLP(p+"mlp.dense_h_to_4h", p+"mlp.dense_4h_to_h", g.int("ffn_hidden_size", 4*d.hidden),
				Act(g.str("activation", "gelu")), bias, false)}
			switch {
			case newArch && nln == 2:
				b.Residual, b.AttnNorm, b.MLPNorm = Parallel, lnorm(p+"ln_attn", eps, true), lnorm(p+"ln_mlp", eps, true)
			case newArch || parallel:
				b.Residual, b.AttnNorm = Parallel, lnorm(p+"input_layernorm", eps, true)
			default:
				b.AttnNorm, b.MLPNorm = lnorm(p+"input_layernorm", eps, true), lnorm(p+"post_attention_layernorm", eps, true)
			}
			c.Blocks[i] = b
		}
		return c, nil
	},
	"gpt_neo": func(g *getter) (*Config, error) {
		c, d, err := gptBase(g, "transformer.", "wte", "ln_f")
		if err != nil {
			return nil, err
		}
		types, err := neoLayers(g, d.layers)
		if err != nil {
			return nil, err
		}
		eps := g.float("layer_norm_epsilon", 1e-5)
		w := g.int("window_size", 256)
		for i := range c.Blocks {
			p := fmt.Sprintf("transformer.h.%d.attn.attention.", i)
			// The scores are not scaled; local layers see the window_size latest keys.
			a := &Attention{Heads: d.heads, KVHeads: d.heads, HeadDim: d.headDim, Scale: 1,
				QKV: QKV{Q: lin(p+"q_proj", false), K: lin(p+"k_proj", false), V: lin(p+"v_proj", false)}, O: lin(p+"out_proj", true)}
			if types[i] == "local" {
				a.Window = w
			}
			q := fmt.Sprintf("transformer.h.%d.", i)
			c.Blocks[i] = &Block{AttnNorm: lnorm(q+"ln_1", eps, true), MLPNorm: lnorm(q+"ln_2", eps, true), Attn: a,
				MLP: plainMLP(q+"mlp.c_fc", q+"mlp.c_proj", g.int("intermediate_size", 4*d.hidden), Act(g.str("activation_function", "gelu_new")), true, false)}
		}
		c.Positions = &Positions{Weight: "transformer.wpe.weight"}
		return c, nil
	},
	"openai-gpt": func(g *getter) (*Config, error) {
		c, d, err := gptBase(g, "transformer.", "tokens_embed", "")
		if err != nil {
			return nil, err
		}
		eps := g.float("layer_norm_epsilon", 1e-5)
		act := map[string]Act{"relu": "relu", "silu": "silu", "swish": "silu", "gelu": "gelu_new"}[g.str("afn", "gelu")]
		if act == "" {
			return nil, fmt.Errorf("afn %q is not one of OpenAI GPT's activations (relu, silu, gelu, swish)", g.str("afn", ""))
		}
		for i := range c.Blocks {
			p := fmt.Sprintf("transformer.h.%d.", i)
			// Post-norm blocks: ln_1(x + attn(x)), then ln_2(n + mlp(n)).
			c.Blocks[i] = &Block{Residual: PostNorm, AttnNorm: lnorm(p+"ln_1", eps, true), MLPNorm: lnorm(p+"ln_2", eps, true),
				Attn: gptAttention(g, d, p+"attn.c_attn", p+"attn.c_proj", true),
				MLP:  plainMLP(p+"mlp.c_fc", p+"mlp.c_proj", 4*d.hidden, act, true, true)}
			c.Blocks[i].Attn.Scale = 1 / math.Sqrt(float64(d.headDim))
		}
		c.Positions = &Positions{Weight: "transformer.positions_embed.weight"}
		return c, nil
	},
	"biogpt": func(g *getter) (*Config, error) {
		c, d, err := gptBase(g, "biogpt.", "embed_tokens", "")
		if err != nil {
			return nil, err
		}
		// Every LayerNorm has torch's default eps, whatever layer_norm_eps says; the head is
		// output_projection.
		c.FinalNorm = lnorm("biogpt.layer_norm", 1e-5, true)
		if c.Head.ok() {
			c.Head.W = "output_projection.weight"
		}
		if g.bool("scale_embedding", true) {
			c.EmbedScale = float32(math.Sqrt(float64(d.hidden)))
		}
		c.Positions = &Positions{Weight: "biogpt.embed_positions.weight", Offset: 2}
		for i := range c.Blocks {
			c.Blocks[i] = fairseqBlock(fmt.Sprintf("biogpt.layers.%d.", i), d, d.inter, Act(g.str("hidden_act", "gelu")))
		}
		return c, nil
	},
	"xglm": func(g *getter) (*Config, error) {
		c, d, err := gptBase(g, "model.", "embed_tokens", "")
		if err != nil {
			return nil, err
		}
		if g.bool("add_cross_attention", false) {
			return nil, fmt.Errorf("add_cross_attention is not supported")
		}
		c.FinalNorm = lnorm("model.layer_norm", 1e-5, true)
		if g.bool("scale_embedding", true) {
			c.EmbedScale = float32(math.Sqrt(float64(d.hidden)))
		}
		c.Positions = &Positions{Offset: 2, Sinusoid: Tensor2Tensor}
		if v := g.value("pad_token_id"); v != nil {
			pad := g.int("pad_token_id", 0)
			c.Positions.PadRow = &pad
		}
		for i := range c.Blocks {
			c.Blocks[i] = fairseqBlock(fmt.Sprintf("model.layers.%d.", i), d, g.int("ffn_dim", 0), Act(g.str("activation_function", "gelu")))
		}
		return c, nil
	},
	"ctrl": func(g *getter) (*Config, error) {
		c, d, err := gptBase(g, "transformer.", "w", "layernorm")
		if err != nil {
			return nil, err
		}
		c.Head.B = "lm_head.bias"
		c.EmbedScale = float32(math.Sqrt(float64(d.hidden)))
		c.Positions = &Positions{Sinusoid: Transformer}
		c.MaxTokens = d.maxPos
		for i := range c.Blocks {
			p := fmt.Sprintf("transformer.h.%d.", i)
			a := &Attention{Heads: d.heads, KVHeads: d.heads, HeadDim: d.headDim, Scale: 1 / math.Sqrt(float64(d.headDim)),
				QKV: QKV{Q: lin(p+"multi_head_attention.Wq", true), K: lin(p+"multi_head_attention.Wk", true),
					V: lin(p+"multi_head_attention.Wv", true)}, O: lin(p+"multi_head_attention.dense", true)}
			c.Blocks[i] = &Block{AttnNorm: lnorm(p+"layernorm1", 1e-6, true), MLPNorm: lnorm(p+"layernorm2", 1e-6, true), Attn: a,
				MLP: plainMLP(p+"ffn.0", p+"ffn.2", g.int("dff", 0), "relu", true, false)}
		}
		return c, nil
	},
	"persimmon": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{partial: 0.5, partialOK: true})
		if err != nil {
			return nil, err
		}
		eps := g.float("layer_norm_eps", 1e-5)
		s.norm = func(n string) *Norm { return lnorm(n, eps, true) }
		s.d.headDim = s.d.hidden / s.d.heads
		s.d.kvHeads = s.d.heads
		c := s.config()
		c.FinalNorm = s.norm("model.final_layernorm")
		qk := g.bool("qk_layernorm", true)
		for i, b := range c.Blocks {
			p := s.layer(i) + "self_attn."
			b.Attn.QKV = QKV{Fused: lin(p+"query_key_value", true), Layout: PerHead}
			b.Attn.O = lin(p+"dense", true)
			if qk {
				b.Attn.QNorm = &HeadNorm{Norm: *lnorm(p+"q_layernorm", eps, true)}
				b.Attn.KNorm = &HeadNorm{Norm: *lnorm(p+"k_layernorm", eps, true)}
			}
			b.MLP = plainMLP(s.layer(i)+"mlp.dense_h_to_4h", s.layer(i)+"mlp.dense_4h_to_h", s.d.inter, s.act, true, false)
		}
		return c, nil
	},
	"phi": func(g *getter) (*Config, error) {
		s, err := newStd(g, ropeOpts{partial: 0.5, partialOK: true})
		if err != nil {
			return nil, err
		}
		eps := g.float("layer_norm_eps", 1e-5)
		s.norm = func(n string) *Norm { return lnorm(n, eps, true) }
		s.qkvBias, s.oBias = true, true
		c := s.config()
		c.FinalNorm = s.norm("model.final_layernorm")
		c.Head.B = "lm_head.bias"
		qk := g.bool("qk_layernorm", false)
		for i, b := range c.Blocks {
			p := s.layer(i)
			b.Residual, b.MLPNorm = Parallel, nil
			b.Attn.O = lin(p+"self_attn.dense", true)
			if qk {
				b.Attn.QNorm = &HeadNorm{Norm: *lnorm(p+"self_attn.q_layernorm", eps, true)}
				b.Attn.KNorm = &HeadNorm{Norm: *lnorm(p+"self_attn.k_layernorm", eps, true)}
			}
			b.MLP = plainMLP(p+"mlp.fc1", p+"mlp.fc2", s.d.inter, s.act, true, false)
		}
		return c, nil
	},
}

// gptBase reads the sizes of a GPT-style configuration (heads of hidden/heads features,
// no grouped keys) and makes the decoder's frame: base+embed+".weight", the final
// LayerNorm base+final (none when final is empty) and lm_head, tied unless
// tie_word_embeddings is false. The blocks are for the family to fill.
func gptBase(g *getter, base, embed, final string) (*Config, dims, error) {
	d := g.dims()
	d.kvHeads = d.heads
	if d.heads > 0 {
		d.headDim = d.hidden / d.heads
	}
	if err := d.valid(); err != nil {
		return nil, d, err
	}
	if d.headDim*d.heads != d.hidden {
		return nil, d, fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d", d.hidden, d.heads)
	}
	c := &Config{Hidden: d.hidden, Vocab: d.vocab, Layers: d.layers, MaxPositions: d.maxPos, Base: base,
		Embed: base + embed + ".weight", Blocks: make([]*Block, d.layers)}
	if final != "" {
		c.FinalNorm = lnorm(base+final, g.float("layer_norm_epsilon", g.float("layer_norm_eps", 1e-5)), true)
	}
	if !g.bool("tie_word_embeddings", true) {
		c.Head = Linear{W: "lm_head.weight"}
	}
	return c, d, nil
}

// gptAttention is GPT-2's attention: one fused projection of q, k and v (Concat), scores
// scaled by head_dim^-0.5 when scale_attn_weights, and by 1/(layer+1) when
// scale_attn_by_inverse_layer_idx.
func gptAttention(g *getter, d dims, qkv, o string, conv bool) *Attention {
	a := &Attention{Heads: d.heads, KVHeads: d.heads, HeadDim: d.headDim, Scale: 1}
	if g.bool("scale_attn_weights", true) {
		a.Scale = 1 / math.Sqrt(float64(d.headDim))
	}
	if conv {
		a.QKV.Fused, a.O = conv1d(qkv), conv1d(o)
	} else {
		a.QKV.Fused, a.O = lin(qkv, true), lin(o, true)
	}
	return a
}

// plainMLP is an ungated MLP up → act → down, with biases when bias; Conv1D weights when
// conv.
func plainMLP(up, down string, inter int, act Act, bias, conv bool) *MLP {
	m := &MLP{Inter: inter, Act: act, Up: lin(up, bias), Down: lin(down, bias)}
	if conv {
		m.Up, m.Down = conv1d(up), conv1d(down)
	}
	return m
}

// gpt2 is GPT-2 (and GPT-SW3): learned positions, Conv1D projections, pre-LayerNorms.
func gpt2(g *getter) (*Config, error) {
	c, d, err := gptBase(g, "transformer.", "wte", "ln_f")
	if err != nil {
		return nil, err
	}
	if g.bool("add_cross_attention", false) {
		return nil, fmt.Errorf("add_cross_attention (an encoder-decoder GPT-2) is not supported")
	}
	eps := g.float("layer_norm_epsilon", 1e-5)
	byLayer := g.bool("scale_attn_by_inverse_layer_idx", false)
	for i := range c.Blocks {
		p := fmt.Sprintf("transformer.h.%d.", i)
		a := gptAttention(g, d, p+"attn.c_attn", p+"attn.c_proj", true)
		if byLayer {
			a.Scale /= float64(i + 1)
		}
		c.Blocks[i] = &Block{AttnNorm: lnorm(p+"ln_1", eps, true), MLPNorm: lnorm(p+"ln_2", eps, true), Attn: a,
			MLP: plainMLP(p+"mlp.c_fc", p+"mlp.c_proj", g.int("n_inner", 4*d.hidden), Act(g.str("activation_function", "gelu_new")), true, true)}
	}
	c.Positions = &Positions{Weight: "transformer.wpe.weight"}
	return c, nil
}

// neox is GPT-NeoX (and its Japanese variant): each head's q, k and v fused together,
// partial rotary (rotary_pct) in halves, LayerNorms, a parallel residual of two norms
// (use_parallel_residual) or sequential. The Japanese model has no projection biases
// except the last layer's attention output bias, and an MLP of intermediate_multiple_size
// × hidden.
func neox(g *getter, base string, partial float64, japanese bool) (*Config, error) {
	d := g.dims()
	d.kvHeads = d.heads
	if d.heads > 0 {
		d.headDim = d.hidden / d.heads
	}
	if err := d.valid(); err != nil {
		return nil, err
	}
	// The Japanese model's rotary embedding ignores the factor its attention applies: only
	// whole heads work there.
	r, err := g.rope(ropeOpts{headDim: d.headDim, partial: partial, partialOK: !japanese, partialKeys: []string{"rotary_pct"},
		thetaKeys: []string{"rotary_emb_base"}})
	if err != nil {
		return nil, err
	}
	eps := g.float("layer_norm_eps", 1e-5)
	c := &Config{Hidden: d.hidden, Vocab: d.vocab, Layers: d.layers, MaxPositions: d.maxPos, Base: base,
		Embed: base + "embed_in.weight", FinalNorm: lnorm(base+"final_layer_norm", eps, true)}
	if !g.bool("tie_word_embeddings", false) {
		c.Head = Linear{W: "embed_out.weight"}
	}
	bias := !japanese && g.bool("attention_bias", true)
	parallel := !japanese && g.bool("use_parallel_residual", true)
	inter := d.inter
	if japanese {
		inter = int(float64(d.hidden) * g.float("intermediate_multiple_size", 4))
	}
	for i := range d.layers {
		p := fmt.Sprintf("%slayers.%d.", base, i)
		a := &Attention{Heads: d.heads, KVHeads: d.heads, HeadDim: d.headDim, Scale: 1 / math.Sqrt(float64(d.headDim)),
			Rope: &RopeSpec{Rope: r}, QKV: QKV{Fused: lin(p+"attention.query_key_value", bias), Layout: PerHead},
			O: lin(p+"attention.dense", bias)}
		if japanese && i == d.layers-1 {
			a.O.B = p + "attention.dense_bias"
		}
		b := &Block{AttnNorm: lnorm(p+"input_layernorm", eps, true), MLPNorm: lnorm(p+"post_attention_layernorm", eps, true), Attn: a,
			MLP: plainMLP(p+"mlp.dense_h_to_4h", p+"mlp.dense_4h_to_h", inter, Act(g.str("hidden_act", "gelu")), !japanese, false)}
		if parallel {
			b.Residual = Parallel
		}
		c.Blocks = append(c.Blocks, b)
	}
	return c, nil
}

// gptj is GPT-J, or CodeGen (its qkv_proj fused in four blocks of [q, v, k]): rotary_dim
// features of each head rotated in pairs with the fixed theta 10000, a parallel residual
// of one LayerNorm, an lm_head with a bias.
func gptj(codegen bool) family {
	return func(g *getter) (*Config, error) {
		c, d, err := gptBase(g, "transformer.", "wte", "ln_f")
		if err != nil {
			return nil, err
		}
		rd := g.int("rotary_dim", 0)
		if rd == 0 {
			if d.heads != 1 {
				return nil, fmt.Errorf("rotary_dim null (rotating the whole embedding) is not supported with %d heads", d.heads)
			}
			rd = d.headDim
		}
		r, err := fixedRope(10000, rd, d.headDim)
		if err != nil {
			return nil, err
		}
		eps := g.float("layer_norm_epsilon", 1e-5)
		c.Head.B = "lm_head.bias"
		for i := range c.Blocks {
			p := fmt.Sprintf("transformer.h.%d.", i)
			a := &Attention{Heads: d.heads, KVHeads: d.heads, HeadDim: d.headDim, Scale: 1 / math.Sqrt(float64(d.headDim)),
				Rope: &RopeSpec{Rope: r, Style: Pairs}, O: lin(p+"attn.out_proj", false)}
			if codegen {
				a.QKV = QKV{Fused: lin(p+"attn.qkv_proj", false), Layout: CodeGen}
			} else {
				a.QKV = QKV{Q: lin(p+"attn.q_proj", false), K: lin(p+"attn.k_proj", false), V: lin(p+"attn.v_proj", false)}
			}
			c.Blocks[i] = &Block{Residual: Parallel, AttnNorm: lnorm(p+"ln_1", eps, true), Attn: a,
				MLP: plainMLP(p+"mlp.fc_in", p+"mlp.fc_out", g.int("n_inner", 4*d.hidden), Act(g.str("activation_function", "gelu_new")), true, false)}
		}
		return c, nil
	}
}

// fixedRope is a default rotary embedding of dim features of a head of headDim with a
// theta the modeling code fixes (GPT-J's create_sinusoidal_positions).
func fixedRope(theta float64, dim, headDim int) (*Rope, error) {
	if dim <= 0 || dim%2 != 0 || dim > headDim {
		return nil, fmt.Errorf("rotary dimension %d (of head_dim %d) must be even, positive and at most head_dim", dim, headDim)
	}
	return &Rope{Type: "default", Theta: theta, params: map[string]any{}, rotaryDim: dim}, nil
}

// alibiSlopes are Bloom's build_alibi_tensor slopes (Falcon's rounded to bfloat16): the
// geometric sequence 2^(−8/n)… for the largest power of two n ≤ heads, then every other
// one of the sequence for 2n for the remaining heads, in float32.
func alibiSlopes(heads int, bf16 bool) []float32 {
	cp2 := 1 << int(math.Floor(math.Log2(float64(heads))))
	base := float32(math.Pow(2, -math.Pow(2, -(math.Log2(float64(cp2))-3))))
	s := make([]float32, 0, heads)
	for p := 1; p <= cp2; p++ {
		s = append(s, float32(math.Pow(float64(base), float64(p))))
	}
	if cp2 != heads {
		extra := float32(math.Pow(2, -math.Pow(2, -(math.Log2(float64(2*cp2))-3))))
		for p := 1; len(s) < heads; p += 2 {
			s = append(s, float32(math.Pow(float64(extra), float64(p))))
		}
	}
	if bf16 {
		for i, v := range s {
			s[i] = roundBF16(v)
		}
	}
	return s
}

// mptSlopes are MPT's build_mpt_alibi_tensor slopes: 1/2^(k·max/n) for k = 1…n, n the
// power of two at or above heads, interleaved odd-then-even and cut to heads when heads is
// not a power of two.
func mptSlopes(heads int, biasMax float64) []float32 {
	n := 1 << int(math.Ceil(math.Log2(float64(heads))))
	all := make([]float32, n)
	for k := range n {
		b := float32(k+1) * float32(biasMax/float64(n))
		all[k] = 1 / float32(math.Pow(2, float64(b)))
	}
	if n == heads {
		return all
	}
	var s []float32
	for k := 1; k < n; k += 2 {
		s = append(s, all[k])
	}
	for k := 0; k < n; k += 2 {
		s = append(s, all[k])
	}
	return s[:heads]
}

// fairseqBlock is the pre-norm block of fairseq's decoders (BioGPT, XGLM): self_attn with
// biases (queries scaled by head_dim^-0.5), self_attn_layer_norm and final_layer_norm
// (torch's default eps), fc1 → act → fc2.
func fairseqBlock(p string, d dims, inter int, act Act) *Block {
	a := &Attention{Heads: d.heads, KVHeads: d.heads, HeadDim: d.headDim, Scale: 1 / math.Sqrt(float64(d.headDim)),
		QKV: QKV{Q: lin(p+"self_attn.q_proj", true), K: lin(p+"self_attn.k_proj", true), V: lin(p+"self_attn.v_proj", true)},
		O:   lin(p+"self_attn.out_proj", true)}
	return &Block{AttnNorm: lnorm(p+"self_attn_layer_norm", 1e-5, true), MLPNorm: lnorm(p+"final_layer_norm", 1e-5, true), Attn: a,
		MLP: plainMLP(p+"fc1", p+"fc2", inter, act, true, false)}
}

// neoLayers expands GPT-Neo's attention_types (a list of [pattern, repeats]; by default
// [[["global", "local"], 12]]) into one type per layer, as GPTNeoConfig does (its
// attention_layers are always recomputed from them).
func neoLayers(g *getter, n int) ([]string, error) {
	bad := fmt.Errorf("attention_types must be a list of [[types…], repeats]")
	raw := g.value("attention_types")
	if raw == nil {
		raw = []any{[]any{[]any{"global", "local"}, 12.0}}
	}
	v, ok := raw.([]any)
	if !ok {
		return nil, bad
	}
	var out []string
	for _, e := range v {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			return nil, bad
		}
		types, ok := pair[0].([]any)
		r, ok2 := pair[1].(float64)
		if !ok || !ok2 || r < 0 || r > maxLayers {
			return nil, bad
		}
		for range int(r) {
			for _, t := range types {
				s, ok := t.(string)
				if !ok || s != "global" && s != "local" {
					return nil, fmt.Errorf("attention type %v is not global or local", t)
				}
				out = append(out, s)
				if len(out) > maxLayers {
					return nil, bad
				}
			}
		}
	}
	if len(out) != n {
		return nil, fmt.Errorf("attention_types give %d layers for num_layers %d", len(out), n)
	}
	return out, nil
}
