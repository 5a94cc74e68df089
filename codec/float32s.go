package codec

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Float32s decodes a tensor's logical value to float32, element by element in row-major
// order, as torch's t.float() gives it: exactly for every floating dtype narrower than
// float64 (bfloat16, float16, the float8 formats, packed FP4), float64 rounded to nearest,
// integers and bool converted; float4_e2m1fn_x2 gives two values per element (its bytes'
// low nibble first), as unpacking it does. Quantized codes are decoded as stored, without their scales
// (quant.Group.Dequantize applies those). Complex and quantized torch dtypes are refused.
func Float32s(t *statedict.Tensor) ([]float32, error) {
	if t.Foreign != "" {
		return nil, fmt.Errorf("%w: decoding %s values", ckpterr.ErrUnsupported, t.Foreign)
	}
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	n := t.NumEl()
	if t.DType == statedict.Float4E2M1FNx2 {
		n *= 2 // two values per element
	}
	out := make([]float32, n)
	le := binary.LittleEndian
	switch d := t.DType; d {
	case statedict.Float32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
	case statedict.Float64:
		DecodeF64(out, b)
	case statedict.BFloat16:
		DecodeBF16(out, b)
	case statedict.Float16:
		DecodeF16(out, b)
	case statedict.Float8E4M3FN, statedict.Float8E5M2, statedict.Float8E4M3FNUZ, statedict.Float8E5M2FNUZ, statedict.Float8E8M0FNU:
		DecodeFP8(out, b, fp8Formats[d])
	case statedict.Float4E2M1FNx2:
		DecodeFP4x2(out, b)
	case statedict.Bool, statedict.Uint8:
		for i := range out {
			out[i] = float32(b[i])
		}
	case statedict.Int8:
		for i := range out {
			out[i] = float32(int8(b[i]))
		}
	case statedict.Int16:
		for i := range out {
			out[i] = float32(int16(le.Uint16(b[2*i:])))
		}
	case statedict.Uint16:
		for i := range out {
			out[i] = float32(le.Uint16(b[2*i:]))
		}
	case statedict.Int32:
		for i := range out {
			out[i] = float32(int32(le.Uint32(b[4*i:])))
		}
	case statedict.Uint32:
		for i := range out {
			out[i] = float32(le.Uint32(b[4*i:]))
		}
	case statedict.Int64:
		for i := range out {
			out[i] = float32(int64(le.Uint64(b[8*i:])))
		}
	case statedict.Uint64:
		for i := range out {
			out[i] = float32(le.Uint64(b[8*i:]))
		}
	default:
		return nil, fmt.Errorf("%w: decoding %s values to float32", ckpterr.ErrUnsupported, d)
	}
	return out, nil
}

// fp8Formats maps the float8 dtypes to their formats.
var fp8Formats = map[statedict.DType]Format{
	statedict.Float8E4M3FN: E4M3FN, statedict.Float8E5M2: E5M2, statedict.Float8E4M3FNUZ: E4M3FNUZ,
	statedict.Float8E5M2FNUZ: E5M2FNUZ, statedict.Float8E8M0FNU: E8M0FNU,
}
