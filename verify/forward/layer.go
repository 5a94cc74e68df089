package forward

import (
	"fmt"
)

// layer holds one decoder layer's weights.
type layer struct {
	inNorm, postNorm norm
	preFF, postFF    norm // Gemma's and OLMo 2's norms around the MLP
	q, k, v, o       *matrix
	qb, kb, vb, ob   []float32
	qNorm, kNorm     []float32
	qHeadLN, kHeadLN [][]float32 // StableLM's per-head LayerNorm weights
	sinks            []float32
	sliding          bool

	// dense MLP (no gate: StarCoder2's c_fc, act, c_proj)
	gate, up, down    *matrix
	gateB, upB, downB []float32

	// mixture of experts
	router  *matrix
	routerB []float32
	experts []*expert
	// Qwen2-MoE's shared expert, weighted by sigmoid(sharedGate · x); DeepSeek-V3's shared
	// experts (no gate) and the router's score-correction bias.
	shared     *expert
	sharedGate *matrix
	scoreBias  []float32

	mla *mlaWeights
}

// mlaWeights are DeepSeek's latent attention projections (the output projection is o).
type mlaWeights struct {
	qa, qb, q, kva, kvb *matrix
	qaB, kvaB           []float32
	qaNorm, kvaNorm     []float32
}

// expert is one MoE expert: Qwen3's gate/up/down, or gpt-oss's interleaved gate_up with
// biases.
type expert struct {
	gate, up, down *matrix
	gateUp         *matrix
	gateUpB, downB []float32
}

func (m *Model) load(ws *weights) error {
	c := m.cfg
	var err error
	round := ws.round
	if m.embed, err = ws.mat("model.embed_tokens.weight", c.Vocab, c.Hidden, false); err != nil {
		return err
	}
	if c.TieEmbeddings {
		m.lmHead, err = ws.mat("model.embed_tokens.weight", c.Vocab, c.Hidden, round)
	} else {
		m.lmHead, err = ws.mat("lm_head.weight", c.Vocab, c.Hidden, round)
	}
	if err != nil {
		return err
	}
	if m.norm, err = c.loadNorm(ws, "model.norm", c.Hidden); err != nil {
		return err
	}
	for i := range c.Layers {
		l, err := m.loadLayer(ws, i)
		if err != nil {
			return err
		}
		m.layers = append(m.layers, l)
	}
	return nil
}

func (m *Model) loadLayer(ws *weights, i int) (*layer, error) {
	c := m.cfg
	p := fmt.Sprintf("model.layers.%d.", i)
	l := &layer{sliding: c.Sliding[i]}
	round := ws.round
	var err error
	must := func(e error) {
		if err == nil {
			err = e
		}
	}
	vec := func(name string, n int) []float32 {
		v, e := ws.vec(p+name, n)
		must(e)
		return v
	}
	H, D := c.Hidden, c.HeadDim
	qkNorm := func(name string, n int) []float32 { return c.normWeight(vec(name, n)) }
	blockNorm := func(name string) norm {
		v, e := c.loadNorm(ws, p+name, H)
		must(e)
		return v
	}
	mat := func(name string, rows, cols int) *matrix {
		v, e := ws.mat(p+name, rows, cols, round)
		must(e)
		return v
	}
	qd, kvd := c.Heads*D, c.KVHeads*D
	if !c.PostNorms {
		l.inNorm = blockNorm("input_layernorm")
	}
	if !c.ParallelResidual {
		l.postNorm = blockNorm("post_attention_layernorm")
	}
	if c.Sandwich {
		l.preFF = blockNorm("pre_feedforward_layernorm")
	}
	if c.Sandwich || c.PostNorms {
		l.postFF = blockNorm("post_feedforward_layernorm")
	}
	if c.MLA != nil {
		a := c.MLA
		qk := a.NopeDim + a.RopeDim
		w := &mlaWeights{}
		if a.QLoraRank > 0 {
			w.qa = mat("self_attn.q_a_proj.weight", a.QLoraRank, H)
			w.qaNorm = vec("self_attn.q_a_layernorm.weight", a.QLoraRank)
			w.qb = mat("self_attn.q_b_proj.weight", c.Heads*qk, a.QLoraRank)
			if c.AttnBias {
				w.qaB = vec("self_attn.q_a_proj.bias", a.QLoraRank)
			}
		} else {
			w.q = mat("self_attn.q_proj.weight", c.Heads*qk, H)
		}
		w.kva = mat("self_attn.kv_a_proj_with_mqa.weight", a.KVLoraRank+a.RopeDim, H)
		w.kvaNorm = vec("self_attn.kv_a_layernorm.weight", a.KVLoraRank)
		w.kvb = mat("self_attn.kv_b_proj.weight", c.Heads*(a.NopeDim+a.VDim), a.KVLoraRank)
		if c.AttnBias {
			w.kvaB = vec("self_attn.kv_a_proj_with_mqa.bias", a.KVLoraRank+a.RopeDim)
		}
		l.mla = w
		qd = c.Heads * a.VDim // o_proj's input
	} else if c.Fused {
		// Phi-3's qkv_proj holds q, k and v one after the other along the output rows; the
		// row slices keep a per-device checkpoint's pieces (sliceParts).
		qkv := mat("self_attn.qkv_proj.weight", qd+2*kvd, H)
		if qkv != nil {
			l.q, l.k, l.v = qkv.slice(0, qd), qkv.slice(qd, qd+kvd), qkv.slice(qd+kvd, qd+2*kvd)
		}
	} else {
		l.q = mat("self_attn.q_proj.weight", qd, H)
		l.k = mat("self_attn.k_proj.weight", kvd, H)
		l.v = mat("self_attn.v_proj.weight", kvd, H)
	}
	l.o = mat("self_attn.o_proj.weight", H, qd)
	if c.AttnBias && c.MLA == nil { // MLA's biases are on q_a_proj and kv_a_proj_with_mqa
		l.qb = vec("self_attn.q_proj.bias", qd)
		l.kb = vec("self_attn.k_proj.bias", kvd)
		l.vb = vec("self_attn.v_proj.bias", kvd)
	}
	if c.OBias {
		l.ob = vec("self_attn.o_proj.bias", H)
	}
	if c.QKNorm {
		qn, kn := D, D
		if c.QKNormFull {
			qn, kn = qd, kvd
		}
		l.qNorm = qkNorm("self_attn.q_norm.weight", qn)
		l.kNorm = qkNorm("self_attn.k_norm.weight", kn)
	}
	if c.HeadLayerNorm {
		for h := range c.Heads {
			l.qHeadLN = append(l.qHeadLN, vec(fmt.Sprintf("self_attn.q_layernorm.norms.%d.weight", h), D))
		}
		for h := range c.KVHeads {
			l.kHeadLN = append(l.kHeadLN, vec(fmt.Sprintf("self_attn.k_layernorm.norms.%d.weight", h), D))
		}
	}
	if c.Sinks {
		l.sinks = vec("self_attn.sinks", c.Heads)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case c.MoELayer != nil && c.MoELayer[i] && (c.fam.moe == moeQwen3 || c.fam.moe == moeQwen2):
		err = l.loadSoftmaxMoE(ws, p, c, qwen3MoENames)
		if err == nil && c.SharedIntermediate > 0 {
			SI := c.SharedIntermediate
			l.shared = &expert{gate: mat("mlp.shared_expert.gate_proj.weight", SI, H),
				up: mat("mlp.shared_expert.up_proj.weight", SI, H), down: mat("mlp.shared_expert.down_proj.weight", H, SI)}
			l.sharedGate = mat("mlp.shared_expert_gate.weight", 1, H)
		}
	case c.MoELayer != nil && c.MoELayer[i] && c.fam.moe == moeDeepSeek:
		err = l.loadSoftmaxMoE(ws, p, c, qwen3MoENames)
		if err == nil {
			l.scoreBias, err = ws.vec(p+"mlp.gate.e_score_correction_bias", c.Experts)
		}
		if err == nil {
			SI := c.SharedIntermediate
			l.shared = &expert{gate: mat("mlp.shared_experts.gate_proj.weight", SI, H),
				up: mat("mlp.shared_experts.up_proj.weight", SI, H), down: mat("mlp.shared_experts.down_proj.weight", H, SI)}
		}
	case c.MoELayer != nil && c.MoELayer[i] && c.fam.moe == moeMixtral:
		names := mixtralMoENames
		if !ws.has(p + names.block + names.router) {
			names.block = "mlp." // transformers 5's own names (mlp.gate, mlp.experts.gate_up_proj)
		}
		err = l.loadSoftmaxMoE(ws, p, c, names)
	case c.MoELayer != nil && c.MoELayer[i] && c.fam.moe == moeGptOss:
		err = l.loadGptOssMoE(ws, p, c)
	case c.PlainMLP:
		I := c.Intermediate
		l.up = mat("mlp.c_fc.weight", I, H)
		l.down = mat("mlp.c_proj.weight", H, I)
		if c.MLPBias {
			l.upB = vec("mlp.c_fc.bias", I)
			l.downB = vec("mlp.c_proj.bias", H)
		}
	case c.Fused:
		I := c.Intermediate
		// Phi-3's gate_up_proj: gate rows first, then up (chunk(2) of the output).
		gu := mat("mlp.gate_up_proj.weight", 2*I, H)
		if gu != nil {
			l.gate, l.up = gu.slice(0, I), gu.slice(I, 2*I)
		}
		l.down = mat("mlp.down_proj.weight", H, I)
	default:
		I := c.Intermediate
		l.gate = mat("mlp.gate_proj.weight", I, H)
		l.up = mat("mlp.up_proj.weight", I, H)
		l.down = mat("mlp.down_proj.weight", H, I)
		if c.MLPBias {
			l.gateB = vec("mlp.gate_proj.bias", I)
			l.upB = vec("mlp.up_proj.bias", I)
			l.downB = vec("mlp.down_proj.bias", H)
		}
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

// moeNames are where a softmax-routed MoE block keeps its router and per-expert weights,
// relative to the layer: block+router, and block+"experts.N."+gate/up/down.
type moeNames struct {
	block, router, gate, up, down string
}

var (
	qwen3MoENames   = moeNames{block: "mlp.", router: "gate.weight", gate: "gate_proj", up: "up_proj", down: "down_proj"}
	mixtralMoENames = moeNames{block: "block_sparse_moe.", router: "gate.weight", gate: "w1", up: "w3", down: "w2"}
)

// loadSoftmaxMoE reads the router and the experts of a Qwen3-MoE or Mixtral block, stored
// per expert (mlp.experts.E.gate_proj.weight, block_sparse_moe.experts.E.w1.weight, as the
// released checkpoints are) or stacked (mlp.experts.gate_up_proj [E, 2I, H] and down_proj
// [E, H, I], as transformers 5 holds them).
func (l *layer) loadSoftmaxMoE(ws *weights, p string, c *Config, n moeNames) error {
	H, I, E := c.Hidden, c.MoEIntermediate, c.Experts
	var err error
	b := p + n.block
	if l.router, err = ws.mat(b+n.router, E, H, ws.round); err != nil {
		return err
	}
	stacked := ws.has(b+"experts.gate_up_proj") || ws.mxfp4[ws.prefix+b+"experts.gate_up_proj"] != nil
	for e := range E {
		x := &expert{}
		if stacked {
			gu, err := ws.expert(b+"experts.gate_up_proj", e, E, 2*I, H, false)
			if err != nil {
				return err
			}
			x.gate, x.up = gu.slice(0, I), gu.slice(I, 2*I)
			if x.down, err = ws.expert(b+"experts.down_proj", e, E, H, I, false); err != nil {
				return err
			}
		} else {
			q := fmt.Sprintf("%sexperts.%d.", b, e)
			if x.gate, err = ws.mat(q+n.gate+".weight", I, H, ws.round); err != nil {
				return err
			}
			if x.up, err = ws.mat(q+n.up+".weight", I, H, ws.round); err != nil {
				return err
			}
			if x.down, err = ws.mat(q+n.down+".weight", H, I, ws.round); err != nil {
				return err
			}
		}
		l.experts = append(l.experts, x)
	}
	return nil
}

// loadGptOssMoE reads the biased router and the experts: gate_up_proj [E, H, 2I] with gate
// and up interleaved along the output, down_proj [E, I, H] (x·W layouts), bfloat16 or MXFP4.
func (l *layer) loadGptOssMoE(ws *weights, p string, c *Config) error {
	H, I, E := c.Hidden, c.MoEIntermediate, c.Experts
	var err error
	if l.router, err = ws.mat(p+"mlp.router.weight", E, H, ws.round); err != nil {
		return err
	}
	if l.routerB, err = ws.vec(p+"mlp.router.bias", E); err != nil {
		return err
	}
	for e := range E {
		x := &expert{}
		if x.gateUp, err = ws.expert(p+"mlp.experts.gate_up_proj", e, E, 2*I, H, true); err != nil {
			return err
		}
		if x.down, err = ws.expert(p+"mlp.experts.down_proj", e, E, H, I, true); err != nil {
			return err
		}
		if x.gateUpB, err = ws.row(p+"mlp.experts.gate_up_proj_bias", e, E, 2*I); err != nil {
			return err
		}
		if x.downB, err = ws.row(p+"mlp.experts.down_proj_bias", e, E, H); err != nil {
			return err
		}
		l.experts = append(l.experts, x)
	}
	return nil
}

// norm is a block's normalization: RMSNorm's weight (as normWeight gives it), or
// LayerNorm's weight and bias (StarCoder2).
type norm struct {
	w, b []float32
}

// loadNorm reads the norm stored as name.weight (and name.bias for LayerNorm).
func (c *Config) loadNorm(ws *weights, name string, n int) (norm, error) {
	w, err := ws.vec(name+".weight", n)
	if err != nil {
		return norm{}, err
	}
	nm := norm{w: c.normWeight(w)}
	if c.LayerNorm {
		if nm.b, err = ws.vec(name+".bias", n); err != nil {
			return norm{}, err
		}
	}
	return nm, nil
}

// normWeight returns the factor an RMSNorm multiplies by: its weight, or 1 + weight for
// Gemma (computed in float32, as Gemma's RMSNorm does).
func (c *Config) normWeight(w []float32) []float32 {
	if c.NormPlusOne {
		for i := range w {
			w[i] = 1 + w[i]
		}
	}
	return w
}

// slice returns rows [r0, r1) of m as a matrix of its own.
func (m *matrix) slice(r0, r1 int) *matrix {
	s := *m
	s.name = fmt.Sprintf("%s[%d:%d]", m.name, r0, r1)
	s.rows = r1 - r0
	switch {
	case m.bf16 != nil:
		s.bf16 = m.bf16[r0*m.cols : r1*m.cols]
	case m.f32 != nil:
		s.f32 = m.f32[r0*m.cols : r1*m.cols]
	default:
		fill := m.fill
		s.fill = func(dst []byte, a, b int) error { return fill(dst, r0+a, r0+b) }
	}
	if m.parts != nil {
		s.parts = sliceParts(m.parts, r0, r1)
	}
	return &s
}
