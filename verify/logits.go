package verify

import (
	"fmt"
	"math"
	"strings"
)

// Thresholds decide whether a converted model's logits agree with the original's. Every
// position must pass each of them. The defaults (DefaultThresholds) sit between what correct
// conversions measure and what deliberately broken ones do on the tiny random models of
// testdata/forward (see testdata/verify/README.md for the table and how to re-measure).
type Thresholds struct {
	// MaxKL bounds the KL divergence KL(P_ref ‖ P_got) of the next-token distributions, in
	// nats, at every position.
	MaxKL float64 `json:"max_kl"`
	// MinCosine bounds the cosine similarity of the logit vectors from below.
	MinCosine float64 `json:"min_cosine"`
	// MinTop1 is the fraction of positions whose most likely next token must agree. A
	// position whose two candidates are a near tie in the reference — apart by no more than
	// the logit error MaxAbsRel allows — counts as agreeing: rounding may flip such ties.
	MinTop1 float64 `json:"min_top1"`
	// MaxAbsRel bounds the largest absolute logit difference at a position relative to the
	// spread (max − min) of the reference logits there.
	MaxAbsRel float64 `json:"max_abs_rel"`
}

// DefaultThresholds are the pass/fail thresholds of `ckpt verify --forward`.
func DefaultThresholds() Thresholds {
	return Thresholds{MaxKL: 2e-3, MinCosine: 0.996, MinTop1: 0.9, MaxAbsRel: 0.05}
}

// Position is the comparison of one position's logits.
type Position struct {
	Token int `json:"token"`
	// MaxAbs and MeanAbs are the largest and mean absolute logit differences; MaxAbsRel is
	// MaxAbs relative to the spread of the reference logits.
	MaxAbs    float64 `json:"max_abs"`
	MeanAbs   float64 `json:"mean_abs"`
	MaxAbsRel float64 `json:"max_abs_rel"`
	Cosine    float64 `json:"cosine"`
	// KL is KL(P_ref ‖ P_got) in nats.
	KL float64 `json:"kl"`
	// Top1Ref and Top1Got are the most likely next tokens; Top1Margin is how far below
	// Top1Ref's the reference puts Top1Got's logit (0 when they agree).
	Top1Ref    int     `json:"top1_ref"`
	Top1Got    int     `json:"top1_got"`
	Top1Margin float64 `json:"top1_margin"`
	// Spread is max − min of the reference logits.
	Spread float64 `json:"spread"`
}

// LogitsReport compares two runs' logits position by position.
type LogitsReport struct {
	Tokens    []int      `json:"tokens"`
	Vocab     int        `json:"vocab"`
	Positions []Position `json:"positions"`
	// The worst position of each measure, and the top-1 agreement.
	MaxAbs    float64 `json:"max_abs"`
	MeanAbs   float64 `json:"mean_abs"`
	MaxAbsRel float64 `json:"max_abs_rel"`
	MinCosine float64 `json:"min_cosine"`
	MaxKL     float64 `json:"max_kl"`
	// Top1 is the fraction of positions whose most likely next token agrees, near ties
	// counted as agreeing (Thresholds.MinTop1); Top1Exact counts exact agreement only.
	Top1       float64    `json:"top1"`
	Top1Exact  float64    `json:"top1_exact"`
	Thresholds Thresholds `json:"thresholds"`
	// Failed lists the thresholds not met, with the worst value ("kl 0.31 > 0.01 at
	// position 4").
	Failed []string `json:"failed"`
}

// OK reports whether every threshold holds.
func (r *LogitsReport) OK() bool { return len(r.Failed) == 0 }

// CompareLogits compares got with the reference ref, both [T, vocab] row-major, for the
// token ids tokens, against th.
func CompareLogits(tokens []int, vocab int, ref, got []float32, th Thresholds) (*LogitsReport, error) {
	T := len(tokens)
	if len(ref) != T*vocab || len(got) != T*vocab {
		return nil, fmt.Errorf("logits of %d and %d values for %d tokens × vocab %d", len(ref), len(got), T, vocab)
	}
	r := &LogitsReport{Tokens: tokens, Vocab: vocab, Thresholds: th, MinCosine: 1, Failed: []string{}}
	agree, exact := 0, 0
	worst := map[string]int{}
	for t := range T {
		p := comparePosition(ref[t*vocab:(t+1)*vocab], got[t*vocab:(t+1)*vocab])
		p.Token = tokens[t]
		r.Positions = append(r.Positions, p)
		if p.Top1Ref == p.Top1Got {
			exact++
		}
		if p.Top1Margin <= th.MaxAbsRel*p.Spread {
			agree++
		}
		r.MeanAbs += p.MeanAbs / float64(T)
		if t == 0 || worse(p.MaxAbs, r.MaxAbs) {
			r.MaxAbs = p.MaxAbs
		}
		if t == 0 || worse(p.MaxAbsRel, r.MaxAbsRel) {
			r.MaxAbsRel, worst["abs"] = p.MaxAbsRel, t
		}
		if t == 0 || worse(-p.Cosine, -r.MinCosine) {
			r.MinCosine, worst["cos"] = p.Cosine, t
		}
		if t == 0 || worse(p.KL, r.MaxKL) {
			r.MaxKL, worst["kl"] = p.KL, t
		}
	}
	r.Top1, r.Top1Exact = float64(agree)/float64(T), float64(exact)/float64(T)
	if !(r.MaxKL <= th.MaxKL) {
		r.Failed = append(r.Failed, fmt.Sprintf("kl %.3g > %g at position %d", r.MaxKL, th.MaxKL, worst["kl"]))
	}
	if !(r.MinCosine >= th.MinCosine) {
		r.Failed = append(r.Failed, fmt.Sprintf("cosine %.6g < %g at position %d", r.MinCosine, th.MinCosine, worst["cos"]))
	}
	if !(r.Top1 >= th.MinTop1) {
		r.Failed = append(r.Failed, fmt.Sprintf("top-1 agreement %d/%d = %.3g < %g (near ties counted as agreeing)", agree, T, r.Top1, th.MinTop1))
	}
	if !(r.MaxAbsRel <= th.MaxAbsRel) {
		r.Failed = append(r.Failed, fmt.Sprintf("max abs error %.3g (%.3g of the logits' spread) > %g at position %d",
			r.Positions[worst["abs"]].MaxAbs, r.MaxAbsRel, th.MaxAbsRel, worst["abs"]))
	}
	r.sanitize()
	return r, nil
}

// worse reports whether a exceeds b, a NaN counting as the worst.
func worse(a, b float64) bool { return a > b || math.IsNaN(a) && !math.IsNaN(b) }

// comparePosition measures one position's logits.
func comparePosition(ref, got []float32) Position {
	p := Position{}
	var dot, nr, ng, sum float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range ref {
		a, b := float64(ref[i]), float64(got[i])
		d := math.Abs(a - b)
		if worse(d, p.MaxAbs) {
			p.MaxAbs = d
		}
		sum += d
		dot += a * b
		nr += a * a
		ng += b * b
		lo, hi = min(lo, a), max(hi, a)
		if a > float64(ref[p.Top1Ref]) {
			p.Top1Ref = i
		}
		if b > float64(got[p.Top1Got]) || math.IsNaN(float64(got[p.Top1Got])) {
			p.Top1Got = i
		}
	}
	p.MeanAbs = sum / float64(len(ref))
	p.Spread = hi - lo
	p.MaxAbsRel = p.MaxAbs / max(p.Spread, math.SmallestNonzeroFloat64)
	p.Top1Margin = float64(ref[p.Top1Ref]) - float64(ref[p.Top1Got])
	p.Cosine = dot / math.Sqrt(nr*ng)
	if nr == 0 && ng == 0 {
		p.Cosine = 1
	}
	p.KL = kl(ref, got)
	return p
}

// kl is KL(softmax(ref) ‖ softmax(got)) in nats, computed in float64 from log-softmaxes.
func kl(ref, got []float32) float64 {
	lr, lg := logSumExp(ref), logSumExp(got)
	var s float64
	for i := range ref {
		a := float64(ref[i]) - lr
		b := float64(got[i]) - lg
		if pa := math.Exp(a); pa > 0 {
			s += pa * (a - b)
		}
	}
	return max(s, 0) // rounding can leave −1e-17 for equal distributions
}

func logSumExp(x []float32) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	return m + math.Log(s)
}

// sanitize replaces non-finite measures (NaN logits) by the worst finite ones JSON can
// hold, after the verdict was taken.
func (r *LogitsReport) sanitize() {
	fix := func(x *float64, worst float64) {
		if math.IsNaN(*x) || math.IsInf(*x, 0) {
			*x = worst
		}
	}
	for i := range r.Positions {
		p := &r.Positions[i]
		fix(&p.MaxAbs, math.MaxFloat64)
		fix(&p.MeanAbs, math.MaxFloat64)
		fix(&p.MaxAbsRel, math.MaxFloat64)
		fix(&p.KL, math.MaxFloat64)
		fix(&p.Cosine, -1)
		fix(&p.Top1Margin, math.MaxFloat64)
		fix(&p.Spread, 0)
	}
	fix(&r.MaxAbs, math.MaxFloat64)
	fix(&r.MeanAbs, math.MaxFloat64)
	fix(&r.MaxAbsRel, math.MaxFloat64)
	fix(&r.MaxKL, math.MaxFloat64)
	fix(&r.MinCosine, -1)
}

// String is the report's verdict line.
func (r *LogitsReport) String() string {
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL: " + strings.Join(r.Failed, "; ")
	}
	return fmt.Sprintf("%d positions: max abs %.3g (%.3g of spread), mean abs %.3g, min cosine %.6f, top-1 %.3g, max KL %.3g — %s",
		len(r.Positions), r.MaxAbs, r.MaxAbsRel, r.MeanAbs, r.MinCosine, r.Top1, r.MaxKL, verdict)
}
