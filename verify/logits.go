package verify

import (
	"fmt"
	"math"
	"strings"
)

// Thresholds decide whether a converted model's logits agree with the original's.
//
// A position agrees when its logits are within MaxKL, MinCosine and MaxAbsRel of a reference
// and its most likely next token is the reference's (or a near tie of it: two tokens the
// reference scores closer than the logit error MaxAbsRel allows, which rounding may swap).
// The reference is the source model run in float32; a position that is not within the
// thresholds of it but is within those of the source run as a TPU runs it also agrees — the
// TPU's arithmetic moved it, not the conversion (a near tie in a mixture of experts' routing
// flips with bfloat16 rounding, and the positions after it follow). The logits agree when at
// least MinAgree of the positions do.
//
// The defaults (DefaultThresholds) sit between what correct conversions measure and what
// deliberately broken ones do on the tiny random models of testdata/forward (see
// testdata/verify/README.md for the table and how to re-measure).
type Thresholds struct {
	// MaxKL bounds the KL divergence KL(P_ref ‖ P_got) of the next-token distributions, in
	// nats.
	MaxKL float64 `json:"max_kl"`
	// MinCosine bounds the cosine similarity of the logit vectors from below.
	MinCosine float64 `json:"min_cosine"`
	// MaxAbsRel bounds the largest absolute logit difference relative to the spread
	// (max − min) of the reference logits.
	MaxAbsRel float64 `json:"max_abs_rel"`
	// MinAgree is the fraction of positions that must agree.
	MinAgree float64 `json:"min_agree"`
}

// DefaultThresholds are the pass/fail thresholds of `ckpt verify --forward`.
func DefaultThresholds() Thresholds {
	return Thresholds{MaxKL: 2e-3, MinCosine: 0.997, MaxAbsRel: 0.05, MinAgree: 0.9}
}

// Distance measures one position's logits against a reference's.
type Distance struct {
	// MaxAbs and MeanAbs are the largest and mean absolute logit differences; MaxAbsRel is
	// MaxAbs relative to Spread, the max − min of the reference logits.
	MaxAbs    float64 `json:"max_abs"`
	MeanAbs   float64 `json:"mean_abs"`
	MaxAbsRel float64 `json:"max_abs_rel"`
	Spread    float64 `json:"spread"`
	Cosine    float64 `json:"cosine"`
	// KL is KL(P_ref ‖ P_got) in nats.
	KL float64 `json:"kl"`
	// Top1Ref and Top1Got are the most likely next tokens; Top1Margin is how far below
	// Top1Ref's the reference scores Top1Got (0 when they agree).
	Top1Ref    int     `json:"top1_ref"`
	Top1Got    int     `json:"top1_got"`
	Top1Margin float64 `json:"top1_margin"`
	// Outside lists the thresholds the position is not within.
	Outside []string `json:"outside,omitempty"`
}

// Position is the comparison of one position's logits: against the float32 source (the
// embedded Distance) and against the source run as a TPU runs it.
type Position struct {
	Token int `json:"token"`
	Distance
	SourceTPU *Distance `json:"source_tpu,omitempty"`
	// Agrees says the position is within the thresholds of the float32 source, or else of
	// the source on a TPU (ByTPU).
	Agrees bool `json:"agrees"`
	ByTPU  bool `json:"by_tpu,omitempty"`
}

// LogitsReport compares the converted model's logits with the source's, position by
// position.
type LogitsReport struct {
	Tokens    []int      `json:"tokens"`
	Vocab     int        `json:"vocab"`
	Positions []Position `json:"positions"`
	// The worst position of each measure against the float32 source.
	MaxAbs    float64 `json:"max_abs"`
	MeanAbs   float64 `json:"mean_abs"`
	MaxAbsRel float64 `json:"max_abs_rel"`
	MinCosine float64 `json:"min_cosine"`
	MaxKL     float64 `json:"max_kl"`
	// Top1 is the fraction of positions whose most likely next token is the float32
	// source's, near ties counted as agreeing; Top1Exact counts exact agreement only.
	Top1      float64 `json:"top1"`
	Top1Exact float64 `json:"top1_exact"`
	// Agree is the fraction of positions that agree; ByTPU counts those that agree with the
	// source on a TPU only.
	Agree float64 `json:"agree"`
	ByTPU int     `json:"by_tpu"`
	// Drift is the largest KL divergence between the source in float32 and the source on
	// a TPU: how far the TPU's arithmetic alone moves the logits (0 without that run).
	Drift      float64    `json:"drift_kl"`
	Thresholds Thresholds `json:"thresholds"`
	// Failed says why the logits do not agree (empty when they do): how many positions
	// disagree, and the first of them.
	Failed []string `json:"failed"`
}

// OK reports whether the logits agree.
func (r *LogitsReport) OK() bool { return len(r.Failed) == 0 }

// CompareLogits compares got, the converted model's logits, with ref, the source's in
// float32, and refTPU, the source's as a TPU computes them (nil: ref only), all [T, vocab]
// row-major, for the token ids tokens, against th.
func CompareLogits(tokens []int, vocab int, ref, refTPU, got []float32, th Thresholds) (*LogitsReport, error) {
	T := len(tokens)
	if T == 0 || len(ref) != T*vocab || len(got) != T*vocab || refTPU != nil && len(refTPU) != T*vocab {
		return nil, fmt.Errorf("logits of %d, %d and %d values for %d tokens × vocab %d", len(ref), len(refTPU), len(got), T, vocab)
	}
	c := newLogitsComparer(tokens, vocab, th)
	row := func(x []float32, t int) []float32 {
		if x == nil {
			return nil
		}
		return x[t*vocab : (t+1)*vocab]
	}
	for t := range T {
		c.add(row(ref, t), row(refTPU, t), row(got, t))
	}
	return c.finish(), nil
}

// logitsComparer builds a LogitsReport one position at a time, so that logits need never be
// held for every position at once.
type logitsComparer struct {
	r                  *LogitsReport
	th                 Thresholds
	top1, exact, agree int
}

func newLogitsComparer(tokens []int, vocab int, th Thresholds) *logitsComparer {
	return &logitsComparer{r: &LogitsReport{Tokens: tokens, Vocab: vocab, Thresholds: th, MinCosine: 1, Failed: []string{}}, th: th}
}

// add compares the next position's logits (refTPU nil: none).
func (c *logitsComparer) add(ref, refTPU, got []float32) {
	r, th := c.r, c.th
	t := len(r.Positions)
	T := len(r.Tokens)
	p := Position{Token: r.Tokens[t], Distance: distance(ref, got, th)}
	if p.Top1Ref == p.Top1Got {
		c.exact++
	}
	if p.Top1Margin <= th.MaxAbsRel*p.Spread {
		c.top1++
	}
	p.Agrees = len(p.Outside) == 0
	if refTPU != nil {
		d := distance(refTPU, got, th)
		p.SourceTPU = &d
		if !p.Agrees && len(d.Outside) == 0 {
			p.Agrees, p.ByTPU = true, true
			r.ByTPU++
		}
		r.Drift = max(r.Drift, kl(ref, refTPU))
	}
	if p.Agrees {
		c.agree++
	}
	r.Positions = append(r.Positions, p)
	r.MeanAbs += p.MeanAbs / float64(T)
	if t == 0 || worse(p.MaxAbs, r.MaxAbs) {
		r.MaxAbs = p.MaxAbs
	}
	if t == 0 || worse(p.MaxAbsRel, r.MaxAbsRel) {
		r.MaxAbsRel = p.MaxAbsRel
	}
	if t == 0 || worse(-p.Cosine, -r.MinCosine) {
		r.MinCosine = p.Cosine
	}
	if t == 0 || worse(p.KL, r.MaxKL) {
		r.MaxKL = p.KL
	}
}

// finish takes the verdict once every position is in.
func (c *logitsComparer) finish() *LogitsReport {
	r, th := c.r, c.th
	T := len(r.Positions)
	r.Top1, r.Top1Exact, r.Agree = float64(c.top1)/float64(T), float64(c.exact)/float64(T), float64(c.agree)/float64(T)
	if !(r.Agree >= th.MinAgree) {
		r.Failed = append(r.Failed, fmt.Sprintf("%d of %d positions disagree (at most %.3g%% may)", T-c.agree, T, 100*(1-th.MinAgree)))
		for i, p := range r.Positions {
			if !p.Agrees && len(r.Failed) <= 3 {
				r.Failed = append(r.Failed, fmt.Sprintf("position %d: %s", i, strings.Join(p.Outside, ", ")))
			}
		}
	}
	r.sanitize()
	return r
}

// worse reports whether a exceeds b, a NaN counting as the worst.
func worse(a, b float64) bool { return a > b || math.IsNaN(a) && !math.IsNaN(b) }

// distance measures got against the reference ref and lists the thresholds it is not
// within.
func distance(ref, got []float32, th Thresholds) Distance {
	p := Distance{}
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
	if !(p.KL <= th.MaxKL) {
		p.Outside = append(p.Outside, fmt.Sprintf("kl %.3g > %g", p.KL, th.MaxKL))
	}
	if !(p.Cosine >= th.MinCosine) {
		p.Outside = append(p.Outside, fmt.Sprintf("cosine %.6g < %g", p.Cosine, th.MinCosine))
	}
	if !(p.MaxAbsRel <= th.MaxAbsRel) {
		p.Outside = append(p.Outside, fmt.Sprintf("max abs error %.3g = %.3g of the logits' spread > %g", p.MaxAbs, p.MaxAbsRel, th.MaxAbsRel))
	}
	if !(p.Top1Margin <= th.MaxAbsRel*p.Spread) {
		p.Outside = append(p.Outside, fmt.Sprintf("top-1 token %d, the source's %d", p.Top1Got, p.Top1Ref))
	}
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
	if math.IsNaN(s) {
		return s
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
	fixD := func(d *Distance) {
		fix(&d.MaxAbs, math.MaxFloat64)
		fix(&d.MeanAbs, math.MaxFloat64)
		fix(&d.MaxAbsRel, math.MaxFloat64)
		fix(&d.KL, math.MaxFloat64)
		fix(&d.Cosine, -1)
		fix(&d.Top1Margin, math.MaxFloat64)
		fix(&d.Spread, 0)
	}
	for i := range r.Positions {
		fixD(&r.Positions[i].Distance)
		if r.Positions[i].SourceTPU != nil {
			fixD(r.Positions[i].SourceTPU)
		}
	}
	fix(&r.MaxAbs, math.MaxFloat64)
	fix(&r.MeanAbs, math.MaxFloat64)
	fix(&r.MaxAbsRel, math.MaxFloat64)
	fix(&r.MaxKL, math.MaxFloat64)
	fix(&r.MinCosine, -1)
	fix(&r.Drift, math.MaxFloat64)
}

// String is the report's summary and verdict.
func (r *LogitsReport) String() string {
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL: " + strings.Join(r.Failed, "; ")
	}
	by := ""
	if r.ByTPU > 0 {
		by = fmt.Sprintf(" (%d only with the source on a TPU: the TPU's arithmetic, max KL %.3g from float32, moved them)", r.ByTPU, r.Drift)
	}
	return fmt.Sprintf("%d positions, %.3g agree%s; against the float32 source: max abs %.3g (%.3g of spread), mean abs %.3g, min cosine %.6f, top-1 %.3g, max KL %.3g — %s",
		len(r.Positions), r.Agree, by, r.MaxAbs, r.MaxAbsRel, r.MeanAbs, r.MinCosine, r.Top1, r.MaxKL, verdict)
}
