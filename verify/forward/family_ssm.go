package forward

import (
	"fmt"
	"math"
)

// ssmFamilies are the state-space decoders: each layer a norm and a selective state-space
// mixer (SSM) on the residual stream, no attention or feed-forward block.
var ssmFamilies = map[string]family{
	"mamba":        mamba(false),
	"falcon_mamba": mamba(true),
}

// mamba is Mamba (Falcon-Mamba: B, C and the time-step rank RMS-normalized by
// mixer_rms_eps): backbone.embeddings, layers.N.norm and .mixer, norm_f, lm_head.
func mamba(falcon bool) family {
	return func(g *getter) (*Config, error) {
		H, L, V := g.int("hidden_size", 0), g.int("num_hidden_layers", 0), g.int("vocab_size", 0)
		for _, f := range []struct {
			name   string
			v, max int
		}{{"hidden_size", H, maxHidden}, {"num_hidden_layers", L, maxLayers}, {"vocab_size", V, maxVocab}} {
			if err := bounded(f.name, f.v, f.max); err != nil {
				return nil, err
			}
		}
		// intermediate_size = int(expand·hidden) and time_step_rank "auto" = ⌈hidden/16⌉,
		// as the config class derives them.
		inner := g.int("intermediate_size", int(g.float("expand", 2)*float64(H)))
		rank := int(math.Ceil(float64(H) / 16))
		if v := g.value("time_step_rank"); v != nil && v != "auto" {
			rank = g.int("time_step_rank", rank)
		}
		eps := g.float("layer_norm_epsilon", 1e-5)
		bias, convBias := g.bool("use_bias", false), g.bool("use_conv_bias", true)
		c := &Config{Hidden: H, Vocab: V, Layers: L, Base: "backbone.",
			Embed:     either("backbone.embeddings.weight", "backbone.embedding.weight"),
			FinalNorm: rms("backbone.norm_f", eps)}
		if !g.bool("tie_word_embeddings", true) {
			c.Head = Linear{W: "lm_head.weight"}
		}
		for i := range L {
			p := fmt.Sprintf("backbone.layers.%d.mixer.", i)
			s := &SSM{Inner: inner, State: g.int("state_size", 16), Conv: g.int("conv_kernel", 4), DtRank: rank,
				In: lin(p+"in_proj", bias), XProj: lin(p+"x_proj", false), DtProj: lin(p+"dt_proj", true),
				Out: lin(p+"out_proj", bias), ConvW: p + "conv1d.weight", ALog: p + "A_log", D: p + "D",
				Act: Act(g.str("hidden_act", "silu"))}
			if convBias {
				s.ConvB = p + "conv1d.bias"
			}
			if falcon {
				s.BCDtNorm = g.float("mixer_rms_eps", 1e-6)
			}
			c.Blocks = append(c.Blocks, &Block{AttnNorm: rms(fmt.Sprintf("backbone.layers.%d.norm", i), eps), SSM: s})
		}
		return c, nil
	}
}
