package statedict

import (
	"math"
	"math/big"
)

// JSON returns v as typed JSON data — numbers as numbers, booleans as booleans, None as
// null, lists and tuples as arrays, dicts as objects (keys as KeyString) — for the --json
// outputs, which promise values, not Python reprs. What JSON cannot hold is spelled out:
// non-finite floats as "nan", "inf", "-inf"; ints beyond 2^53 as decimal strings (JSON
// readers lose digits past it); complex numbers as {"real", "imag"}; tensors as {"dtype",
// "shape"}; bytes by length; other objects by class. Nesting is cut at depth 16.
func JSON(v Value) any { return jsonValue(v, 0) }

func jsonValue(v Value, depth int) any {
	if depth > 16 {
		return "…"
	}
	switch x := v.(type) {
	case nil, bool, string:
		return x
	case int64:
		if x > 1<<53 || x < -(1<<53) {
			return KeyString(x)
		}
		return x
	case *big.Int:
		return x.String()
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return PyFloat(x)
		}
		return x
	case complex128:
		return map[string]any{"real": jsonValue(real(x), depth+1), "imag": jsonValue(imag(x), depth+1)}
	case []byte:
		return map[string]any{"bytes": len(x)}
	case DType:
		return "torch." + x.String()
	case *List:
		out := make([]any, len(x.Items))
		for i, it := range x.Items {
			out[i] = jsonValue(it, depth+1)
		}
		return out
	case Tuple:
		out := make([]any, len(x))
		for i, it := range x {
			out[i] = jsonValue(it, depth+1)
		}
		return out
	case *Dict:
		out := make(map[string]any, x.Len())
		for _, e := range x.Entries() {
			out[KeyString(e.Key)] = jsonValue(e.Value, depth+1)
		}
		return out
	case *Tensor:
		return map[string]any{"dtype": x.DTypeName(), "shape": x.Shape}
	case *Object:
		return map[string]any{"object": x.Class}
	case *NDArray:
		return map[string]any{"ndarray": x.DType, "shape": x.Shape}
	}
	return nil
}
