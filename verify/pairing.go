package verify

import (
	"fmt"
	"math"
	"slices"

	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/statedict"
)

// pairing is an expected tensor and the destination tensor it was paired with.
type pairing struct {
	name, source string
	e            *statedict.Tensor // what the conversion should have written
	d            *dstTensor
	// expected says how e's values were computed; swapped that the destination is the
	// streamed side of the comparison.
	expected string
	swapped  bool
	dtype    statedict.DType
	shape    []int64
	// final is the expected tensor as compared (cast or dequantized to the destination's
	// dtype when that was inferred).
	final *statedict.Tensor
	// piece and offsets describe a rank's copy of a piece of the tensor (per-device
	// outputs): its global position.
	piece   string
	offsets []int64
}

// floatCastable lists the dtypes a --dtype cast converts between (remap's castable).
var floatCastable = []statedict.DType{statedict.Float16, statedict.BFloat16, statedict.Float32, statedict.Float64}

// dequantTargets are the dtypes a quantized group dequantizes to.
var dequantTargets = []statedict.DType{statedict.BFloat16, statedict.Float16, statedict.Float32}

// plan decides how the pair is compared: the expected tensor's dtype checked (or, when the
// conversion's dtypes were not recorded, the destination's cast or dequantization
// reproduced), shapes checked, and which side is streamed. It returns the comparison (nil
// for a tensor without elements) or the problem that makes comparing pointless.
func (p *pairing) plan(conv *Conversion) (*comparison, *ParityProblem) {
	e, d := p.e, p.d.t
	prob := func(kind string, want, got any) *ParityProblem {
		return &ParityProblem{Tensor: p.name, Source: p.source, Kind: kind, Want: want, Got: got}
	}
	o := originOf(e)
	p.expected = "exact"
	switch {
	case p.d.group != nil:
		g := p.d.group
		if !slices.Contains(dequantTargets, e.DType) {
			return nil, prob("dtype", e.DTypeName(), fmt.Sprintf("%s-quantized %s", g.Scheme, g.CodeDType()))
		}
		t, err := g.Dequantize(e.DType)
		if err != nil {
			return nil, prob("uncomparable", "", err.Error())
		}
		d = t
		p.expected = fmt.Sprintf("destination dequantized %s → %s", g.Scheme, e.DType)
	case o != nil && o.group != nil:
		if e.DType != d.DType {
			if conv.Recorded || !slices.Contains(dequantTargets, d.DType) {
				return nil, prob("dtype", e.DTypeName(), d.DTypeName())
			}
			t, err := o.group.Dequantize(d.DType)
			if err != nil {
				return nil, prob("uncomparable", "", err.Error())
			}
			e = t
		}
		p.expected = fmt.Sprintf("dequantized %s → %s", o.group.Scheme, e.DType)
	case e.DTypeName() != d.DTypeName():
		if conv.Recorded || e.Foreign != "" || d.Foreign != "" || !slices.Contains(floatCastable, e.DType) || !slices.Contains(floatCastable, d.DType) {
			return nil, prob("dtype", e.DTypeName(), d.DTypeName())
		}
		t, err := castTo(e, d.DType)
		if err != nil {
			return nil, prob("uncomparable", "", err.Error())
		}
		e = t
	}
	if p.expected == "exact" && o != nil && o.src != nil && o.src.DType != e.DType {
		p.expected = fmt.Sprintf("cast %s → %s", o.src.DType, e.DType)
	}
	if !slices.Equal(e.Shape, d.Shape) {
		return nil, prob("shape", shapeOf(e.Shape), shapeOf(d.Shape))
	}
	p.dtype, p.shape, p.final = e.DType, e.Shape, e
	return p.comparison(e, d)
}

// comparison sets up the element-by-element comparison of e (expected) with d.
func (p *pairing) comparison(e, d *statedict.Tensor) (*comparison, *ParityProblem) {
	prob := func(kind, want, got string) *ParityProblem {
		return &ParityProblem{Tensor: p.name, Source: p.source, Piece: p.piece, Kind: kind, Want: want, Got: got}
	}
	if e.NumEl() == 0 {
		return nil, nil
	}
	for _, t := range []*statedict.Tensor{e, d} {
		if err := t.Validate(); err != nil {
			return nil, prob("uncomparable", "", err.Error())
		}
	}
	c := &comparison{stream: e, other: d, es: e.DType.Size()}
	switch {
	case randomAccess(d):
	case randomAccess(e):
		c.stream, c.other, p.swapped = d, e, true
	default:
		return nil, prob("uncomparable", "", "neither side can be read at random offsets (byte-swapped or lazily negated views on both sides)")
	}
	return c, nil
}

// valueProblem describes a comparison whose elements differ.
func (p *pairing) valueProblem(c *comparison) ParityProblem {
	want, got := c.firstStream, c.firstOther
	if p.swapped {
		want, got = got, want
	}
	index := unravel(c.first, p.shape)
	for i := range p.offsets {
		index[i] += p.offsets[i]
	}
	pr := ParityProblem{Tensor: p.name, Source: p.source, Piece: p.piece, Kind: "value", Expected: p.expected,
		Want: formatElement(p.dtype, want), Got: formatElement(p.dtype, got),
		Index: index, Flat: c.first, Differ: c.differ, Elements: c.stream.NumEl(), MaxAbsDiff: c.maxAbs}
	if math.IsNaN(c.maxAbs) || math.IsInf(c.maxAbs, 0) {
		pr.MaxAbsDiff, pr.NonFinite = 0, true
	}
	return pr
}

// castTo is t's view of its storage cast to dtype to as torch's Tensor.to casts.
func castTo(t *statedict.Tensor, to statedict.DType) (*statedict.Tensor, error) {
	st, err := codec.CastStorage(t.Storage, t.DType, to)
	if err != nil {
		return nil, err
	}
	nt := *t
	nt.Storage, nt.DType = st, to
	return &nt, nil
}
