package megatron

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"slices"

	"github.com/ckpt-dev/ckpt/statedict"
)

// maxCompared bounds the bytes of a tensor equalValue compares (RNG states, scalars,
// Transformer Engine extra state); larger tensors count as different.
const maxCompared = 1 << 20

// maxDepth bounds the nesting equalValue descends.
const maxDepth = 64

// equalValue reports whether two values of the ranks' trees are the same data: same types,
// same contents (floats bit for bit, tensors byte for byte up to maxCompared bytes).
func equalValue(a, b statedict.Value, depth int) (bool, error) {
	if depth > maxDepth {
		return false, nil
	}
	switch x := a.(type) {
	case nil:
		return b == nil, nil
	case bool, int64, string, statedict.DType:
		return a == b, nil
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y), nil
	case complex128:
		y, ok := b.(complex128)
		return ok && math.Float64bits(real(x)) == math.Float64bits(real(y)) && math.Float64bits(imag(x)) == math.Float64bits(imag(y)), nil
	case *big.Int:
		y, ok := b.(*big.Int)
		return ok && x.Cmp(y) == 0, nil
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y), nil
	case *statedict.Dict:
		y, ok := b.(*statedict.Dict)
		if !ok || x.Class != y.Class || x.Len() != y.Len() {
			return false, nil
		}
		if eq, err := equalValue(x.Attrs, y.Attrs, depth+1); !eq || err != nil {
			return false, err
		}
		ye := y.Entries()
		for i, e := range x.Entries() {
			if eq, err := equalValue(e.Key, ye[i].Key, depth+1); !eq || err != nil {
				return false, err
			}
			if eq, err := equalValue(e.Value, ye[i].Value, depth+1); !eq || err != nil {
				return false, err
			}
		}
		return true, nil
	case *statedict.List:
		y, ok := b.(*statedict.List)
		if !ok {
			return false, nil
		}
		return equalItems(x.Items, y.Items, depth)
	case statedict.Tuple:
		y, ok := b.(statedict.Tuple)
		if !ok {
			return false, nil
		}
		return equalItems(x, y, depth)
	case *statedict.Object:
		y, ok := b.(*statedict.Object)
		if !ok || x.Class != y.Class || x.Call != y.Call || (x.Kwargs == nil) != (y.Kwargs == nil) || (x.DictItems == nil) != (y.DictItems == nil) {
			return false, nil
		}
		if eq, err := equalItems(x.Args, y.Args, depth); !eq || err != nil {
			return false, err
		}
		if eq, err := equalItems(x.ListItems, y.ListItems, depth); !eq || err != nil {
			return false, err
		}
		for _, pair := range [][2]statedict.Value{{x.State, y.State}, {dictOrNil(x.Kwargs), dictOrNil(y.Kwargs)}, {dictOrNil(x.DictItems), dictOrNil(y.DictItems)}} {
			if eq, err := equalValue(pair[0], pair[1], depth+1); !eq || err != nil {
				return false, err
			}
		}
		return true, nil
	case *statedict.NDArray:
		y, ok := b.(*statedict.NDArray)
		return ok && x.DType == y.DType && x.Fortran == y.Fortran && x.Scalar == y.Scalar && slices.Equal(x.Shape, y.Shape) && bytes.Equal(x.Data, y.Data), nil
	case *statedict.Tensor:
		y, ok := b.(*statedict.Tensor)
		if !ok {
			return false, nil
		}
		return equalTensor(x, y)
	}
	return false, nil
}

func dictOrNil(d *statedict.Dict) statedict.Value {
	if d == nil {
		return nil
	}
	return d
}

func equalItems(a, b []statedict.Value, depth int) (bool, error) {
	if len(a) != len(b) {
		return false, nil
	}
	for i := range a {
		if eq, err := equalValue(a[i], b[i], depth+1); !eq || err != nil {
			return false, err
		}
	}
	return true, nil
}

// equalTensor compares two tensors' dtypes, shapes and values, byte for byte; tensors of
// more than maxCompared bytes count as different.
func equalTensor(x, y *statedict.Tensor) (bool, error) {
	if x.DType != y.DType || x.DTypeName() != y.DTypeName() || !slices.Equal(x.Shape, y.Shape) || x.NBytes() > maxCompared {
		return false, nil
	}
	bx, err := x.Bytes()
	if err != nil {
		return false, fmt.Errorf("%w: %w", statedict.ErrCorrupt, err)
	}
	by, err := y.Bytes()
	if err != nil {
		return false, fmt.Errorf("%w: %w", statedict.ErrCorrupt, err)
	}
	return bytes.Equal(bx, by), nil
}
