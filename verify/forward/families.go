package forward

import (
	"fmt"
	"math"
	"slices"
)

// family builds the Config of one model_type from its config.json, as the family's
// transformers config class and modeling code define it.
type family func(g *getter) (*Config, error)

// families maps model_type to its family. Each is a few dozen lines: the variants its
// layers are made of (arch.go) and the names of its weights.
var families = map[string]family{}

func init() {
	for _, m := range []map[string]family{llamaFamilies, gptFamilies, moeFamilies, moreMoEFamilies, otherFamilies, ssmFamilies} {
		for k, f := range m {
			families[k] = f
		}
	}
}

// dims are the sizes most configurations name the same way.
type dims struct {
	hidden, layers, heads, kvHeads, headDim, vocab, inter, maxPos int
}

// dims reads the common sizes; head_dim defaults to hidden/heads when the class derives it.
func (g *getter) dims() dims {
	d := dims{
		hidden: g.int("hidden_size", 0),
		layers: g.int("num_hidden_layers", 0),
		heads:  g.int("num_attention_heads", 0),
		vocab:  g.int("vocab_size", 0),
		inter:  g.int("intermediate_size", 0),
		maxPos: g.int("max_position_embeddings", 0),
	}
	d.kvHeads = g.int("num_key_value_heads", d.heads)
	if d.heads > 0 {
		d.headDim = g.int("head_dim", d.hidden/d.heads)
	}
	return d
}

// valid checks the sizes before they shape any list.
func (d dims) valid() error {
	for _, f := range []struct {
		name   string
		v, max int
	}{{"hidden_size", d.hidden, maxHidden}, {"num_hidden_layers", d.layers, maxLayers}, {"num_attention_heads", d.heads, maxHeads},
		{"num_key_value_heads", d.kvHeads, maxHeads}, {"vocab_size", d.vocab, maxVocab}, {"head_dim", d.headDim, maxHeadDim}} {
		if err := bounded(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	return nil
}

func rms(name string, eps float64) *Norm {
	return &Norm{Kind: RMSNorm, Weight: name + ".weight", Eps: eps}
}

// lnorm is a LayerNorm with a weight and, when bias, a bias.
func lnorm(name string, eps float64, bias bool) *Norm {
	n := &Norm{Kind: LayerNorm, Weight: name + ".weight", Eps: eps}
	if bias {
		n.Bias = name + ".bias"
	}
	return n
}

// lin is the nn.Linear name.weight, with name.bias when bias.
func lin(name string, bias bool) Linear {
	l := Linear{W: name + ".weight"}
	if bias {
		l.B = name + ".bias"
	}
	return l
}

// conv1d is GPT-2's Conv1D: weight [in, out] and a bias.
func conv1d(name string) Linear {
	return Linear{W: name + ".weight", B: name + ".bias", T: true}
}

// either names a tensor stored under one of several names (the first present is used):
// a checkpoint as save_pretrained writes it, or a model's own state dict.
func either(names ...string) string {
	s := names[0]
	for _, n := range names[1:] {
		s += "|" + n
	}
	return s
}

// std is the Llama-shaped decoder most families share: under base ("model."),
// embed_tokens, layers.N with input_layernorm and post_attention_layernorm RMSNorms,
// self_attn.{q,k,v,o}_proj, a gated mlp.{gate,up,down}_proj, then norm and lm_head. A
// family changes the fields it differs by, builds the config and patches its blocks.
type std struct {
	g    *getter
	d    dims
	base string
	eps  float64
	// norm makes a block norm from its module name.
	norm func(name string) *Norm
	// qkvBias and oBias put biases on q/k/v and on o; mlpBias on the MLP.
	qkvBias, oBias, mlpBias bool
	act                     Act
	rope                    *RopeSpec
	scale                   float64
	// gated false: an ungated MLP of up_proj and down_proj.
	gated bool
	tie   bool
}

// newStd reads a Llama-shaped configuration: rms_norm_eps, attention_bias, mlp_bias,
// hidden_act, tie_word_embeddings and one rotary embedding as o says (its head_dim set
// here).
func newStd(g *getter, o ropeOpts) (*std, error) {
	d := g.dims()
	if err := d.valid(); err != nil {
		return nil, err
	}
	s := &std{g: g, d: d, base: "model.", eps: g.float("rms_norm_eps", 1e-6), gated: true,
		act: Act(g.str("hidden_act", "silu")), tie: g.bool("tie_word_embeddings", false)}
	s.norm = func(n string) *Norm { return rms(n, s.eps) }
	s.qkvBias = g.bool("attention_bias", false)
	s.oBias = s.qkvBias
	s.mlpBias = g.bool("mlp_bias", false)
	s.scale = 1 / math.Sqrt(float64(d.headDim))
	o.headDim = d.headDim
	r, err := g.rope(o)
	if err != nil {
		return nil, err
	}
	s.rope = &RopeSpec{Rope: r}
	return s, nil
}

// layer is layer i's module prefix.
func (s *std) layer(i int) string { return fmt.Sprintf("%slayers.%d.", s.base, i) }

// attention is the standard self_attn of layer prefix p.
func (s *std) attention(p string) *Attention {
	d := s.d
	a := &Attention{Heads: d.heads, KVHeads: d.kvHeads, HeadDim: d.headDim, Scale: s.scale, Rope: s.rope}
	a.QKV.Q = lin(p+"self_attn.q_proj", s.qkvBias)
	a.QKV.K = lin(p+"self_attn.k_proj", s.qkvBias)
	a.QKV.V = lin(p+"self_attn.v_proj", s.qkvBias)
	a.O = lin(p+"self_attn.o_proj", s.oBias)
	return a
}

// mlp is the standard dense MLP of layer prefix p with hidden width inter.
func (s *std) mlp(p string, inter int) *MLP {
	m := &MLP{Inter: inter, Act: s.act, Up: lin(p+"up_proj", s.mlpBias), Down: lin(p+"down_proj", s.mlpBias)}
	if s.gated {
		m.Gate = lin(p+"gate_proj", s.mlpBias)
	}
	return m
}

// block is layer i as Llama builds it.
func (s *std) block(i int) *Block {
	p := s.layer(i)
	return &Block{AttnNorm: s.norm(p + "input_layernorm"), MLPNorm: s.norm(p + "post_attention_layernorm"),
		Attn: s.attention(p), MLP: s.mlp(p+"mlp.", s.d.inter)}
}

// config is the whole decoder.
func (s *std) config() *Config {
	d := s.d
	c := &Config{Hidden: d.hidden, Vocab: d.vocab, Layers: d.layers, MaxPositions: d.maxPos, Base: s.base,
		Embed: s.base + "embed_tokens.weight", FinalNorm: s.norm(s.base + "norm")}
	for i := range d.layers {
		c.Blocks = append(c.Blocks, s.block(i))
	}
	if !s.tie {
		c.Head = Linear{W: "lm_head.weight"}
	}
	return c
}

// qkNorm gives every layer per-head RMSNorms of q and k (self_attn.q_norm, k_norm).
func (s *std) qkNorm(c *Config, eps float64) {
	for i, b := range c.Blocks {
		p := s.layer(i)
		b.Attn.QNorm = &HeadNorm{Norm: *rms(p+"self_attn.q_norm", eps)}
		b.Attn.KNorm = &HeadNorm{Norm: *rms(p+"self_attn.k_norm", eps)}
	}
}

// layerTypes is layer_types (full_attention or sliding_attention per layer), or def(i)
// when config.json has none.
func (g *getter) layerTypes(n int, def func(i int) bool) ([]bool, error) {
	sliding := make([]bool, n)
	if lt := g.strs("layer_types"); lt != nil {
		if len(lt) != n {
			return nil, fmt.Errorf("layer_types has %d entries for %d layers", len(lt), n)
		}
		for i, t := range lt {
			switch t {
			case "sliding_attention", "chunked_attention":
				sliding[i] = true
			case "full_attention":
			default:
				return nil, fmt.Errorf("layer_types[%d] = %q is not supported (full_attention, sliding_attention)", i, t)
			}
		}
		return sliding, nil
	}
	for i := range sliding {
		sliding[i] = def(i)
	}
	return sliding, nil
}

// window sets the sliding window on the layers whose flag is set (a window of 0 or less
// leaves every layer full).
func window(c *Config, sliding []bool, w int) {
	if w <= 0 {
		return
	}
	for i, b := range c.Blocks {
		if sliding[i] {
			b.Attn.Window = w
		}
	}
}

// allSliding windows every layer when sliding_window is set (Mistral, Mixtral, Phi-3,
// StarCoder2: the mask applies it to all layers whatever layer_types says).
func (s *std) allSliding(c *Config) {
	window(c, allTrue(c.Layers), s.g.int("sliding_window", 0))
}

func allTrue(n int) []bool {
	b := make([]bool, n)
	for i := range b {
		b[i] = true
	}
	return b
}

// qwenWindow is Qwen2's and Qwen3's windowing: sliding_window counts only with
// use_sliding_window, on layers from max_window_layers on unless layer_types says.
func (s *std) qwenWindow(c *Config) error {
	g := s.g
	w := 0
	if g.bool("use_sliding_window", false) {
		w = g.int("sliding_window", 0)
	}
	mwl := g.int("max_window_layers", 28)
	sl, err := g.layerTypes(c.Layers, func(i int) bool { return w > 0 && i >= mwl })
	if err != nil {
		return err
	}
	window(c, sl, w)
	return nil
}

// moeLayers says which layers are mixtures of experts: every decoder_sparse_step-th layer
// not listed in mlp_only_layers (Qwen-MoE's rule).
func (g *getter) sparseStep(n int) []bool {
	step := g.int("decoder_sparse_step", 1)
	only := g.ints("mlp_only_layers")
	out := make([]bool, n)
	for i := range out {
		out[i] = !slices.Contains(only, i) && step > 0 && (i+1)%step == 0
	}
	return out
}

// experts are the names of a Qwen/DeepSeek-style mixture's experts under prefix p
// ("model.layers.N.mlp."): per expert experts.E.{gate,up,down}_proj as checkpoints store
// them, or stacked experts.gate_up_proj and down_proj as transformers 5 holds them.
func stdExperts(p string) ExpertWeights {
	return ExpertWeights{GateUp: p + "experts.gate_up_proj", Down: p + "experts.down_proj",
		PerGate: p + "experts.%d.gate_proj.weight", PerUp: p + "experts.%d.up_proj.weight", PerDown: p + "experts.%d.down_proj.weight"}
}

// sharedMLP is a gated SiLU MLP at prefix p (a mixture's shared experts).
func sharedMLP(p string, inter int, act Act) *MLP {
	return &MLP{Inter: inter, Act: act, Gate: lin(p+"gate_proj", false), Up: lin(p+"up_proj", false), Down: lin(p+"down_proj", false)}
}

// mlpTypes is mlp_layer_types ("dense" or "sparse" per layer) as flags of the layers that
// are mixtures of experts, or def(i) when config.json has none.
func (g *getter) mlpTypes(n int, def func(i int) bool) ([]bool, error) {
	sparse := make([]bool, n)
	if lt := g.strs("mlp_layer_types"); lt != nil {
		if len(lt) != n {
			return nil, fmt.Errorf("mlp_layer_types has %d entries for %d layers", len(lt), n)
		}
		for i, t := range lt {
			switch t {
			case "sparse":
				sparse[i] = true
			case "dense":
			default:
				return nil, fmt.Errorf("mlp_layer_types[%d] = %q is not supported (dense, sparse)", i, t)
			}
		}
		return sparse, nil
	}
	for i := range sparse {
		sparse[i] = def(i)
	}
	return sparse, nil
}
