package verify

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/statedict"
)

// fp8Formats maps the float8 dtypes to their codecs.
var fp8Formats = map[statedict.DType]codec.Format{
	statedict.Float8E4M3FN: codec.E4M3FN, statedict.Float8E5M2: codec.E5M2, statedict.Float8E4M3FNUZ: codec.E4M3FNUZ,
	statedict.Float8E5M2FNUZ: codec.E5M2FNUZ, statedict.Float8E8M0FNU: codec.E8M0FNU,
}

// floats decodes one element's bytes of dtype d to its value(s) — two for a complex
// number or a packed FP4 pair — or nil when d has no numeric reading.
func floats(d statedict.DType, b []byte) []float64 {
	le := binary.LittleEndian
	switch d {
	case statedict.Float32:
		return []float64{float64(math.Float32frombits(le.Uint32(b)))}
	case statedict.Float64:
		return []float64{math.Float64frombits(le.Uint64(b))}
	case statedict.BFloat16:
		return []float64{float64(codec.BF16ToFloat32(le.Uint16(b)))}
	case statedict.Float16:
		return []float64{float64(codec.F16ToFloat32(le.Uint16(b)))}
	case statedict.Float4E2M1FNx2:
		lo, hi := codec.FP4x2ToFloat32(b[0])
		return []float64{float64(lo), float64(hi)}
	case statedict.Complex64:
		return []float64{float64(math.Float32frombits(le.Uint32(b))), float64(math.Float32frombits(le.Uint32(b[4:])))}
	case statedict.Complex128:
		return []float64{math.Float64frombits(le.Uint64(b)), math.Float64frombits(le.Uint64(b[8:]))}
	case statedict.Complex32:
		return []float64{float64(codec.F16ToFloat32(le.Uint16(b))), float64(codec.F16ToFloat32(le.Uint16(b[2:])))}
	}
	if f, ok := fp8Formats[d]; ok {
		return []float64{float64(f.Decode(b[0]))}
	}
	switch d.Kind() {
	case statedict.KindBool, statedict.KindUnsigned, statedict.KindSigned:
		v, _ := integer(d, b)
		return []float64{float64(v)}
	}
	return nil
}

// integer reads one integer element (two's complement for signed kinds).
func integer(d statedict.DType, b []byte) (int64, bool) {
	var u uint64
	for i := len(b) - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	if d.Kind() == statedict.KindSigned && len(b) < 8 {
		shift := 64 - 8*uint(len(b))
		return int64(u<<shift) >> shift, true
	}
	return int64(u), d.Kind() != statedict.KindUnsigned || u <= math.MaxInt64
}

// absDiff is the largest absolute difference between the values of two elements of a
// floating or complex dtype (NaN when one is NaN and the other not); 0 for other dtypes.
func absDiff(d statedict.DType, x, y []byte) float64 {
	k := d.Kind()
	if k != statedict.KindFloat && k != statedict.KindComplex {
		return 0
	}
	a, b := floats(d, x), floats(d, y)
	var m float64
	for i := range a {
		if math.IsNaN(a[i]) != math.IsNaN(b[i]) {
			return math.NaN()
		}
		if a[i] == b[i] || math.IsNaN(a[i]) {
			continue
		}
		m = max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

// formatElement shows one element's value and, for non-byte floats, its bits:
// "0.01233 (0x3c4a)".
func formatElement(d statedict.DType, b []byte) string {
	if d.Kind() == statedict.KindBool {
		return strconv.FormatBool(b[0] != 0)
	}
	if d.Kind() == statedict.KindSigned || d.Kind() == statedict.KindUnsigned {
		if v, ok := integer(d, b); ok {
			return strconv.FormatInt(v, 10)
		}
		return strconv.FormatUint(binary.LittleEndian.Uint64(b), 10)
	}
	v := floats(d, b)
	hex := fmt.Sprintf("0x%x", reverse(b))
	if v == nil {
		return hex
	}
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	s := strings.Join(parts, ", ")
	if len(v) > 1 {
		s = "(" + s + ")"
	}
	return s + " (" + hex + ")"
}

// reverse returns little-endian bytes most significant first, as a number is written.
func reverse(b []byte) []byte {
	r := make([]byte, len(b))
	for i, x := range b {
		r[len(b)-1-i] = x
	}
	return r
}

// unravel turns a flat row-major element index into a multi-dimensional one.
func unravel(flat int64, shape []int64) []int64 {
	idx := make([]int64, len(shape))
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] > 0 {
			idx[i] = flat % shape[i]
			flat /= shape[i]
		}
	}
	return idx
}
