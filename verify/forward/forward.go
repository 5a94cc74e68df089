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
	var out2 []float32
	if c.ParallelResidual {
		out2 = make([]float32, T*H)
	}
	for i, l := range m.layers {
		if c.PostNorms {
			copy(x, h)
		} else {
			c.normalize(x, h, l.inNorm)
		}
		r := rope
		if l.sliding {
			r = ropeLocal
		}
		if err := m.attention(out, x, T, l, r, tpu); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if c.ParallelResidual {
			// StableLM: residual + attn(ln(x)) + mlp(ln(x)), summed left to right.
			if err := m.mlp(out2, x, T, l, tpu); err != nil {
				return nil, fmt.Errorf("layer %d: %w", i, err)
			}
			add(h, out)
			add(h, out2)
			m.ck.ReleaseMemory()
			continue
		}
		switch {
		case c.Sandwich:
			c.normalize(out, out, l.postNorm)
			add(h, out)
			c.normalize(x, h, l.preFF)
		case c.PostNorms:
			c.normalize(out, out, l.postNorm)
			add(h, out)
			copy(x, h)
		default:
			addScaled(h, out, c.ResidualScale)
			c.normalize(x, h, l.postNorm)
		}
		if err := m.mlp(out, x, T, l, tpu); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if l.postFF.w != nil {
			c.normalize(out, out, l.postFF)
		}
		addScaled(h, out, c.ResidualScale)
		m.ck.ReleaseMemory()
	}
	c.normalize(x, h, m.norm)
	logits := make([]float32, T*c.Vocab)
	if err := linear(logits, x, T, m.lmHead, nil, tpu); err != nil {
		return nil, err
	}
	if d := c.LogitsScaling; d != 0 {
		for i, v := range logits {
			logits[i] = v / d
		}
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

// normalize applies a block's norm to each row of x: RMSNorm, or LayerNorm with its bias.
func (c *Config) normalize(dst, x []float32, n norm) {
	if c.LayerNorm {
		layerNorm(dst, x, n.w, n.b, c.RMSNormEps)
		return
	}
	rmsNorm(dst, x, n.w, c.RMSNormEps)
}

// layerNorm writes (x − mean) / sqrt(var + eps) · weight + bias for each row of x (biased
// variance), as torch's LayerNorm for float32; a nil bias is none.
func layerNorm(dst, x, weight, bias []float32, eps float64) {
	n := len(weight)
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
			d[i] = float32((v-m)*rstd) * weight[i]
			if bias != nil {
				d[i] += bias[i]
			}
		}
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

// applyInterleaved rotates a head vector whose rotated features are interleaved pairs
// (x0, x1), (x2, x3), …, writing the results de-interleaved — the rotated evens, then the
// rotated odds — as DeepSeek's apply_rotary_pos_emb_interleave does.
func (t *ropeTable) applyInterleaved(x []float32, p int) {
	h := t.half
	cs, sn := t.cos[p*h:(p+1)*h], t.sin[p*h:(p+1)*h]
	tmp := make([]float32, 2*h)
	for j := range h {
		x1, x2 := x[2*j], x[2*j+1]
		tmp[j] = x1*cs[j] - x2*sn[j]
		tmp[h+j] = x2*cs[j] + x1*sn[j]
	}
	copy(x, tmp)
}

// attention computes the self-attention block's output (after o_proj) into dst [T, H].
func (m *Model) attention(dst, x []float32, T int, l *layer, rope *ropeTable, tpu bool) error {
	c := m.cfg
	if l.mla != nil {
		return m.mlaAttention(dst, x, T, l, rope, tpu)
	}
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
	perHead := l.qNorm != nil && !c.QKNormFull
	if l.qNorm != nil && c.QKNormFull {
		// OLMo 2 normalizes each token's whole projection, all heads at once.
		rmsNorm(q, q, l.qNorm, c.RMSNormEps)
		rmsNorm(k, k, l.kNorm, c.RMSNormEps)
	}
	for t := range T {
		for hd := range nh {
			row := q[(t*nh+hd)*D : (t*nh+hd+1)*D]
			if perHead {
				rmsNorm(row, row, l.qNorm, c.RMSNormEps)
			}
			if l.qHeadLN != nil {
				layerNorm(row, row, l.qHeadLN[hd], nil, c.RMSNormEps)
			}
			rope.apply(row, t)
		}
		for hd := range nkv {
			row := k[(t*nkv+hd)*D : (t*nkv+hd+1)*D]
			if perHead {
				rmsNorm(row, row, l.kNorm, c.RMSNormEps)
			}
			if l.kHeadLN != nil {
				layerNorm(row, row, l.kHeadLN[hd], nil, c.RMSNormEps)
			}
			rope.apply(row, t)
		}
	}
	ctx := m.attend(q, k, v, T, nh, nkv, D, D, l, tpu)
	return linear(dst, ctx, T, l.o, l.ob, tpu)
}

// mlaAttention is DeepSeek-V3's multi-head latent attention (DeepseekV3Attention): queries
// through the q_a/q_b bottleneck (RMSNorm between) or q_proj; the latent
// kv_a_proj_with_mqa(x) split into the compressed keys/values, RMSNorm'd and expanded by
// kv_b_proj into each head's unrotated key and value, and one rotated key shared by all
// heads; each head's query and key are [unrotated, rotated].
func (m *Model) mlaAttention(dst, x []float32, T int, l *layer, rope *ropeTable, tpu bool) error {
	c, a, w := m.cfg, m.cfg.MLA, l.mla
	nh, nope, rd, vd := c.Heads, a.NopeDim, a.RopeDim, a.VDim
	qk := nope + rd
	q := make([]float32, T*nh*qk)
	if w.qa != nil {
		qa := make([]float32, T*a.QLoraRank)
		if err := linear(qa, x, T, w.qa, w.qaB, tpu); err != nil {
			return err
		}
		rmsNorm(qa, qa, w.qaNorm, 1e-6) // DeepseekV3RMSNorm's default eps, not the config's
		if err := linear(q, qa, T, w.qb, nil, tpu); err != nil {
			return err
		}
	} else if err := linear(q, x, T, w.q, nil, tpu); err != nil {
		return err
	}
	lat := a.KVLoraRank + rd
	ckv := make([]float32, T*lat)
	if err := linear(ckv, x, T, w.kva, w.kvaB, tpu); err != nil {
		return err
	}
	kp := make([]float32, T*a.KVLoraRank)
	for t := range T {
		copy(kp[t*a.KVLoraRank:(t+1)*a.KVLoraRank], ckv[t*lat:])
	}
	rmsNorm(kp, kp, w.kvaNorm, 1e-6)
	kv := make([]float32, T*nh*(nope+vd))
	if err := linear(kv, kp, T, w.kvb, nil, tpu); err != nil {
		return err
	}
	rot := rope.apply
	if a.Interleave {
		rot = rope.applyInterleaved
	}
	k := make([]float32, T*nh*qk)
	v := make([]float32, T*nh*vd)
	for t := range T {
		kr := ckv[t*lat+a.KVLoraRank : (t+1)*lat]
		rot(kr, t)
		for h := range nh {
			src := kv[(t*nh+h)*(nope+vd):]
			kh := k[(t*nh+h)*qk : (t*nh+h+1)*qk]
			copy(kh[:nope], src[:nope])
			copy(kh[nope:], kr)
			copy(v[(t*nh+h)*vd:(t*nh+h+1)*vd], src[nope:nope+vd])
			rot(q[(t*nh+h)*qk+nope:(t*nh+h+1)*qk], t)
		}
	}
	ctx := m.attend(q, k, v, T, nh, nh, qk, vd, l, tpu)
	return linear(dst, ctx, T, l.o, l.ob, tpu)
}

// attend is eager attention over projected heads: q [T, nh, dqk], k [T, nkv, dqk],
// v [T, nkv, dv] (query heads sharing key/value heads in groups), causal with the layer's
// window, scores scaled and soft-capped, sinks joining the softmax; it returns the context
// [T, nh, dv]. In TPU precision q, k, v and the probabilities enter the products rounded to
// bfloat16.
func (m *Model) attend(q, k, v []float32, T, nh, nkv, dqk, dv int, l *layer, tpu bool) []float32 {
	c := m.cfg
	if tpu {
		q, k, v = roundedBF16(q), roundedBF16(k), roundedBF16(v)
	}
	ctx := make([]float32, T*nh*dv)
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
			vt := make([]float32, dv*T)
			for hd := range heads {
				kv := hd / group
				// scores[i, j] = q_i · k_j over the head's columns.
				kernel.MatMulF32(scores, T, q[hd*dqk:], nh*dqk, k[kv*dqk:], nkv*dqk, T, T, dqk)
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
					for d := range dv {
						vt[d*T+j] = v[(j*nkv+kv)*dv+d]
					}
				}
				kernel.MatMulF32(ctx[hd*dv:], nh*dv, scores, T, vt, T, T, dv, T)
			}
		}()
	}
	wg.Wait()
	return ctx
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
		switch m.cfg.fam.moe {
		case moeGptOss:
			return m.gptOssMoE(dst, x, T, l, tpu)
		case moeDeepSeek:
			return m.deepSeekMoE(dst, x, T, l, tpu)
		}
		return m.qwen3MoE(dst, x, T, l, tpu)
	}
	act := activations[m.cfg.HiddenAct]
	if l.gate == nil {
		// StarCoder2: c_proj(act(c_fc(x))).
		h := make([]float32, T*l.up.rows)
		if err := linear(h, x, T, l.up, l.upB, tpu); err != nil {
			return err
		}
		for i, v := range h {
			h[i] = act(v)
		}
		return linear(dst, h, T, l.down, l.downB, tpu)
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

// geluErf is torch's exact gelu: ½x(1 + erf(x/√2)).
func geluErf(x float32) float32 {
	return 0.5 * x * (1 + float32(math.Erf(float64(x*float32(1/math.Sqrt2)))))
}

// activations are the MLP activations by config name (hidden_act, hidden_activation).
var activations = map[string]func(float32) float32{
	"silu": silu, "swish": silu, "gelu_pytorch_tanh": geluTanh, "gelu": geluErf,
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

// qwen3MoE: softmax over all router logits, top-k, optionally renormalized (Qwen3-MoE's
// norm_topk_prob; always for Mixtral), plus Qwen2-MoE's gated shared expert.
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
	err := m.runExperts(dst, x, T, l, routes, func(out, xs []float32, n int, e *expert) error {
		return glu(out, xs, n, e.gate, e.up, e.down, nil, nil, nil, silu, tpu)
	})
	if err != nil || l.shared == nil {
		return err
	}
	// Qwen2-MoE: + sigmoid(shared_expert_gate(x)) · shared_expert(x).
	H := c.Hidden
	sh := make([]float32, T*H)
	if err := glu(sh, x, T, l.shared.gate, l.shared.up, l.shared.down, nil, nil, nil, silu, tpu); err != nil {
		return fmt.Errorf("shared expert: %w", err)
	}
	g := make([]float32, T)
	if err := linear(g, x, T, l.sharedGate, nil, tpu); err != nil {
		return fmt.Errorf("shared expert gate: %w", err)
	}
	for t := range T {
		s := sigmoid(g[t])
		d := dst[t*H : (t+1)*H]
		for j, v := range sh[t*H : (t+1)*H] {
			d[j] += float32(s * v)
		}
	}
	return nil
}

// deepSeekMoE is DeepseekV3MoE: sigmoid scores; each group of experts scored by the sum of
// its two best bias-corrected scores, the topk_group best groups kept; the top-k
// bias-corrected scores among them chosen, weighted by their uncorrected scores
// (renormalized when norm_topk_prob) times routed_scaling_factor; plus the shared experts.
func (m *Model) deepSeekMoE(dst, x []float32, T int, l *layer, tpu bool) error {
	c := m.cfg
	E, G := c.Experts, c.Groups
	per := E / G
	logits := make([]float32, T*E)
	if err := linear(logits, x, T, l.router, nil, tpu); err != nil {
		return err
	}
	routes := make([]route, T)
	neg := float32(math.Inf(-1))
	for t := range T {
		s := make([]float32, E)
		sc := make([]float32, E)
		for e, v := range logits[t*E : (t+1)*E] {
			s[e] = sigmoid(v)
			sc[e] = s[e] + l.scoreBias[e]
		}
		gs := make([]float32, G)
		for g := range G {
			top := topk(sc[g*per:(g+1)*per], 2)
			gs[g] = sc[g*per+top[0]] + sc[g*per+top[1]]
		}
		keep := make([]bool, G)
		for _, g := range topk(gs, c.TopKGroups) {
			keep[g] = true
		}
		for e := range sc {
			if !keep[e/per] {
				sc[e] = neg
			}
		}
		top := topk(sc, c.TopK)
		w := make([]float32, len(top))
		var sum float32
		for i, e := range top {
			w[i] = s[e]
			sum += w[i]
		}
		for i := range w {
			if c.NormTopK {
				w[i] /= sum + 1e-20
			}
			w[i] *= c.RoutedScale
		}
		routes[t] = route{top, w}
	}
	err := m.runExperts(dst, x, T, l, routes, func(out, xs []float32, n int, e *expert) error {
		return glu(out, xs, n, e.gate, e.up, e.down, nil, nil, nil, silu, tpu)
	})
	if err != nil {
		return err
	}
	sh := make([]float32, T*c.Hidden)
	if err := glu(sh, x, T, l.shared.gate, l.shared.up, l.shared.down, nil, nil, nil, silu, tpu); err != nil {
		return fmt.Errorf("shared experts: %w", err)
	}
	add(dst[:T*c.Hidden], sh)
	return nil
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
