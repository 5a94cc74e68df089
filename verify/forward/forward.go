package forward

import (
	"context"
	"fmt"
	"math"
)

// tokenRows bounds the activation rows one matrix product takes at a time: the MLP's and
// the projections' intermediates are computed a block of positions at a time, so their
// memory does not grow with the sequence beyond one block.
func tokenRows(width int) int {
	return min(1024, max(16, (32<<20)/(4*max(width, 1))))
}

// Forward runs the model on one sequence of token ids at positions 0…T−1 with a causal mask
// (the layers' sliding windows and chunks applied) and returns the logits of every
// position, float32 [T, vocab] row-major; ctx is checked between layers, as in Run. Weights
// are read from the checkpoint layer by layer; the pages a layer faulted in are released
// after it, so resident memory stays near one layer's weights plus the activations. It
// refuses, before allocating, a sequence whose activations and logits would not fit in
// Options.MemoryLimit; Run with Logits computes them a block of positions at a time instead.
func (m *Model) Forward(ctx context.Context, tokens []int) ([]float32, error) {
	if err := m.fits(len(tokens), true); err != nil {
		return nil, err
	}
	st, err := m.Run(ctx, tokens)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(tokens)*m.cfg.Vocab)
	if err := st.Logits(out, 0, len(tokens)); err != nil {
		return nil, err
	}
	return out, nil
}

// States are the final hidden states of a run (after the final norm), from which Logits
// computes the logits of any positions.
type States struct {
	m *Model
	T int
	x []float32 // [T, EmbedDim]
}

// Len is the number of positions.
func (s *States) Len() int { return s.T }

// Logits writes the logits of positions [t0, t1) into dst ([t1−t0, vocab] row-major).
func (s *States) Logits(dst []float32, t0, t1 int) error {
	m, c := s.m, s.m.cfg
	if t0 < 0 || t1 > s.T || t0 > t1 || len(dst) < (t1-t0)*c.Vocab {
		return fmt.Errorf("forward: logits of positions [%d, %d) of %d into %d values", t0, t1, s.T, len(dst))
	}
	tpu := m.opts.Precision == TPU
	ed := m.embed.cols
	step := tokenRows(c.Vocab)
	for a := t0; a < t1; a += step {
		b := min(a+step, t1)
		out := dst[(a-t0)*c.Vocab : (b-t0)*c.Vocab]
		if err := linear(out, s.x[a*ed:b*ed], b-a, m.head.w, m.head.b, tpu); err != nil {
			return err
		}
		for i, v := range out {
			if c.LogitScale != 0 {
				v *= c.LogitScale
			}
			if c.LogitDiv != 0 {
				v /= c.LogitDiv
			}
			if c.FinalSoftcap != 0 {
				v = softcap(v, float32(c.FinalSoftcap))
			}
			out[i] = v
		}
	}
	m.ck.ReleaseMemory()
	return nil
}

// Run runs the decoder on tokens and returns the final hidden states; ctx is checked
// between layers.
func (m *Model) Run(ctx context.Context, tokens []int) (*States, error) {
	c := m.cfg
	T := len(tokens)
	if T == 0 {
		return nil, errNoTokens
	}
	for i, t := range tokens {
		if t < 0 || t >= c.Vocab {
			return nil, fmt.Errorf("forward: token %d at position %d is outside the vocabulary [0, %d)", t, i, c.Vocab)
		}
	}
	if m.pos != nil {
		if max := m.pos.rows - c.Positions.Offset; T > max {
			return nil, fmt.Errorf("forward: %d tokens, but the model's learned positions (%s) cover %d", T, c.Positions.Weight, max)
		}
	}
	if c.MaxTokens > 0 && T > c.MaxTokens {
		return nil, fmt.Errorf("forward: %d tokens, but the model's position table covers %d", T, c.MaxTokens)
	}
	if err := m.fits(T, false); err != nil {
		return nil, err
	}
	tpu := m.opts.Precision == TPU
	H := c.Hidden
	ed := m.embed.cols
	h := make([]float32, T*H)
	emb := h
	if m.projIn != nil {
		emb = make([]float32, T*ed)
	}
	for i, t := range tokens {
		row, err := m.embed.rowF32(t)
		if err != nil {
			return nil, err
		}
		if c.EmbedScale != 0 {
			for j := range row {
				row[j] *= c.EmbedScale
			}
		}
		copy(emb[i*ed:], row)
	}
	if m.projIn != nil {
		if err := m.rows(h, emb, T, m.projIn, tpu); err != nil {
			return nil, err
		}
	}
	if p := c.Positions; p != nil {
		for i := range T {
			var row []float32
			if m.pos != nil {
				var err error
				if row, err = m.pos.rowF32(p.Offset + i); err != nil {
					return nil, err
				}
			} else if p.PadRow != nil && *p.PadRow == p.Offset+i {
				row = make([]float32, H)
			} else {
				row = sinusoid(p.Sinusoid, p.Offset+i, H)
			}
			add(h[i*H:(i+1)*H], row)
		}
	}
	if m.embedNorm != nil {
		m.embedNorm.apply(h, h, H)
	}
	ropes := map[*Rope]*ropeTable{}
	for _, b := range c.Blocks {
		if b.Attn == nil {
			continue
		}
		if r := b.Attn.Rope; r != nil && ropes[r.Rope] == nil {
			t, err := newRopeTable(r.Rope, T)
			if err != nil {
				return nil, err
			}
			ropes[r.Rope] = t
		}
	}
	x := make([]float32, T*H)
	out := make([]float32, T*H)
	var x2, out2 []float32
	for i, b := range m.blocks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var rt *ropeTable
		if a := b.spec.Attn; a != nil && a.Rope != nil {
			rt = ropes[a.Rope.Rope]
		}
		attn := func(dst, in []float32) error { return m.attention(dst, in, T, b.attn, rt, tpu) }
		if b.ssm != nil {
			attn = func(dst, in []float32) error { return m.ssm(dst, in, T, b.ssm, tpu) }
		}
		mlp := func(dst, in []float32) error { return m.mlp(dst, in, T, b.mlp, tpu) }
		if b.mlp == nil {
			mlp = nil
		}
		var err error
		switch b.spec.Residual {
		case Sequential:
			err = m.sequential(h, x, out, T, b, attn, mlp)
		case Parallel:
			if x2 == nil {
				x2, out2 = make([]float32, T*H), make([]float32, T*H)
			}
			err = m.parallel(h, x, x2, out, out2, b, attn, mlp)
		case PostNorm:
			err = m.postNorm(h, out, b, attn, mlp)
		}
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		m.ck.ReleaseMemory()
	}
	if m.final != nil {
		m.final.apply(h, h, H)
	}
	if ht := m.headT; ht != nil {
		y := make([]float32, T*H)
		if err := m.rows(y, h, T, ht.dense, tpu); err != nil {
			return nil, err
		}
		for i, v := range y {
			y[i] = ht.act(v)
		}
		if ht.norm != nil {
			ht.norm.apply(y, y, H)
		}
		h = y
	}
	if m.projOut != nil {
		y := make([]float32, T*ed)
		if err := m.rows(y, h, T, m.projOut, tpu); err != nil {
			return nil, err
		}
		h = y
	}
	return &States{m: m, T: T, x: h}, nil
}

// sequential runs a block whose sublayers follow one another: each sublayer's input
// normalized (when it has a pre-norm), its output normalized (post-norm), scaled and added
// to the residual — which is the normalized input itself for NormedResidual.
func (m *Model) sequential(h, x, out []float32, T int, b *blockW, attn, mlp func(dst, in []float32) error) error {
	H := m.cfg.Hidden
	for _, s := range []struct {
		run       func(dst, in []float32) error
		pre, post *normW
	}{{attn, b.attnNorm, b.attnOut}, {mlp, b.mlpNorm, b.mlpOut}} {
		if s.run == nil { // a block without a feed-forward sublayer
			continue
		}
		in := h
		if s.pre != nil {
			s.pre.apply(x, h, H)
			in = x
		}
		if err := s.run(out, in); err != nil {
			return err
		}
		if s.post != nil {
			s.post.apply(out, out, H)
		}
		if b.spec.NormedResidual {
			copy(h, in)
		}
		addScaled(h, out, b.spec.ResidualScale)
	}
	return nil
}

// parallel runs a block whose attention and MLP both read the block's input: h + attn(n1(h))
// + mlp(n2(h)), n2 being n1 when the block has one norm.
func (m *Model) parallel(h, x, x2, out, out2 []float32, b *blockW, attn, mlp func(dst, in []float32) error) error {
	H := m.cfg.Hidden
	xa, xm := h, h
	if b.attnNorm != nil {
		b.attnNorm.apply(x, h, H)
		xa, xm = x, x
	}
	if b.mlpNorm != nil {
		b.mlpNorm.apply(x2, h, H)
		xm = x2
	}
	if err := attn(out, xa); err != nil {
		return err
	}
	if err := mlp(out2, xm); err != nil {
		return err
	}
	if b.attnOut != nil {
		b.attnOut.apply(out, out, H)
	}
	if b.mlpOut != nil {
		b.mlpOut.apply(out2, out2, H)
	}
	addScaled(h, out, b.spec.ResidualScale)
	addScaled(h, out2, b.spec.ResidualScale)
	return nil
}

// postNorm runs a block that normalizes after each residual sum: h = n1(h + attn(h)),
// h = n2(h + mlp(h)).
func (m *Model) postNorm(h, out []float32, b *blockW, attn, mlp func(dst, in []float32) error) error {
	for _, s := range []struct {
		run  func(dst, in []float32) error
		norm *normW
	}{{attn, b.attnNorm}, {mlp, b.mlpNorm}} {
		if err := s.run(out, h); err != nil {
			return err
		}
		addScaled(h, out, b.spec.ResidualScale)
		if s.norm != nil {
			s.norm.apply(h, h, m.cfg.Hidden)
		}
	}
	return nil
}

// rows applies a projection to T rows, a block of rows at a time.
func (m *Model) rows(dst, x []float32, T int, l *linearW, tpu bool) error {
	n, k := l.w.rows, l.w.cols
	step := tokenRows(max(n, k))
	for a := 0; a < T; a += step {
		b := min(a+step, T)
		if err := linear(dst[a*n:b*n], x[a*k:b*k], b-a, l.w, l.b, tpu); err != nil {
			return err
		}
	}
	return nil
}

func add(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}

// addScaled adds src·scale to dst (Granite's residual_multiplier), or src when scale is 0.
// The product is rounded to float32 before the sum, as torch computes it (no fused
// multiply-add).
func addScaled(dst, src []float32, scale float32) {
	if scale == 0 {
		add(dst, src)
		return
	}
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += float32(v * scale)
	}
}

// apply normalizes each row of n features of x into dst.
func (n *normW) apply(dst, x []float32, width int) {
	normRows(dst, x, n.w, n.b, n.spec.Kind, n.spec.Eps, width)
}

// normRows normalizes each row of n features: RMSNorm, LayerNorm or L2 norm, times w (nil:
// none) plus b (nil: none).
func normRows(dst, x, w, b []float32, kind NormKind, eps float64, n int) {
	switch kind {
	case LayerNorm:
		layerNorm(dst, x, w, b, eps, n)
	default:
		rmsNorm(dst, x, w, eps, n)
		if b != nil {
			for r := 0; r+n <= len(dst); r += n {
				add(dst[r:r+n], b)
			}
		}
	}
}

// layerNorm writes (x − mean) / sqrt(var + eps) · weight + bias for each row of x (biased
// variance), as torch's LayerNorm for float32; a nil weight or bias is none.
func layerNorm(dst, x, weight, bias []float32, eps float64, n int) {
	for r := 0; r+n <= len(x); r += n {
		row := x[r : r+n]
		var sum float64
		for _, v := range row {
			sum += float64(v)
		}
		mean := sum / float64(n)
		var ss float64
		for _, v := range row {
			d := float64(v) - mean
			ss += d * d
		}
		rstd := float32(1 / math.Sqrt(ss/float64(n)+eps))
		m := float32(mean)
		d := dst[r : r+n]
		for i, v := range row {
			y := (v - m) * rstd
			if weight != nil {
				y *= weight[i]
			}
			if bias != nil {
				y += bias[i]
			}
			d[i] = y
		}
	}
}

// rmsNorm writes weight · x / sqrt(mean(x²) + eps) for each row of x, in float32 as
// transformers' RMSNorm computes it for a float32 model; a nil weight is none.
func rmsNorm(dst, x, weight []float32, eps float64, n int) {
	for r := 0; r+n <= len(x); r += n {
		row := x[r : r+n]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(float64(float32(ss/float64(n))+float32(eps))))
		d := dst[r : r+n]
		for i, v := range row {
			y := v * inv
			if weight != nil {
				y = weight[i] * y
			}
			d[i] = y
		}
	}
}

// softcap is cap·tanh(x/cap), as Gemma caps attention scores and logits.
func softcap(x, cp float32) float32 {
	return float32(math.Tanh(float64(x/cp))) * cp
}

// sinusoid is row p of a fixed sinusoidal position table of d features, in float32 as
// torch computes it.
func sinusoid(kind Sinusoid, p, d int) []float32 {
	row := make([]float32, d)
	switch kind {
	case Tensor2Tensor:
		half := d / 2
		step := math.Log(10000) / float64(half-1)
		for i := range half {
			f := float32(math.Exp(float64(float32(i) * -float32(step))))
			a := float32(p) * f
			row[i] = float32(math.Sin(float64(a)))
			row[half+i] = float32(math.Cos(float64(a)))
		}
	case Transformer:
		n := (d + 1) / 2
		for i := 0; i < d; i++ {
			rate := 1 / float32(math.Pow(10000, float64(float32(2*(i/2))/float32(d))))
			a := float32(p) * rate
			if i%2 == 0 {
				row[i/2] = float32(math.Sin(float64(a)))
			} else {
				row[n+i/2] = float32(math.Cos(float64(a)))
			}
		}
	}
	return row
}
