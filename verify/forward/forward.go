package forward

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/ckpt-dev/ckpt/verify/forward/kernel"
)

// Forward runs the model on one sequence of token ids at positions 0…T−1 with a causal mask
// (the layers' sliding windows applied) and returns the logits of every position, float32
// [T, vocab] row-major. Weights are read from the checkpoint layer by layer; the pages a
// layer faulted in are released after it, so resident memory stays near one layer's
// weights plus the activations.
func (m *Model) Forward(tokens []int) ([]float32, error) {
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
	tpu := m.opts.Precision == TPU
	H := c.Hidden
	h := make([]float32, T*H)
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
		copy(h[i*H:], row)
	}
	rope, err := newRopeTable(&c.Rope, T)
	if err != nil {
		return nil, err
	}
	ropeLocal := rope
	if c.RopeLocal != nil {
		if ropeLocal, err = newRopeTable(c.RopeLocal, T); err != nil {
			return nil, err
		}
	}
	x := make([]float32, T*H)
	out := make([]float32, T*H)
	for i, l := range m.layers {
		rmsNorm(x, h, l.inNorm, c.RMSNormEps)
		r := rope
		if l.sliding {
			r = ropeLocal
		}
		if err := m.attention(out, x, T, l, r, tpu); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if c.Sandwich {
			rmsNorm(out, out, l.postNorm, c.RMSNormEps)
			add(h, out)
			rmsNorm(x, h, l.preFF, c.RMSNormEps)
		} else {
			add(h, out)
			rmsNorm(x, h, l.postNorm, c.RMSNormEps)
		}
		if err := m.mlp(out, x, T, l, tpu); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if c.Sandwich {
			rmsNorm(out, out, l.postFF, c.RMSNormEps)
		}
		add(h, out)
		m.ck.ReleaseMemory()
	}
	rmsNorm(x, h, m.norm, c.RMSNormEps)
	logits := make([]float32, T*c.Vocab)
	if err := linear(logits, x, T, m.lmHead, nil, tpu); err != nil {
		return nil, err
	}
	if cp := float32(c.FinalSoftcap); cp != 0 {
		for i, v := range logits {
			logits[i] = softcap(v, cp)
		}
	}
	m.ck.ReleaseMemory()
	return logits, nil
}

func add(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}

// rmsNorm writes weight · x / sqrt(mean(x²) + eps) for each row of x, in float32 as
// transformers' RMSNorm computes it for a float32 model.
func rmsNorm(dst, x, weight []float32, eps float64) {
	n := len(weight)
	for r := 0; r+n <= len(x); r += n {
		row := x[r : r+n]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(float64(float32(ss/float64(n))+float32(eps))))
		d := dst[r : r+n]
		for i, v := range row {
			d[i] = weight[i] * (v * inv)
		}
	}
}

// ropeTable holds cos and sin of every position and rotated pair, scaled by the rope's
// attention factor.
type ropeTable struct {
	half     int
	cos, sin []float32 // [T, half]
}

func newRopeTable(r *Rope, T int) (*ropeTable, error) {
	rr := *r
	inv, err := rr.InvFreq(T)
	if err != nil {
		return nil, err
	}
	half := len(inv)
	t := &ropeTable{half: half, cos: make([]float32, T*half), sin: make([]float32, T*half)}
	af := float32(rr.AttentionFactor)
	for p := range T {
		for j, f := range inv {
			a := f * float32(p)
			t.cos[p*half+j] = float32(math.Cos(float64(a))) * af
			t.sin[p*half+j] = float32(math.Sin(float64(a))) * af
		}
	}
	return t, nil
}

// apply rotates one head vector at position p: x·cos + rotate_half(x)·sin.
func (t *ropeTable) apply(x []float32, p int) {
	h := t.half
	cs, sn := t.cos[p*h:(p+1)*h], t.sin[p*h:(p+1)*h]
	a, b := x[:h], x[h:2*h]
	for j := range h {
		x1, x2 := a[j], b[j]
		a[j] = x1*cs[j] - x2*sn[j]
		b[j] = x2*cs[j] + x1*sn[j]
	}
}

// attention computes the self-attention block's output (after o_proj) into dst [T, H].
func (m *Model) attention(dst, x []float32, T int, l *layer, rope *ropeTable, tpu bool) error {
	c := m.cfg
	D, nh, nkv := c.HeadDim, c.Heads, c.KVHeads
	q := make([]float32, T*nh*D)
	k := make([]float32, T*nkv*D)
	v := make([]float32, T*nkv*D)
	for _, p := range []struct {
		dst  []float32
		w    *matrix
		bias []float32
	}{{q, l.q, l.qb}, {k, l.k, l.kb}, {v, l.v, l.vb}} {
		if err := linear(p.dst, x, T, p.w, p.bias, tpu); err != nil {
			return err
		}
	}
	for t := range T {
		for hd := range nh {
			row := q[(t*nh+hd)*D : (t*nh+hd+1)*D]
			if l.qNorm != nil {
				rmsNorm(row, row, l.qNorm, c.RMSNormEps)
			}
			rope.apply(row, t)
		}
		for hd := range nkv {
			row := k[(t*nkv+hd)*D : (t*nkv+hd+1)*D]
			if l.kNorm != nil {
				rmsNorm(row, row, l.kNorm, c.RMSNormEps)
			}
			rope.apply(row, t)
		}
	}
	if tpu {
		q, k, v = roundedBF16(q), roundedBF16(k), roundedBF16(v)
	}
	ctx := make([]float32, T*nh*D)
	scaling := float32(c.AttnScale)
	window := 0
	if l.sliding {
		window = c.Window
	}
	group := nh / nkv
	var wg sync.WaitGroup
	heads := make(chan int, nh)
	for hd := range nh {
		heads <- hd
	}
	close(heads)
	for range min(runtime.GOMAXPROCS(0), nh) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scores := make([]float32, T*T)
			vt := make([]float32, D*T)
			for hd := range heads {
				kv := hd / group
				// scores[i, j] = q_i · k_j over the head's columns.
				kernel.MatMulF32(scores, T, q[hd*D:], nh*D, k[kv*D:], nkv*D, T, T, D)
				for i := range T {
					row := scores[i*T : (i+1)*T]
					lo := 0
					if window > 0 {
						lo = max(0, i-window+1)
					}
					var sink float32
					if l.sinks != nil {
						sink = l.sinks[hd]
					}
					softmax(row, lo, i+1, scaling, float32(c.AttnSoftcap), l.sinks != nil, sink)
					if tpu {
						for j := lo; j <= i; j++ {
							row[j] = roundBF16(row[j])
						}
					}
				}
				for j := range T {
					for d := range D {
						vt[d*T+j] = v[(j*nkv+kv)*D+d]
					}
				}
				kernel.MatMulF32(ctx[hd*D:], nh*D, scores, T, vt, T, T, D, T)
			}
		}()
	}
	wg.Wait()
	return linear(dst, ctx, T, l.o, l.ob, tpu)
}

// softmax replaces row[lo:hi] (scaled by scaling, then soft-capped when cp is not 0) by its
// softmax and zeroes the rest, as eager attention's masked softmax in float32 does; with a
// sink the extra logit joins the normalization and is dropped (gpt-oss).
func softmax(row []float32, lo, hi int, scaling, cp float32, hasSink bool, sink float32) {
	mx := float32(math.Inf(-1))
	for j := lo; j < hi; j++ {
		row[j] *= scaling
		if cp != 0 {
			row[j] = softcap(row[j], cp)
		}
		mx = max(mx, row[j])
	}
	if hasSink {
		mx = max(mx, sink)
	}
	var sum float32
	for j := lo; j < hi; j++ {
		e := float32(math.Exp(float64(row[j] - mx)))
		row[j] = e
		sum += e
	}
	if hasSink {
		sum += float32(math.Exp(float64(sink - mx)))
	}
	clear(row[:lo])
	clear(row[hi:])
	for j := lo; j < hi; j++ {
		row[j] /= sum
	}
}

// mlp computes the feed-forward block's output into dst [T, H].
func (m *Model) mlp(dst, x []float32, T int, l *layer, tpu bool) error {
	if l.experts != nil {
		if m.cfg.fam.moe == moeGptOss {
			return m.gptOssMoE(dst, x, T, l, tpu)
		}
		return m.qwen3MoE(dst, x, T, l, tpu)
	}
	act := silu
	if m.cfg.HiddenAct == "gelu_pytorch_tanh" {
		act = geluTanh
	}
	return glu(dst, x, T, l.gate, l.up, l.down, l.gateB, l.upB, l.downB, act, tpu)
}

// glu computes down(act(gate(x)) · up(x)).
func glu(dst, x []float32, T int, gate, up, down *matrix, gb, ub, db []float32, act func(float32) float32, tpu bool) error {
	I := gate.rows
	g := make([]float32, T*I)
	u := make([]float32, T*I)
	if err := linear(g, x, T, gate, gb, tpu); err != nil {
		return err
	}
	if err := linear(u, x, T, up, ub, tpu); err != nil {
		return err
	}
	for i, a := range g {
		g[i] = act(a) * u[i]
	}
	return linear(dst, g, T, down, db, tpu)
}

// softcap is cap·tanh(x/cap), as Gemma caps attention scores and logits.
func softcap(x, cp float32) float32 {
	return float32(math.Tanh(float64(x/cp))) * cp
}

// geluTanh is torch's gelu(approximate="tanh"): ½x(1 + tanh(√(2/π)(x + 0.044715x³))).
func geluTanh(x float32) float32 {
	const k = 0.7978845608028654 // √(2/π)
	inner := float32(k) * (x + 0.044715*x*x*x)
	return 0.5 * x * (1 + float32(math.Tanh(float64(inner))))
}

func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

// route is one token's chosen experts and their weights.
type route struct {
	experts []int
	weights []float32
}

// topk returns the indices of the k largest values, largest first (ties: lower index).
func topk(v []float32, k int) []int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case v[a] > v[b]:
			return -1
		case v[a] < v[b]:
			return 1
		}
		return 0
	})
	return idx[:k]
}

// qwen3MoE: softmax over all router logits, top-k, optionally renormalized.
func (m *Model) qwen3MoE(dst, x []float32, T int, l *layer, tpu bool) error {
	c := m.cfg
	E := c.Experts
	logits := make([]float32, T*E)
	if err := linear(logits, x, T, l.router, nil, tpu); err != nil {
		return err
	}
	routes := make([]route, T)
	for t := range T {
		p := slices.Clone(logits[t*E : (t+1)*E])
		softmax(p, 0, E, 1, 0, false, 0)
		top := topk(p, c.TopK)
		w := make([]float32, len(top))
		var sum float32
		for i, e := range top {
			w[i] = p[e]
			sum += w[i]
		}
		if c.NormTopK {
			for i := range w {
				w[i] /= sum
			}
		}
		routes[t] = route{top, w}
	}
	return m.runExperts(dst, x, T, l, routes, func(out, xs []float32, n int, e *expert) error {
		return glu(out, xs, n, e.gate, e.up, e.down, nil, nil, nil, silu, tpu)
	})
}

// gptOssMoE: top-k of the biased router logits, softmax over the chosen ones; experts
// apply the clamped, interleaved gated activation.
func (m *Model) gptOssMoE(dst, x []float32, T int, l *layer, tpu bool) error {
	c := m.cfg
	E := c.Experts
	logits := make([]float32, T*E)
	if err := linear(logits, x, T, l.router, l.routerB, tpu); err != nil {
		return err
	}
	routes := make([]route, T)
	for t := range T {
		row := logits[t*E : (t+1)*E]
		top := topk(row, c.TopK)
		w := make([]float32, len(top))
		for i, e := range top {
			w[i] = row[e]
		}
		softmax(w, 0, len(w), 1, 0, false, 0)
		routes[t] = route{top, w}
	}
	const alpha, limit = 1.702, 7.0
	I := c.MoEIntermediate
	return m.runExperts(dst, x, T, l, routes, func(out, xs []float32, n int, e *expert) error {
		gu := make([]float32, n*2*I)
		if err := linear(gu, xs, n, e.gateUp, e.gateUpB, tpu); err != nil {
			return err
		}
		act := make([]float32, n*I)
		for i := range act {
			g, u := gu[2*i], gu[2*i+1]
			g = min(g, limit)
			u = min(max(u, -limit), limit)
			glu := g * sigmoid(g*alpha)
			act[i] = (u + 1) * glu
		}
		return linear(out, act, n, e.down, e.downB, tpu)
	})
}

// runExperts gathers each expert's tokens, runs the expert on them and adds its weighted
// output to dst, experts in index order as transformers' loop does.
func (m *Model) runExperts(dst, x []float32, T int, l *layer, routes []route,
	run func(out, xs []float32, n int, e *expert) error) error {
	H := m.cfg.Hidden
	clear(dst[:T*H])
	type hit struct {
		token int
		w     float32
	}
	byExpert := make([][]hit, len(l.experts))
	for t, r := range routes {
		for i, e := range r.experts {
			byExpert[e] = append(byExpert[e], hit{t, r.weights[i]})
		}
	}
	for e, hits := range byExpert {
		if len(hits) == 0 {
			continue
		}
		n := len(hits)
		xs := make([]float32, n*H)
		for i, h := range hits {
			copy(xs[i*H:(i+1)*H], x[h.token*H:(h.token+1)*H])
		}
		out := make([]float32, n*H)
		if err := run(out, xs, n, l.experts[e]); err != nil {
			return fmt.Errorf("expert %d: %w", e, err)
		}
		for i, h := range hits {
			d := dst[h.token*H : (h.token+1)*H]
			for j, v := range out[i*H : (i+1)*H] {
				d[j] += v * h.w
			}
		}
	}
	return nil
}
