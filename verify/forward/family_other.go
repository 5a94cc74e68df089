package forward

import (
	"fmt"
	"math"
)

// otherFamilies are decoders outside the Llama and GPT lineages built from the same parts.
var otherFamilies = map[string]family{
	"modernbert-decoder": func(g *getter) (*Config, error) {
		d := g.dims()
		if err := d.valid(); err != nil {
			return nil, err
		}
		if d.heads <= 0 || d.hidden%d.heads != 0 {
			return nil, fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d", d.hidden, d.heads)
		}
		hd := d.hidden / d.heads
		eps, nb := g.float("norm_eps", 1e-5), g.bool("norm_bias", false)
		ln := func(n string) *Norm { return lnorm(n, eps, nb) }
		o := ropeOpts{headDim: hd}
		ropes, err := g.layerRopes(o, map[string]float64{"full_attention": g.float("global_rope_theta", 160000),
			"sliding_attention": g.float("local_rope_theta", 10000)})
		if err != nil {
			return nil, err
		}
		every := g.int("global_attn_every_n_layers", 3)
		sl, err := g.layerTypes(d.layers, func(i int) bool { return every > 0 && i%every != 0 })
		if err != nil {
			return nil, err
		}
		// The window is local_attention // 2.
		w := g.int("local_attention", 128) / 2
		ab, mb := g.bool("attention_bias", false), g.bool("mlp_bias", false)
		c := &Config{Hidden: d.hidden, Vocab: d.vocab, Layers: d.layers, MaxPositions: d.maxPos, Base: "model.",
			Embed: "model.embeddings.tok_embeddings.weight", EmbedNorm: ln("model.embeddings.norm"), FinalNorm: ln("model.final_norm"),
			// The prediction head (dense, classifier_activation, norm) before the decoder.
			HeadTransform: &HeadTransform{Dense: lin("lm_head.dense", g.bool("classifier_bias", false)),
				Act: Act(g.str("classifier_activation", "gelu")), Norm: ln("lm_head.norm")},
			Head: lin("decoder", g.bool("decoder_bias", true))}
		if g.bool("tie_word_embeddings", true) {
			c.Head.W = ""
		}
		for i := range d.layers {
			p := fmt.Sprintf("model.layers.%d.", i)
			typ := "full_attention"
			if sl[i] {
				typ = "sliding_attention"
			}
			a := &Attention{Heads: d.heads, KVHeads: d.heads, HeadDim: hd, Scale: 1 / math.Sqrt(float64(hd)),
				QKV: QKV{Q: lin(p+"attn.q_proj", ab), K: lin(p+"attn.k_proj", ab), V: lin(p+"attn.v_proj", ab)},
				O:   lin(p+"attn.Wo", ab), Rope: &RopeSpec{Rope: ropes[typ]}}
			if sl[i] {
				if w <= 0 {
					return nil, fmt.Errorf("layer %d is a sliding layer without local_attention", i)
				}
				a.Window = w
			}
			// Wi holds the activated half, then the multiplier.
			b := &Block{MLPNorm: ln(p + "mlp_norm"), Attn: a, MLP: &MLP{GateUp: lin(p+"mlp.Wi", mb), Layout: GateFirst,
				Down: lin(p+"mlp.Wo", mb), Inter: d.inter, Act: Act(g.str("hidden_activation", "gelu"))}}
			if i > 0 { // the first layer's attention norm is the identity
				b.AttnNorm = ln(p + "attn_norm")
			}
			c.Blocks = append(c.Blocks, b)
		}
		return c, nil
	},
}
