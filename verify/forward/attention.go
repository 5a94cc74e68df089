package forward

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/ckpt-dev/ckpt/verify/forward/kernel"
)

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

// apply rotates the first 2·half features of one head vector at position p in the style
// given; the rest pass unchanged. tmp holds 2·half scratch floats.
func (t *ropeTable) apply(x []float32, p int, style RopeStyle, tmp []float32) {
	h := t.half
	cs, sn := t.cos[p*h:(p+1)*h], t.sin[p*h:(p+1)*h]
	switch style {
	case Halves: // x·cos + rotate_half(x)·sin
		a, b := x[:h], x[h:2*h]
		for j := range h {
			x1, x2 := a[j], b[j]
			a[j] = x1*cs[j] - x2*sn[j]
			b[j] = x2*cs[j] + x1*sn[j]
		}
	case HalvesInverse: // x·cos − rotate_half(x)·sin
		a, b := x[:h], x[h:2*h]
		for j := range h {
			x1, x2 := a[j], b[j]
			a[j] = x1*cs[j] + x2*sn[j]
			b[j] = x2*cs[j] - x1*sn[j]
		}
	case Pairs: // rotate_every_two: pairs (2j, 2j+1) in place
		for j := range h {
			x1, x2 := x[2*j], x[2*j+1]
			x[2*j] = x1*cs[j] - x2*sn[j]
			x[2*j+1] = x2*cs[j] + x1*sn[j]
		}
	case PairsToHalves: // DeepSeek: pairs rotated, written evens then odds
		for j := range h {
			x1, x2 := x[2*j], x[2*j+1]
			tmp[j] = x1*cs[j] - x2*sn[j]
			tmp[h+j] = x2*cs[j] + x1*sn[j]
		}
		copy(x, tmp[:2*h])
	}
}

// attention computes the self-attention sublayer's output (after its output projection)
// into dst [T, H].
func (m *Model) attention(dst, x []float32, T int, a *attnW, rt *ropeTable, tpu bool) error {
	s := a.spec
	if s.MLA != nil {
		return m.mlaAttention(dst, x, T, a, rt, tpu)
	}
	if s.MoA != nil {
		return m.moaAttention(dst, x, T, a, rt, tpu)
	}
	H := m.cfg.Hidden
	nh, nkv, D := s.Heads, s.KVHeads, s.HeadDim
	dv := s.VDim
	if dv == 0 {
		dv = D
	}
	q := make([]float32, T*nh*D)
	k := make([]float32, T*nkv*D)
	v := make([]float32, T*nkv*dv)
	if a.fused != nil {
		w := a.qkvWidth
		step := tokenRows(w)
		buf := make([]float32, min(step, T)*w)
		for t0 := 0; t0 < T; t0 += step {
			n := min(step, T-t0)
			if err := linear(buf[:n*w], x[t0*H:(t0+n)*H], n, a.fused.w, a.fused.b, tpu); err != nil {
				return err
			}
			for i := range n {
				if err := splitQKV(q[(t0+i)*nh*D:], k[(t0+i)*nkv*D:], v[(t0+i)*nkv*dv:], buf[i*w:(i+1)*w], s, dv); err != nil {
					return err
				}
			}
		}
	} else {
		for _, p := range []struct {
			dst []float32
			l   *linearW
		}{{q, a.q}, {k, a.k}, {v, a.v}} {
			if err := m.rows(p.dst, x, T, p.l, tpu); err != nil {
				return err
			}
		}
	}
	clip := func() {
		if c := float32(s.Clip); c != 0 {
			for _, buf := range [][]float32{q, k, v} {
				for i, y := range buf {
					buf[i] = min(max(y, -c), c)
				}
			}
		}
	}
	if !s.ClipAfterNorm {
		clip()
	}
	if n := a.qNorm; n != nil && !n.spec.AfterRope {
		n.apply(q, nh, D)
	}
	if n := a.kNorm; n != nil && !n.spec.AfterRope {
		n.apply(k, nkv, D)
	}
	if s.ClipAfterNorm {
		clip()
	}
	if rt != nil {
		style := s.Rope.Style
		tmp := make([]float32, 2*rt.half)
		for t := range T {
			for hd := range nh {
				rt.apply(q[(t*nh+hd)*D:(t*nh+hd+1)*D], t, style, tmp)
			}
			for hd := range nkv {
				rt.apply(k[(t*nkv+hd)*D:(t*nkv+hd+1)*D], t, style, tmp)
			}
		}
	}
	if n := a.qNorm; n != nil && n.spec.AfterRope {
		n.apply(q, nh, D)
	}
	if n := a.kNorm; n != nil && n.spec.AfterRope {
		n.apply(k, nkv, D)
	}
	if tt := s.TempTuning; tt != nil {
		for t := range T {
			f := float32(math.Log(math.Floor((float64(t)+tt.Offset)/tt.Floor)+1)*tt.Scale + 1)
			row := q[t*nh*D : (t+1)*nh*D]
			for i := range row {
				row[i] *= f
			}
		}
	}
	if s.Diff != nil {
		ctx, err := m.diffAttend(q, k, v, T, nh, nkv, D, a, tpu)
		if err != nil {
			return err
		}
		return m.rows(dst, ctx, T, a.o, tpu)
	}
	ctx := m.attend(q, k, v, T, nh, nkv, D, dv, a, tpu)
	if a.gate != nil {
		w, per := nh*dv, 1
		if s.GateHeads {
			w, per = nh, dv
		}
		f := sigmoid
		if s.GateSoftplus {
			f = softplus
		}
		step := tokenRows(nh * dv)
		g := make([]float32, min(step, T)*w)
		for t0 := 0; t0 < T; t0 += step {
			n := min(step, T-t0)
			if err := linear(g[:n*w], x[t0*H:(t0+n)*H], n, a.gate.w, a.gate.b, tpu); err != nil {
				return err
			}
			c := ctx[t0*nh*dv : (t0+n)*nh*dv]
			for i, y := range g[:n*w] {
				gv := f(y)
				for j := range per {
					c[i*per+j] *= gv
				}
			}
		}
	}
	if a.subNorm != nil {
		a.subNorm.apply(ctx[:T*nh*dv], ctx[:T*nh*dv], nh*dv)
	}
	return m.rows(dst, ctx, T, a.o, tpu)
}

// splitQKV copies one position's fused projection row into its query, key and value heads
// as the layout orders them.
func splitQKV(q, k, v, row []float32, s *Attention, dv int) error {
	nh, nkv, D := s.Heads, s.KVHeads, s.HeadDim
	switch s.QKV.Layout {
	case Concat:
		copy(q[:nh*D], row)
		copy(k[:nkv*D], row[nh*D:])
		copy(v[:nkv*dv], row[nh*D+nkv*D:])
	case PerHead:
		if nh != nkv || dv != D {
			return fmt.Errorf("a per-head fused projection needs as many key/value heads as query heads")
		}
		for h := range nh {
			r := row[h*3*D:]
			copy(q[h*D:(h+1)*D], r[:D])
			copy(k[h*D:(h+1)*D], r[D:2*D])
			copy(v[h*D:(h+1)*D], r[2*D:3*D])
		}
	case Grouped:
		g := nh / nkv
		if dv != D {
			return fmt.Errorf("a grouped fused projection needs values as wide as keys")
		}
		for j := range nkv {
			r := row[j*(g+2)*D:]
			copy(q[j*g*D:(j+1)*g*D], r[:g*D])
			copy(k[j*D:(j+1)*D], r[g*D:(g+1)*D])
			copy(v[j*D:(j+1)*D], r[(g+1)*D:(g+2)*D])
		}
	case CodeGen:
		// CodeGen's qkv_proj: mp_num = 4 blocks of [q, v, k], each holding a quarter of the
		// heads' features in order.
		const mp = 4
		width := nh * D
		if width%mp != 0 || nh%mp != 0 {
			return fmt.Errorf("CodeGen's fused projection needs heads divisible by %d", mp)
		}
		local := width / mp
		for b := range mp {
			r := row[b*3*local:]
			copy(q[b*local:(b+1)*local], r[:local])
			copy(v[b*local:(b+1)*local], r[local:2*local])
			copy(k[b*local:(b+1)*local], r[2*local:3*local])
		}
	default:
		return fmt.Errorf("fused projection layout %d is not known", s.QKV.Layout)
	}
	return nil
}

// apply normalizes every position's query or key heads (heads of dim features each) in
// place: per head, with a weight shared by all heads or one per head, or over all heads at
// once (Whole).
func (n *headNormW) apply(x []float32, heads, dim int) {
	s := n.spec
	if s.Whole {
		normRows(x, x, n.w, n.b, s.Kind, s.Eps, heads*dim)
		return
	}
	if !s.PerHead {
		normRows(x, x, n.w, n.b, s.Kind, s.Eps, dim)
		return
	}
	for r := 0; r+heads*dim <= len(x); r += heads * dim {
		for h := range heads {
			row := x[r+h*dim : r+(h+1)*dim]
			var w, b []float32
			if n.w != nil {
				w = n.w[h*dim : (h+1)*dim]
			}
			if n.b != nil {
				b = n.b[h*dim : (h+1)*dim]
			}
			normRows(row, row, w, b, s.Kind, s.Eps, dim)
		}
	}
}

// mlaAttention is DeepSeek's multi-head latent attention: queries through the q_a/q_b
// bottleneck (RMSNorm between) or q_proj; the latent kv_a_proj_with_mqa(x) split into the
// compressed keys/values, RMSNorm'd and expanded by kv_b_proj into each head's unrotated
// key and value, and one rotated key shared by all heads; each head's query and key are
// [unrotated, rotated].
func (m *Model) mlaAttention(dst, x []float32, T int, w *attnW, rt *ropeTable, tpu bool) error {
	s := w.spec
	a := s.MLA
	nh, nope, rd, vd := s.Heads, a.NopeDim, a.RopeDim, a.VDim
	qk := nope + rd
	q := make([]float32, T*nh*qk)
	if w.qa != nil {
		qa := make([]float32, T*a.QLoraRank)
		if err := m.rows(qa, x, T, w.qa, tpu); err != nil {
			return err
		}
		w.qaNorm.apply(qa, qa, a.QLoraRank)
		if err := m.rows(q, qa, T, w.qb, tpu); err != nil {
			return err
		}
	} else if err := m.rows(q, x, T, w.q, tpu); err != nil {
		return err
	}
	lat := a.KVLoraRank + rd
	ckv := make([]float32, T*lat)
	if err := m.rows(ckv, x, T, w.kva, tpu); err != nil {
		return err
	}
	kp := make([]float32, T*a.KVLoraRank)
	for t := range T {
		copy(kp[t*a.KVLoraRank:(t+1)*a.KVLoraRank], ckv[t*lat:])
	}
	w.kvaNorm.apply(kp, kp, a.KVLoraRank)
	kv := make([]float32, T*nh*(nope+vd))
	if err := m.rows(kv, kp, T, w.kvb, tpu); err != nil {
		return err
	}
	style := s.Rope.Style
	tmp := make([]float32, rd)
	k := make([]float32, T*nh*qk)
	v := make([]float32, T*nh*vd)
	for t := range T {
		kr := ckv[t*lat+a.KVLoraRank : (t+1)*lat]
		rt.apply(kr, t, style, tmp)
		for h := range nh {
			src := kv[(t*nh+h)*(nope+vd):]
			kh := k[(t*nh+h)*qk : (t*nh+h+1)*qk]
			copy(kh[:nope], src[:nope])
			copy(kh[nope:], kr)
			copy(v[(t*nh+h)*vd:(t*nh+h+1)*vd], src[nope:nope+vd])
			rt.apply(q[(t*nh+h)*qk+nope:(t*nh+h+1)*qk], t, style, tmp)
		}
	}
	ctx := m.attend(q, k, v, T, nh, nh, qk, vd, w, tpu)
	return m.rows(dst, ctx, T, w.o, tpu)
}

// moaAttention is JetMoE's mixture of attention heads (MoA).
func (m *Model) moaAttention(dst, x []float32, T int, a *attnW, rt *ropeTable, tpu bool) error {
	s, mw := a.spec, a.moa
	H := m.cfg.Hidden
	K, nkv, D := s.MoA.TopK, s.KVHeads, s.HeadDim
	kvd := nkv * D
	logits := make([]float32, T*s.MoA.Experts)
	if err := m.rows(logits, x, T, mw.router, tpu); err != nil {
		return err
	}
	rs := make([]route, T)
	for t := range T {
		lg := logits[t*s.MoA.Experts : (t+1)*s.MoA.Experts]
		top := topk(lg, K)
		w := make([]float32, K)
		for i, e := range top {
			w[i] = lg[e]
		}
		softmax(w, false, 0)
		rs[t] = route{top, w}
	}
	// Each slot's queries from its expert, the experts run on their tokens in turn.
	q := make([]float32, T*K*kvd)
	type hit struct{ t, slot int }
	by := make([][]hit, s.MoA.Experts)
	for t, r := range rs {
		for slot, e := range r.experts {
			by[e] = append(by[e], hit{t, slot})
		}
	}
	for e, hits := range by {
		if len(hits) == 0 {
			continue
		}
		xs := make([]float32, len(hits)*H)
		for i, h := range hits {
			copy(xs[i*H:(i+1)*H], x[h.t*H:(h.t+1)*H])
		}
		y := make([]float32, len(hits)*kvd)
		if err := linear(y, xs, len(hits), mw.in[e], nil, tpu); err != nil {
			return err
		}
		for i, h := range hits {
			copy(q[(h.t*K+h.slot)*kvd:], y[i*kvd:(i+1)*kvd])
		}
	}
	kvBuf := make([]float32, T*2*kvd)
	if err := m.rows(kvBuf, x, T, mw.kv, tpu); err != nil {
		return err
	}
	k, v := make([]float32, T*kvd), make([]float32, T*kvd)
	for t := range T {
		copy(k[t*kvd:(t+1)*kvd], kvBuf[t*2*kvd:])
		copy(v[t*kvd:(t+1)*kvd], kvBuf[t*2*kvd+kvd:(t+1)*2*kvd])
	}
	if rt != nil {
		tmp := make([]float32, 2*rt.half)
		for t := range T {
			for hd := range K * nkv {
				rt.apply(q[(t*K*nkv+hd)*D:(t*K*nkv+hd+1)*D], t, s.Rope.Style, tmp)
			}
			for hd := range nkv {
				rt.apply(k[(t*nkv+hd)*D:(t*nkv+hd+1)*D], t, s.Rope.Style, tmp)
			}
		}
	}
	ctx := m.attend(q, k, v, T, K*nkv, nkv, D, D, a, tpu)
	// Each slot's context through its expert's output projection, weighted and summed.
	out := dst[:T*H]
	clear(out)
	for e, hits := range by {
		if len(hits) == 0 {
			continue
		}
		cs := make([]float32, len(hits)*kvd)
		for i, h := range hits {
			copy(cs[i*kvd:(i+1)*kvd], ctx[(h.t*K+h.slot)*kvd:])
		}
		y := make([]float32, len(hits)*H)
		if err := linear(y, cs, len(hits), mw.out[e], nil, tpu); err != nil {
			return err
		}
		for i, h := range hits {
			g := rs[h.t].weights[h.slot]
			d := out[h.t*H : (h.t+1)*H]
			for j, y := range y[i*H : (i+1)*H] {
				d[j] += y * g
			}
		}
	}
	if mw.bias != nil {
		for t := range T {
			add(out[t*H:(t+1)*H], mw.bias)
		}
	}
	return nil
}

// Attention is computed in blocks of query rows against blocks of keys, so that memory
// never holds a [T, T] score matrix: when a block of queries sees at most keyBlock keys
// (every sequence up to keyBlock tokens) their scores are one block and the softmax is
// eager attention's, exactly; beyond that the keys are visited a block at a time with an
// online softmax (running maximum and sum, rescaled as the maximum grows), the
// probabilities normalized at the end.
const queryBlock = 64

// keyBlock is the most keys one block of scores holds (a variable for the tests that check
// the online softmax against the exact one).
var keyBlock = 2048

// attend is causal attention over projected heads: q [T, nh, dqk], k [T, nkv, dqk],
// v [T, nkv, dv] (query heads sharing key/value heads in groups), the layer's window,
// chunks, ALiBi slopes, scaling, soft-capping and sinks applied; it returns the context
// [T, nh, dv]. In TPU precision q, k, v and the probabilities enter the products rounded to
// bfloat16.
func (m *Model) attend(q, k, v []float32, T, nh, nkv, dqk, dv int, w *attnW, tpu bool) []float32 {
	s := w.spec
	if tpu {
		q, k, v = roundedBF16(q), roundedBF16(k), roundedBF16(v)
	}
	// Values transposed per key/value head, [nkv, dv, T], for the P·V products.
	vt := make([]float32, nkv*dv*T)
	for j := range T {
		for kv := range nkv {
			src := v[(j*nkv+kv)*dv : (j*nkv+kv+1)*dv]
			for d, x := range src {
				vt[(kv*dv+d)*T+j] = x
			}
		}
	}
	ctx := make([]float32, T*nh*dv)
	group := nh / nkv
	type item struct{ head, i0 int }
	items := make(chan item, 64)
	go func() {
		for hd := range nh {
			for i0 := 0; i0 < T; i0 += queryBlock {
				items <- item{hd, i0}
			}
		}
		close(items)
	}()
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), nh*((T+queryBlock-1)/queryBlock)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &attender{s: s, w: w, T: T, tpu: tpu,
				scores: make([]float32, queryBlock*min(T, keyBlock)), out: make([]float32, queryBlock*dv), tmp: make([]float32, queryBlock*dv),
				mx: make([]float32, queryBlock), sum: make([]float32, queryBlock)}
			for it := range items {
				kvh := it.head / group
				if s.MoA != nil {
					kvh = it.head % nkv // the keys are repeated per slot: head s·nkv + j uses j
				}
				i1 := min(it.i0+queryBlock, T)
				a.block(ctx, q[it.head*dqk:], nh*dqk, k[kvh*dqk:], nkv*dqk, vt[kvh*dv*T:], it.head, it.i0, i1, dqk, dv, nh)
			}
		}()
	}
	wg.Wait()
	return ctx
}

// attender is one worker's scratch for attention blocks.
type attender struct {
	s       *Attention
	w       *attnW
	T       int
	tpu     bool
	scores  []float32
	out     []float32
	tmp     []float32
	mx, sum []float32
}

// keys is the first key position query i sees.
func (a *attender) lo(i int) int {
	lo := 0
	if a.s.Window > 0 {
		lo = max(lo, i-a.s.Window+1)
	}
	if c := a.s.Chunk; c > 0 {
		lo = max(lo, i/c*c)
	}
	return lo
}

// score computes the transformed scores of queries [i0, i1) against keys [j0, j1) into
// a.scores (row stride j1−j0): scaled, ALiBi added, soft-capped, −Inf outside each query's
// keys.
func (a *attender) score(q []float32, ldq int, k []float32, ldk, head, i0, i1, j0, j1, dqk int) []float32 {
	n := j1 - j0
	sc := a.scores[:(i1-i0)*n]
	kernel.MatMulF32(sc, n, q[i0*ldq:], ldq, k[j0*ldk:], ldk, i1-i0, n, dqk)
	scale := float32(a.s.Scale)
	cp := float32(a.s.Softcap)
	var slope float32
	if a.s.ALiBi != nil {
		slope = a.s.ALiBi[head]
	}
	neg := float32(math.Inf(-1))
	for i := i0; i < i1; i++ {
		row := sc[(i-i0)*n : (i-i0+1)*n]
		lo := a.lo(i)
		for j := range row {
			p := j0 + j
			if p < lo || p > i {
				row[j] = neg
				continue
			}
			y := row[j] * scale
			if slope != 0 {
				y += slope * float32(p)
			}
			if cp != 0 {
				y = softcap(y, cp)
			}
			row[j] = y
		}
	}
	return sc
}

// block computes the context of queries [i0, i1) of one head into ctx.
func (a *attender) block(ctx, q []float32, ldq int, k []float32, ldk int, vt []float32, head, i0, i1, dqk, dv, nh int) {
	T := a.T
	jlo, jhi := a.lo(i0), i1 // the keys any of the queries sees
	rows := i1 - i0
	var sink float32
	hasSink := a.w.sinks != nil
	if hasSink {
		sink = a.w.sinks[head]
	}
	out := a.out[:rows*dv]
	if jhi-jlo <= keyBlock {
		// One block: eager attention's softmax over the whole row.
		n := jhi - jlo
		sc := a.score(q, ldq, k, ldk, head, i0, i1, jlo, jhi, dqk)
		for r := range rows {
			softmax(sc[r*n:(r+1)*n], hasSink, sink)
			if a.tpu {
				roundSlice(sc[r*n : (r+1)*n])
			}
		}
		kernel.MatMulF32(out, dv, sc, n, vt[jlo:], T, rows, dv, n)
	} else {
		// Online softmax over key blocks: running maximum and sum per row.
		mx, sum := a.mx[:rows], a.sum[:rows]
		for r := range rows {
			mx[r], sum[r] = float32(math.Inf(-1)), 0
			if hasSink {
				mx[r], sum[r] = sink, 1
			}
		}
		clear(out)
		tmp := a.tmp[:rows*dv]
		for j0 := jlo; j0 < jhi; j0 += keyBlock {
			j1 := min(j0+keyBlock, jhi)
			n := j1 - j0
			sc := a.score(q, ldq, k, ldk, head, i0, i1, j0, j1, dqk)
			for r := range rows {
				row := sc[r*n : (r+1)*n]
				bm := mx[r]
				for _, y := range row {
					bm = max(bm, y)
				}
				if math.IsInf(float64(bm), -1) {
					clear(row)
					continue
				}
				if bm > mx[r] {
					f := float32(math.Exp(float64(mx[r] - bm)))
					sum[r] *= f
					o := out[r*dv : (r+1)*dv]
					for d := range o {
						o[d] *= f
					}
					mx[r] = bm
				}
				for j, y := range row {
					e := float32(math.Exp(float64(y - bm)))
					row[j] = e
					sum[r] += e
				}
				if a.tpu {
					roundSlice(row)
				}
			}
			kernel.MatMulF32(tmp, dv, sc, n, vt[j0:], T, rows, dv, n)
			add(out, tmp)
		}
		for r := range rows {
			o := out[r*dv : (r+1)*dv]
			for d := range o {
				o[d] /= sum[r]
			}
		}
	}
	for r := range rows {
		copy(ctx[((i0+r)*nh+head)*dv:], out[r*dv:(r+1)*dv])
	}
}

// softmax replaces row by its softmax (−Inf entries becoming 0), as eager attention's
// masked softmax in float32 does; with a sink the extra logit joins the normalization and
// is dropped (gpt-oss).
func softmax(row []float32, hasSink bool, sink float32) {
	mx := float32(math.Inf(-1))
	for _, y := range row {
		mx = max(mx, y)
	}
	if hasSink {
		mx = max(mx, sink)
	}
	if math.IsInf(float64(mx), -1) {
		clear(row)
		return
	}
	var sum float32
	for j, y := range row {
		e := float32(math.Exp(float64(y - mx)))
		row[j] = e
		sum += e
	}
	if hasSink {
		sum += float32(math.Exp(float64(sink - mx)))
	}
	for j := range row {
		row[j] /= sum
	}
}

func roundSlice(x []float32) {
	for i, y := range x {
		x[i] = roundBF16(y)
	}
}

// diffAttend is differential attention (DiffAttn) on rotated q [T, nh, D] and k, v [T,
// nkv, D]: every query head attends with its own key (its group's) and its pair of value
// heads; the result is [T, nh·D], half the heads of 2·D features.
func (m *Model) diffAttend(q, k, v []float32, T, nh, nkv, D int, a *attnW, tpu bool) ([]float32, error) {
	half, group := nh/2, nh/nkv
	if nh%2 != 0 {
		return nil, fmt.Errorf("differential attention needs an even number of heads, not %d", nh)
	}
	kx := make([]float32, T*nh*D)
	vx := make([]float32, T*nh*2*D)
	for t := range T {
		for h := range nh {
			copy(kx[(t*nh+h)*D:(t*nh+h+1)*D], k[(t*nkv+h/group)*D:])
			j := h % half
			row := vx[(t*nh+h)*2*D:]
			copy(row[:D], v[(t*nkv+j/group)*D:(t*nkv+j/group+1)*D])
			copy(row[D:2*D], v[(t*nkv+(half+j)/group)*D:(t*nkv+(half+j)/group+1)*D])
		}
	}
	ctx := m.attend(q, kx, vx, T, nh, nh, D, 2*D, a, tpu)
	d := a.spec.Diff
	lam, scale := a.diffLambda, float32(1-d.Init)
	out := make([]float32, T*nh*D)
	for t := range T {
		for h := range half {
			o := out[(t*half+h)*2*D : (t*half+h+1)*2*D]
			x1 := ctx[(t*nh+h)*2*D : (t*nh+h+1)*2*D]
			x2 := ctx[(t*nh+half+h)*2*D : (t*nh+half+h+1)*2*D]
			for i := range o {
				o[i] = x1[i] - lam*x2[i]
			}
			rmsNorm(o, o, nil, d.Eps, 2*D)
			for i := range o {
				o[i] *= scale
			}
		}
	}
	return out, nil
}
