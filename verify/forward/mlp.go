package forward

import (
	"fmt"
	"math"
	"slices"
)

// mlp computes the feed-forward sublayer's output into dst [T, H], a block of positions at
// a time (every position is independent), so its intermediates stay one block's.
func (m *Model) mlp(dst, x []float32, T int, w *mlpW, tpu bool) error {
	H := m.cfg.Hidden
	width := w.spec.Inter * 2
	if e := w.spec.MoE; e != nil {
		width = max(e.Experts, 2*e.Inter)
		if e.Shared != nil {
			width = max(width, 2*e.Shared.Inter)
		}
	}
	step := tokenRows(width)
	for t0 := 0; t0 < T; t0 += step {
		n := min(step, T-t0)
		d, xs := dst[t0*H:(t0+n)*H], x[t0*H:(t0+n)*H]
		var err error
		if w.moe != nil {
			err = m.moe(d, xs, n, w.moe, tpu)
		} else {
			err = dense(d, xs, n, w, tpu)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// dense is a dense MLP on T rows: down(act(gate(x))·up(x)), down(act(up(x))) without a
// gate, or the gated activation of an interleaved gate_up.
func dense(dst, x []float32, T int, w *mlpW, tpu bool) error {
	if w.gateUp != nil {
		I := w.spec.Inter
		gu := make([]float32, T*2*I)
		if err := linear(gu, x, T, w.gateUp.w, w.gateUp.b, tpu); err != nil {
			return err
		}
		h := make([]float32, T*I)
		gated(h, gu, w.spec.Act, w.act)
		if w.subNorm != nil {
			w.subNorm.apply(h, h, I)
		}
		return linear(dst, h, T, w.down.w, w.down.b, tpu)
	}
	var gate, up, down *matrix
	var gb, ub, db []float32
	if w.gate != nil {
		gate, gb = w.gate.w, w.gate.b
	}
	up, ub = w.up.w, w.up.b
	down, db = w.down.w, w.down.b
	return glu(dst, x, T, gate, up, down, gb, ub, db, w.act, w.subNorm, tpu)
}

// gated applies an interleaved gate/up activation: out[i] from gu[2i] (gate) and gu[2i+1]
// (up).
func gated(out, gu []float32, act Act, f func(float32) float32) {
	for i := range out {
		g, u := gu[2*i], gu[2*i+1]
		if act == "gpt_oss_swiglu" {
			out[i] = gptOssSwiglu(g, u)
		} else {
			out[i] = f(g) * u
		}
	}
}

// glu computes down(act(gate(x)) · up(x)), or down(act(up(x))) when gate is nil.
func glu(dst, x []float32, T int, gate, up, down *matrix, gb, ub, db []float32, act func(float32) float32, sub *normW, tpu bool) error {
	I := up.rows
	u := make([]float32, T*I)
	if err := linear(u, x, T, up, ub, tpu); err != nil {
		return err
	}
	if gate == nil {
		for i, a := range u {
			u[i] = act(a)
		}
		if sub != nil {
			sub.apply(u, u, I)
		}
		return linear(dst, u, T, down, db, tpu)
	}
	g := make([]float32, T*I)
	if err := linear(g, x, T, gate, gb, tpu); err != nil {
		return err
	}
	for i, a := range g {
		g[i] = act(a) * u[i]
	}
	if sub != nil {
		sub.apply(g, g, I)
	}
	return linear(dst, g, T, down, db, tpu)
}

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

// routes chooses each token's experts from the router logits [T, E] as the block's
// Scoring says.
func routes(logits []float32, T int, w *moeW) []route {
	e := w.spec
	E := e.Experts
	out := make([]route, T)
	neg := float32(math.Inf(-1))
	for t := range T {
		lg := logits[t*E : (t+1)*E]
		var top []int
		var wts []float32
		switch e.Scoring {
		case TopKSoftmax, TopKSigmoid:
			top = topk(lg, e.TopK)
			wts = make([]float32, len(top))
			for i, x := range top {
				wts[i] = lg[x]
			}
			if e.Scoring == TopKSoftmax {
				softmax(wts, false, 0)
			} else {
				for i, y := range wts {
					wts[i] = sigmoid(y)
				}
			}
		case SparseMixer:
			top, wts = sparseMixer(lg, e.JitterEps)
		default:
			// Scores (softmax or sigmoid), chosen by score plus the correction bias within
			// the best groups, weighted by the score.
			s := slices.Clone(lg)
			if e.Scoring == Softmax {
				softmax(s, false, 0)
			} else {
				for i, y := range s {
					s[i] = sigmoid(y)
				}
			}
			choice := slices.Clone(s)
			if w.scoreBias != nil {
				for i := range choice {
					choice[i] += w.scoreBias[i]
				}
			}
			if G := e.Groups; G > 1 {
				per := E / G
				gs := make([]float32, G)
				for g := range G {
					grp := choice[g*per : (g+1)*per]
					if e.GroupMax {
						gs[g] = grp[topk(grp, 1)[0]]
					} else {
						b := topk(grp, 2)
						gs[g] = grp[b[0]] + grp[b[1]]
					}
				}
				keep := make([]bool, G)
				for _, g := range topk(gs, e.TopKGroups) {
					keep[g] = true
				}
				for i := range choice {
					if !keep[i/per] {
						choice[i] = neg
					}
				}
			}
			top = topk(choice, e.TopK)
			wts = make([]float32, len(top))
			for i, x := range top {
				wts[i] = s[x]
			}
		}
		if e.NormTopK {
			var sum float32
			for _, y := range wts {
				sum += y
			}
			d := sum + e.NormEps
			if e.NormClamp {
				d = max(sum, e.NormEps)
			}
			for i := range wts {
				wts[i] /= d
			}
		}
		if e.RoutedScale != 0 {
			for i := range wts {
				wts[i] *= e.RoutedScale
			}
		}
		out[t] = route{top, wts}
	}
	return out
}

// sparseMixer is Phi-MoE's sparsemixer routing at inference: the best expert weighted by
// its softmax over the logits within a jitter threshold of it, then the best other expert
// weighted likewise with the first masked out.
func sparseMixer(lg []float32, eps float64) ([]int, []float32) {
	neg := float32(math.Inf(-1))
	pick := func(scores []float32) (int, float32) {
		best := topk(scores, 1)[0]
		mx := scores[best]
		masked := slices.Clone(scores)
		for i, y := range scores {
			// factor = max(|score|, max) clamped below by max, as
			// scores.abs().clamp(min=max); mask where (max − score)/factor > 2·eps.
			f := max(float32(math.Abs(float64(y))), mx)
			if (mx-y)/f > float32(2*eps) {
				masked[i] = neg
			}
		}
		softmax(masked, false, 0)
		return best, masked[best]
	}
	e1, w1 := pick(lg)
	rest := slices.Clone(lg)
	rest[e1] = neg
	e2, w2 := pick(rest)
	return []int{e1, e2}, []float32{w1, w2}
}

// moe is a mixture-of-experts block on T rows: routed experts (their outputs, or for
// WeightInput their inputs, weighted), plus the shared experts (gated by sigmoid when the
// block has a shared gate).
func (m *Model) moe(dst, x []float32, T int, w *moeW, tpu bool) error {
	e := w.spec
	H := m.cfg.Hidden
	logits := make([]float32, T*e.Experts)
	if err := linear(logits, x, T, w.router.w, w.router.b, tpu); err != nil {
		return err
	}
	if c := e.RouterSoftcap; c > 0 {
		for i, y := range logits {
			logits[i] = softcap(y, float32(c))
		}
	}
	rs := routes(logits, T, w)
	act, err := expertAct(e.Act)
	if err != nil {
		return err
	}
	if err := runExperts(dst, x, H, T, w, rs, act, tpu); err != nil {
		return err
	}
	if w.bias != nil {
		for t := range T {
			add(dst[t*H:(t+1)*H], w.bias)
		}
	}
	if w.shared == nil {
		return nil
	}
	sh := make([]float32, T*H)
	if err := dense(sh, x, T, w.shared, tpu); err != nil {
		return fmt.Errorf("shared experts: %w", err)
	}
	if w.sharedGate == nil {
		add(dst[:T*H], sh)
		if e.SharedAverage {
			for i := range dst[:T*H] {
				dst[i] /= 2
			}
		}
		return nil
	}
	g := make([]float32, T)
	if err := linear(g, x, T, w.sharedGate.w, w.sharedGate.b, tpu); err != nil {
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

func expertAct(a Act) (func(float32) float32, error) {
	if a == "gpt_oss_swiglu" {
		return nil, nil
	}
	f, ok := activations[a]
	if !ok || f == nil {
		return nil, fmt.Errorf("expert activation %q is not supported", a)
	}
	return f, nil
}

// runExperts gathers each expert's tokens, runs the expert on them and adds its weighted
// output to dst, experts in index order as transformers' loop does.
func runExperts(dst, x []float32, H, T int, w *moeW, rs []route, act func(float32) float32, tpu bool) error {
	e := w.spec
	clear(dst[:T*H])
	type hit struct {
		token int
		w     float32
	}
	byExpert := make([][]hit, len(w.experts))
	for t, r := range rs {
		for i, x := range r.experts {
			byExpert[x] = append(byExpert[x], hit{t, r.weights[i]})
		}
	}
	for xi, hits := range byExpert {
		if len(hits) == 0 {
			continue
		}
		ex := w.experts[xi]
		n := len(hits)
		xs := make([]float32, n*H)
		for i, h := range hits {
			row := xs[i*H : (i+1)*H]
			copy(row, x[h.token*H:(h.token+1)*H])
			if e.WeightInput {
				for j := range row {
					row[j] *= h.w
				}
			}
		}
		out := make([]float32, n*H)
		var err error
		if ex.gateUp != nil {
			I := e.Inter
			gu := make([]float32, n*2*I)
			if err = linear(gu, xs, n, ex.gateUp, ex.gateUpB, tpu); err == nil {
				h := make([]float32, n*I)
				gated(h, gu, e.Act, act)
				err = linear(out, h, n, ex.down, ex.downB, tpu)
			}
		} else {
			err = glu(out, xs, n, ex.gate, ex.up, ex.down, nil, nil, ex.downB, act, nil, tpu)
		}
		if err != nil {
			return fmt.Errorf("expert %d: %w", xi, err)
		}
		for i, h := range hits {
			d := dst[h.token*H : (h.token+1)*H]
			for j, v := range out[i*H : (i+1)*H] {
				if e.WeightInput {
					d[j] += v
				} else {
					d[j] += v * h.w
				}
			}
		}
	}
	return nil
}
