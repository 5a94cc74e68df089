package forward

import (
	"fmt"
	"math"
	"strings"
)

// The loader finds every weight a Config names, checks its shape against the dimensions
// the Config gives and keeps it as a matrix over the checkpoint's bytes (vectors, small,
// are read). Nothing here knows a family.

// linearW is a loaded Linear.
type linearW struct {
	w *matrix
	b []float32
}

// normW is a loaded Norm: its weight as applied (1 + w for PlusOne; nil for none) and bias.
type normW struct {
	spec *Norm
	w, b []float32
}

// headNormW is a loaded HeadNorm; w and b hold every head's weights one after the other
// when PerHead.
type headNormW struct {
	spec *HeadNorm
	w, b []float32
}

// headTW is a loaded HeadTransform.
type headTW struct {
	dense *linearW
	act   func(float32) float32
	norm  *normW
}

type blockW struct {
	spec                               *Block
	attnNorm, mlpNorm, attnOut, mlpOut *normW
	attn                               *attnW
	mlp                                *mlpW
	ssm                                *ssmW
}

type attnW struct {
	spec                  *Attention
	q, k, v, fused, o     *linearW
	gate                  *linearW
	subNorm               *normW
	qNorm, kNorm          *headNormW
	sinks                 []float32
	qa, qb, kva, kvb      *linearW // MLA (q in q when QLoraRank is 0)
	moa                   *moaW
	qaNorm, kvaNorm       *normW
	diffLambda            float32 // DiffAttn's λ
	qkvWidth, qd, kd, vdW int     // fused output width; q, k and v widths
}

// moaW is a loaded MoA: the router, each expert's query and output projections, the fused
// key/value projection and the output bias.
type moaW struct {
	router  *linearW
	in, out []*matrix
	kv      *linearW
	bias    []float32
}

type mlpW struct {
	spec           *MLP
	gate, up, down *linearW
	gateUp         *linearW // interleaved gate/up (kept whole)
	subNorm        *normW
	act            func(float32) float32
	moe            *moeW
}

type moeW struct {
	spec       *MoE
	router     *linearW
	scoreBias  []float32
	bias       []float32
	experts    []*expert
	shared     *mlpW
	sharedGate *linearW
}

// expert is one expert's weights: gate, up, down, or an interleaved gateUp with biases.
type expert struct {
	gate, up, down *matrix
	gateUp         *matrix
	gateUpB, downB []float32
}

func (m *Model) load(ws *weights) error {
	c := m.cfg
	var err error
	ed := c.EmbedDim
	if ed == 0 {
		ed = c.Hidden
	}
	if m.embed, err = ws.mat(c.Embed, c.Vocab, ed, false, false); err != nil {
		return err
	}
	if c.ProjIn.ok() {
		if m.projIn, err = ws.linear(c.ProjIn, c.Hidden, ed); err != nil {
			return err
		}
	}
	if c.ProjOut.ok() {
		if m.projOut, err = ws.linear(c.ProjOut, ed, c.Hidden); err != nil {
			return err
		}
	}
	if p := c.Positions; p != nil && p.Weight != "" {
		t, name, err := ws.tensor(p.Weight)
		if err != nil {
			return err
		}
		if len(t.Shape) != 2 || t.Shape[0] <= int64(p.Offset) || t.Shape[0] > maxVocab {
			return shapeErr(name, t.Shape, c.MaxPositions+p.Offset, c.Hidden)
		}
		if m.pos, err = ws.mat(p.Weight, int(t.Shape[0]), c.Hidden, false, false); err != nil {
			return err
		}
	}
	if m.embedNorm, err = ws.norm(c.EmbedNorm, c.Hidden); err != nil {
		return err
	}
	if m.final, err = ws.norm(c.FinalNorm, c.Hidden); err != nil {
		return err
	}
	if ht := c.HeadTransform; ht != nil {
		m.headT = &headTW{}
		if m.headT.dense, err = ws.linear(ht.Dense, c.Hidden, c.Hidden); err != nil {
			return err
		}
		if m.headT.act, err = ws.activation(ht.Act, nil); err != nil {
			return err
		}
		if m.headT.norm, err = ws.norm(ht.Norm, c.Hidden); err != nil {
			return err
		}
	}
	head := c.Head
	if !head.ok() {
		head.W, head.T = c.Embed, false // tied to the embedding
	}
	if m.head, err = ws.linear(head, c.Vocab, ed); err != nil {
		return err
	}
	for i, b := range c.Blocks {
		bw, err := ws.block(c, b)
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		m.blocks = append(m.blocks, bw)
	}
	return nil
}

// linear loads a projection to out features from in.
func (ws *weights) linear(l Linear, out, in int) (*linearW, error) {
	w, err := ws.mat(l.W, out, in, l.T, ws.round)
	if err != nil {
		return nil, err
	}
	lw := &linearW{w: w}
	if l.B != "" {
		if lw.b, err = ws.vec(l.B, out); err != nil {
			return nil, err
		}
	}
	return lw, nil
}

// norm loads a norm over n features (nil for none).
func (ws *weights) norm(n *Norm, dim int) (*normW, error) {
	if n == nil {
		return nil, nil
	}
	w := &normW{spec: n}
	var err error
	if n.Weight != "" {
		if w.w, err = ws.vec(n.Weight, dim); err != nil {
			return nil, err
		}
		if n.PlusOne {
			for i := range w.w {
				w.w[i]++
			}
		}
	}
	if n.Bias != "" {
		if w.b, err = ws.vec(n.Bias, dim); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// headNorm loads a query or key norm for heads heads of dim features.
func (ws *weights) headNorm(n *HeadNorm, heads, dim int) (*headNormW, error) {
	if n == nil {
		return nil, nil
	}
	w := &headNormW{spec: n}
	load := func(name string) ([]float32, error) {
		switch {
		case name == "":
			return nil, nil
		case n.Whole:
			return ws.vec(name, heads*dim)
		case n.PerHead && strings.Contains(name, "%d"):
			var all []float32
			for h := range heads {
				v, err := ws.vec(fmt.Sprintf(name, h), dim)
				if err != nil {
					return nil, err
				}
				all = append(all, v...)
			}
			return all, nil
		case n.PerHead:
			return ws.vec(name, heads*dim)
		}
		return ws.vec(name, dim)
	}
	var err error
	if w.w, err = load(n.Weight); err != nil {
		return nil, err
	}
	if n.PlusOne {
		for i := range w.w {
			w.w[i]++
		}
	}
	if w.b, err = load(n.Bias); err != nil {
		return nil, err
	}
	return w, nil
}

func (ws *weights) block(c *Config, b *Block) (*blockW, error) {
	bw := &blockW{spec: b}
	var err error
	for _, n := range []struct {
		dst  **normW
		spec *Norm
	}{{&bw.attnNorm, b.AttnNorm}, {&bw.mlpNorm, b.MLPNorm}, {&bw.attnOut, b.AttnOut}, {&bw.mlpOut, b.MLPOut}} {
		if *n.dst, err = ws.norm(n.spec, c.Hidden); err != nil {
			return nil, err
		}
	}
	if b.SSM != nil {
		if bw.ssm, err = ws.ssm(c.Hidden, b.SSM); err != nil {
			return nil, err
		}
	} else if bw.attn, err = ws.attention(c, b.Attn); err != nil {
		return nil, err
	}
	if b.MLP != nil {
		if bw.mlp, err = ws.mlp(c.Hidden, b.MLP); err != nil {
			return nil, err
		}
	}
	return bw, nil
}

func (ws *weights) attention(c *Config, a *Attention) (*attnW, error) {
	H := c.Hidden
	w := &attnW{spec: a}
	var err error
	vd := a.VDim
	if vd == 0 {
		vd = a.HeadDim
	}
	w.qd, w.kd, w.vdW = a.Heads*a.HeadDim, a.KVHeads*a.HeadDim, a.KVHeads*vd
	must := func(dst **linearW, l Linear, out, in int) {
		if err == nil && l.ok() {
			*dst, err = ws.linear(l, out, in)
		}
	}
	if m := a.MLA; m != nil {
		qk := m.NopeDim + m.RopeDim
		if m.QLoraRank > 0 {
			must(&w.qa, m.QA, m.QLoraRank, H)
			must(&w.qb, m.QB, a.Heads*qk, m.QLoraRank)
			if err == nil {
				w.qaNorm, err = ws.norm(m.QANorm, m.QLoraRank)
			}
		} else {
			must(&w.q, m.Q, a.Heads*qk, H)
		}
		must(&w.kva, m.KVA, m.KVLoraRank+m.RopeDim, H)
		must(&w.kvb, m.KVB, a.Heads*(m.NopeDim+m.VDim), m.KVLoraRank)
		if err == nil {
			w.kvaNorm, err = ws.norm(m.KVANorm, m.KVLoraRank)
		}
		must(&w.o, a.O, H, a.Heads*m.VDim)
		if err != nil {
			return nil, err
		}
		return w, nil
	}
	if m := a.MoA; m != nil {
		kvd := a.KVHeads * a.HeadDim
		mw := &moaW{}
		must(&mw.router, m.Router, m.Experts, H)
		must(&mw.kv, m.KV, 2*kvd, H)
		for e := range m.Experts {
			if err != nil {
				break
			}
			var in, out *matrix
			if in, err = ws.expert(m.In, e, m.Experts, kvd, H, false); err == nil {
				out, err = ws.expert(m.Out, e, m.Experts, H, kvd, false)
			}
			mw.in, mw.out = append(mw.in, in), append(mw.out, out)
		}
		if err == nil && m.Bias != "" {
			mw.bias, err = ws.vec(m.Bias, H)
		}
		if err != nil {
			return nil, err
		}
		w.moa = mw
		return w, nil
	}
	if a.QKV.Fused.ok() {
		w.qkvWidth = w.qd + w.kd + w.vdW
		must(&w.fused, a.QKV.Fused, w.qkvWidth, H)
	} else {
		must(&w.q, a.QKV.Q, w.qd, H)
		must(&w.k, a.QKV.K, w.kd, H)
		must(&w.v, a.QKV.V, w.vdW, H)
	}
	must(&w.o, a.O, H, a.Heads*vd)
	gw := a.Heads * vd
	if a.GateHeads {
		gw = a.Heads
	}
	must(&w.gate, a.Gate, gw, H)
	if err != nil {
		return nil, err
	}
	if a.SubNorm != nil {
		if w.subNorm, err = ws.norm(a.SubNorm, a.Heads*vd); err != nil {
			return nil, err
		}
	}
	qn, kn := a.Heads, a.KVHeads
	if w.qNorm, err = ws.headNorm(a.QNorm, qn, a.HeadDim); err != nil {
		return nil, err
	}
	if w.kNorm, err = ws.headNorm(a.KNorm, kn, a.HeadDim); err != nil {
		return nil, err
	}
	if a.Sinks != "" {
		if w.sinks, err = ws.vec(a.Sinks, a.Heads); err != nil {
			return nil, err
		}
	}
	if d := a.Diff; d != nil {
		var l [4][]float32
		for i, n := range []string{d.LambdaQ1, d.LambdaK1, d.LambdaQ2, d.LambdaK2} {
			if l[i], err = ws.vec(n, a.HeadDim); err != nil {
				return nil, err
			}
		}
		// torch.exp(torch.sum(q·k, dtype=float32)), then λ1 − λ2 + lambda_init in float32.
		dot := func(x, y []float32) float32 {
			var s float32
			for i := range x {
				s += x[i] * y[i]
			}
			return float32(math.Exp(float64(s)))
		}
		w.diffLambda = dot(l[0], l[1]) - dot(l[2], l[3]) + float32(d.Init)
	}
	return w, nil
}

func (ws *weights) mlp(H int, m *MLP) (*mlpW, error) {
	w := &mlpW{spec: m}
	if m.MoE != nil {
		var err error
		w.moe, err = ws.moe(H, m.MoE)
		return w, err
	}
	var err error
	I := m.Inter
	switch {
	case m.GateUp.ok() && m.Layout == Interleaved:
		if w.gateUp, err = ws.linear(m.GateUp, 2*I, H); err != nil {
			return nil, err
		}
	case m.GateUp.ok():
		gu, err := ws.linear(m.GateUp, 2*I, H)
		if err != nil {
			return nil, err
		}
		a, b := &linearW{w: gu.w.slice(0, I)}, &linearW{w: gu.w.slice(I, 2*I)}
		if gu.b != nil {
			a.b, b.b = gu.b[:I], gu.b[I:]
		}
		g, u := a, b
		if m.Layout == UpFirst {
			g, u = b, a
		}
		w.gate, w.up = g, u
	default:
		if m.Gate.ok() {
			if w.gate, err = ws.linear(m.Gate, I, H); err != nil {
				return nil, err
			}
		}
		if w.up, err = ws.linear(m.Up, I, H); err != nil {
			return nil, err
		}
	}
	if w.down, err = ws.linear(m.Down, H, I); err != nil {
		return nil, err
	}
	if w.act, err = ws.activation(m.Act, m.ActParams); err != nil {
		return nil, err
	}
	if m.SubNorm != nil {
		if w.subNorm, err = ws.norm(m.SubNorm, I); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// activation is the elementwise activation act, its parameters read for a parametric one.
func (ws *weights) activation(act Act, params map[string]string) (func(float32) float32, error) {
	switch act {
	case "xielu":
		var v [4]float32
		for i, k := range []string{"alpha_p", "alpha_n", "beta", "eps"} {
			x, err := ws.vec(params[k], 1)
			if err != nil {
				return nil, err
			}
			v[i] = x[0]
		}
		return xielu(v[0], v[1], v[2], v[3]), nil
	case "gpt_oss_swiglu":
		return nil, nil
	}
	f, ok := activations[act]
	if !ok || f == nil {
		return nil, fmt.Errorf("hidden activation %q is not supported", act)
	}
	return f, nil
}

func (ws *weights) moe(H int, e *MoE) (*moeW, error) {
	w := &moeW{spec: e}
	var err error
	E, I := e.Experts, e.Inter
	if w.router, err = ws.linear(e.Router, E, H); err != nil {
		return nil, err
	}
	if e.ScoreBias != "" {
		if w.scoreBias, err = ws.vec(e.ScoreBias, E); err != nil {
			return nil, err
		}
	}
	if e.Bias != "" {
		if w.bias, err = ws.vec(e.Bias, H); err != nil {
			return nil, err
		}
	}
	x := e.Weights
	stacked := x.GateUp != "" && ws.has(x.GateUp)
	for i := range E {
		ex := &expert{}
		switch {
		case stacked:
			gu, err := ws.expert(x.GateUp, i, E, 2*I, H, x.Transposed)
			if err != nil {
				return nil, err
			}
			switch x.Layout {
			case Interleaved:
				ex.gateUp = gu
			case UpFirst:
				ex.up, ex.gate = gu.slice(0, I), gu.slice(I, 2*I)
			default:
				ex.gate, ex.up = gu.slice(0, I), gu.slice(I, 2*I)
			}
			if ex.down, err = ws.expert(x.Down, i, E, H, I, x.Transposed); err != nil {
				return nil, err
			}
			if x.GateUpBias != "" {
				if ex.gateUpB, err = ws.row(x.GateUpBias, i, E, 2*I); err != nil {
					return nil, err
				}
			}
			if x.DownBias != "" {
				if ex.downB, err = ws.row(x.DownBias, i, E, H); err != nil {
					return nil, err
				}
			}
		case x.PerGateUp != "":
			gu, err := ws.mat(fmt.Sprintf(x.PerGateUp, i), 2*I, H, false, ws.round)
			if err != nil {
				return nil, err
			}
			ex.gate, ex.up = gu.slice(0, I), gu.slice(I, 2*I)
			if x.Layout == UpFirst {
				ex.gate, ex.up = ex.up, ex.gate
			}
			if ex.down, err = ws.mat(fmt.Sprintf(x.PerDown, i), H, I, false, ws.round); err != nil {
				return nil, err
			}
		case x.PerUp != "":
			if x.PerGate != "" {
				if ex.gate, err = ws.mat(fmt.Sprintf(x.PerGate, i), I, H, false, ws.round); err != nil {
					return nil, err
				}
			}
			if ex.up, err = ws.mat(fmt.Sprintf(x.PerUp, i), I, H, false, ws.round); err != nil {
				return nil, err
			}
			if ex.down, err = ws.mat(fmt.Sprintf(x.PerDown, i), H, I, false, ws.round); err != nil {
				return nil, err
			}
		default:
			_, _, err := ws.tensor(x.GateUp)
			return nil, err
		}
		w.experts = append(w.experts, ex)
	}
	if e.Shared != nil {
		if w.shared, err = ws.mlp(H, e.Shared); err != nil {
			return nil, fmt.Errorf("shared experts: %w", err)
		}
	}
	if e.SharedGate.ok() {
		if w.sharedGate, err = ws.linear(e.SharedGate, 1, H); err != nil {
			return nil, err
		}
	}
	return w, nil
}
