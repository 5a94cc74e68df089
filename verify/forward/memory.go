package forward

import (
	"fmt"
)

// DefaultMemoryLimit bounds what a forward pass allocates for activations (and logits)
// when Options.MemoryLimit is 0: half the machine's memory, or 8 GiB where that is unknown.
var DefaultMemoryLimit = func() int64 {
	if t := totalMemory(); t > 0 {
		return t / 2
	}
	return 8 << 30
}()

// activationBytes estimates the most memory a run of T positions holds at once besides the
// weights: the residual stream and its normalized copies, one layer's queries, keys, values,
// transposed values and context, the rope tables, and the blocks of rows the products
// work on (bounded independently of T), with logits [T, vocab] when logits is set.
func (m *Model) activationBytes(T int, logits bool) int64 {
	c := m.cfg
	t := int64(T)
	perToken := int64(5 * c.Hidden) // h, x, out, and a parallel block's x2 and out2
	var attn int64
	for _, b := range c.Blocks {
		a := b.Attn
		if a == nil { // a state-space mixer works a block of positions at a time
			continue
		}
		dv := int64(a.VDim)
		if dv == 0 {
			dv = int64(a.HeadDim)
		}
		var n int64
		if a.MLA != nil {
			qk := int64(a.MLA.NopeDim + a.MLA.RopeDim)
			n = int64(a.Heads)*(2*qk+int64(a.MLA.NopeDim)+3*dv) + int64(a.MLA.KVLoraRank)*2 + int64(a.MLA.QLoraRank) + int64(a.MLA.RopeDim)
		} else {
			n = int64(a.Heads)*int64(a.HeadDim) + int64(a.KVHeads)*(int64(a.HeadDim)+2*dv) + int64(a.Heads)*dv
		}
		attn = max(attn, n)
		if r := a.Rope; r != nil {
			perToken += int64(r.Rope.rotaryDim) // cos and sin of each rope (an upper bound)
		}
	}
	perToken += attn
	if m.embed != nil && m.embed.cols != c.Hidden {
		perToken += int64(m.embed.cols)
	}
	if logits {
		perToken += int64(c.Vocab)
	}
	const blocks = 256 << 20 // row blocks, score blocks and per-worker scratch
	return 4*perToken*t + blocks
}

// fits refuses, before anything is allocated, a run whose activations would exceed the
// memory limit.
func (m *Model) fits(T int, logits bool) error {
	limit := m.opts.MemoryLimit
	if limit == 0 {
		limit = DefaultMemoryLimit
	}
	need := m.activationBytes(T, logits)
	if limit > 0 && need > limit {
		what := "activations"
		if logits {
			what = "activations and logits"
		}
		return fmt.Errorf("forward: %d tokens need about %.1f GiB of %s, more than the %.1f GiB limit (Options.MemoryLimit); run fewer tokens",
			T, float64(need)/(1<<30), what, float64(limit)/(1<<30))
	}
	return nil
}
