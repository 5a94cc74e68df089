package megatron

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"slices"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// maxCompared bounds the bytes of a tensor equalValue compares (RNG states, scalars,
// Transformer Engine extra state), maxComparedTotal those of one comparison; larger
// tensors, and tensors past the total, count as different.
const (
	maxCompared      = 1 << 20
	maxComparedTotal = 64 << 20
)

// maxDepth bounds the nesting equalValue descends; maxVisits the containers one comparison
// visits (pickles share and nest values without limit, and may contain themselves).
const (
	maxDepth  = 64
	maxVisits = 1 << 20
)

// equalValue reports whether two values of the ranks' trees are the same data: same types,
// same contents (floats bit for bit, tensors byte for byte up to maxCompared bytes).
// Values too deep or too large to compare within the bounds count as different.
func equalValue(a, b statedict.Value) (bool, error) {
	c := comparer{seen: map[[2]any]bool{}}
	return c.equal(a, b, 0)
}

// comparer compares two values, each pair of containers once (a pair met again, as in a
// cycle, compares equal where it is met).
type comparer struct {
	seen   map[[2]any]bool
	visits int
	bytes  int64 // tensor bytes compared
}

func (c *comparer) equal(a, b statedict.Value, depth int) (bool, error) {
	if depth > maxDepth || c.visits > maxVisits {
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
		if c.met(x, y) {
			return true, nil
		}
		if eq, err := c.equal(x.Attrs, y.Attrs, depth+1); !eq || err != nil {
			return false, err
		}
		ye := y.Entries()
		for i, e := range x.Entries() {
			if eq, err := c.equal(e.Key, ye[i].Key, depth+1); !eq || err != nil {
				return false, err
			}
			if eq, err := c.equal(e.Value, ye[i].Value, depth+1); !eq || err != nil {
				return false, err
			}
		}
		return true, nil
	case *statedict.List:
		y, ok := b.(*statedict.List)
		if !ok {
			return false, nil
		}
		if c.met(x, y) {
			return true, nil
		}
		return c.items(x.Items, y.Items, depth)
	case statedict.Tuple:
		y, ok := b.(statedict.Tuple)
		if !ok {
			return false, nil
		}
		return c.items(x, y, depth)
	case *statedict.Object:
		y, ok := b.(*statedict.Object)
		if !ok || x.Class != y.Class || x.Call != y.Call || (x.Kwargs == nil) != (y.Kwargs == nil) || (x.DictItems == nil) != (y.DictItems == nil) {
			return false, nil
		}
		if c.met(x, y) {
			return true, nil
		}
		if eq, err := c.items(x.Args, y.Args, depth); !eq || err != nil {
			return false, err
		}
		if eq, err := c.items(x.ListItems, y.ListItems, depth); !eq || err != nil {
			return false, err
		}
		for _, pair := range [][2]statedict.Value{{x.State, y.State}, {dictOrNil(x.Kwargs), dictOrNil(y.Kwargs)}, {dictOrNil(x.DictItems), dictOrNil(y.DictItems)}} {
			if eq, err := c.equal(pair[0], pair[1], depth+1); !eq || err != nil {
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
		return c.tensors(x, y)
	}
	return false, nil
}

func dictOrNil(d *statedict.Dict) statedict.Value {
	if d == nil {
		return nil
	}
	return d
}

// met records that the containers a and b (pointers of one type) are being compared, and
// reports whether they already were.
func (c *comparer) met(a, b any) bool {
	pair := [2]any{a, b}
	if c.seen[pair] {
		return true
	}
	c.seen[pair] = true
	c.visits++
	return false
}

func (c *comparer) items(a, b []statedict.Value, depth int) (bool, error) {
	if len(a) != len(b) {
		return false, nil
	}
	for i := range a {
		if eq, err := c.equal(a[i], b[i], depth+1); !eq || err != nil {
			return false, err
		}
	}
	return true, nil
}

// tensors compares two tensors' dtypes, shapes and values, byte for byte.
func (c *comparer) tensors(x, y *statedict.Tensor) (bool, error) {
	if x == nil || y == nil {
		return x == y, nil
	}
	if x.DType != y.DType || x.DTypeName() != y.DTypeName() || !slices.Equal(x.Shape, y.Shape) {
		return false, nil
	}
	if err := x.Validate(); err != nil {
		return false, fmt.Errorf("%w: %w", ckpterr.ErrCorrupt, err)
	}
	if err := y.Validate(); err != nil {
		return false, fmt.Errorf("%w: %w", ckpterr.ErrCorrupt, err)
	}
	n := x.NBytes()
	if n > maxCompared || c.bytes+2*n > maxComparedTotal {
		return false, nil
	}
	c.bytes += 2 * n
	bx, err := x.Bytes()
	if err != nil {
		return false, fmt.Errorf("%w: %w", ckpterr.ErrCorrupt, err)
	}
	by, err := y.Bytes()
	if err != nil {
		return false, fmt.Errorf("%w: %w", ckpterr.ErrCorrupt, err)
	}
	return bytes.Equal(bx, by), nil
}
