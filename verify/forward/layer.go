package forward

import (
	"fmt"
)

// layer holds one decoder layer's weights.
type layer struct {
	inNorm, postNorm []float32
	preFF, postFF    []float32 // Gemma's norms around the MLP
	q, k, v, o       *matrix
	qb, kb, vb, ob   []float32
	qNorm, kNorm     []float32
	sinks            []float32
	sliding          bool

	// dense MLP
	gate, up, down    *matrix
	gateB, upB, downB []float32

	// mixture of experts
	router  *matrix
	routerB []float32
	experts []*expert
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
	if m.norm, err = ws.vec("model.norm.weight", c.Hidden); err != nil {
		return err
	}
	m.norm = c.normWeight(m.norm)
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
	norm := func(name string, n int) []float32 { return c.normWeight(vec(name, n)) }
	mat := func(name string, rows, cols int) *matrix {
		v, e := ws.mat(p+name, rows, cols, round)
		must(e)
		return v
	}
	H, D := c.Hidden, c.HeadDim
	qd, kvd := c.Heads*D, c.KVHeads*D
	l.inNorm = norm("input_layernorm.weight", H)
	l.postNorm = norm("post_attention_layernorm.weight", H)
	if c.Sandwich {
		l.preFF = norm("pre_feedforward_layernorm.weight", H)
		l.postFF = norm("post_feedforward_layernorm.weight", H)
	}
	l.q = mat("self_attn.q_proj.weight", qd, H)
	l.k = mat("self_attn.k_proj.weight", kvd, H)
	l.v = mat("self_attn.v_proj.weight", kvd, H)
	l.o = mat("self_attn.o_proj.weight", H, qd)
	if c.AttnBias {
		l.qb = vec("self_attn.q_proj.bias", qd)
		l.kb = vec("self_attn.k_proj.bias", kvd)
		l.vb = vec("self_attn.v_proj.bias", kvd)
	}
	if c.OBias {
		l.ob = vec("self_attn.o_proj.bias", H)
	}
	if c.QKNorm {
		l.qNorm = norm("self_attn.q_norm.weight", D)
		l.kNorm = norm("self_attn.k_norm.weight", D)
	}
	if c.Sinks {
		l.sinks = vec("self_attn.sinks", c.Heads)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case c.MoELayer != nil && c.MoELayer[i] && c.fam.moe == moeQwen3:
		err = l.loadQwen3MoE(ws, p, c)
	case c.MoELayer != nil && c.MoELayer[i] && c.fam.moe == moeGptOss:
		err = l.loadGptOssMoE(ws, p, c)
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

// loadQwen3MoE reads the router and the experts, stored per expert
// (mlp.experts.E.gate_proj.weight, as the released checkpoints are) or stacked
// (mlp.experts.gate_up_proj [E, 2I, H] and down_proj [E, H, I], as transformers 5 holds them).
func (l *layer) loadQwen3MoE(ws *weights, p string, c *Config) error {
	H, I, E := c.Hidden, c.MoEIntermediate, c.Experts
	var err error
	if l.router, err = ws.mat(p+"mlp.gate.weight", E, H, ws.round); err != nil {
		return err
	}
	stacked := ws.has(p+"mlp.experts.gate_up_proj") || ws.mxfp4[ws.prefix+p+"mlp.experts.gate_up_proj"] != nil
	for e := range E {
		x := &expert{}
		if stacked {
			gu, err := ws.expert(p+"mlp.experts.gate_up_proj", e, E, 2*I, H, false)
			if err != nil {
				return err
			}
			x.gate, x.up = gu.slice(0, I), gu.slice(I, 2*I)
			if x.down, err = ws.expert(p+"mlp.experts.down_proj", e, E, H, I, false); err != nil {
				return err
			}
		} else {
			q := fmt.Sprintf("%smlp.experts.%d.", p, e)
			if x.gate, err = ws.mat(q+"gate_proj.weight", I, H, ws.round); err != nil {
				return err
			}
			if x.up, err = ws.mat(q+"up_proj.weight", I, H, ws.round); err != nil {
				return err
			}
			if x.down, err = ws.mat(q+"down_proj.weight", H, I, ws.round); err != nil {
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
