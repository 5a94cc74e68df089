package statedict

import (
	"fmt"
	"math/bits"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// A pickle shares objects through its memo, so a value tree is a DAG: T(i+1) = (Ti, Ti)
// describes 2^48 leaves in 400 bytes, which torch loads as 48 shared objects. ckpt keeps the
// sharing too, but listing and flattening name every path, so what they produce is the
// expanded tree. CheckExpansion measures it exactly (one pass over the DAG, memoised per
// shared node) before anything walks it, and refuses trees whose expansion is out of
// proportion to what the file holds.

// Expansion limits: the expanded tree may have at most max(ExpansionFloorNodes,
// ExpansionFactor × distinct nodes) nodes, and its flattened names at most
// max(ExpansionFloorNameBytes, NameExpansionFactor × (distinct keys' bytes + distinct
// nodes)) bytes. Honest checkpoints share little (tied weights, a state dict saved under
// two keys) and stay far below; a bomb exceeds them by orders of magnitude.
var (
	ExpansionFloorNodes     int64 = 1 << 21
	ExpansionFactor         int64 = 8
	ExpansionFloorNameBytes int64 = 1 << 28
	NameExpansionFactor     int64 = 32
)

// maxValueDepth bounds how deeply the walkers of this package recurse into a value tree.
const maxValueDepth = 100000

// Expansion is the size of a value tree with its shared nodes expanded, and of the DAG.
type Expansion struct {
	// Nodes counts every node visit of the expanded tree; Leaves the leaves Walk reports;
	// NameBytes the bytes of the flattened names Walk builds for them.
	Nodes, Leaves, NameBytes uint64
	// Distinct counts the distinct nodes, DistinctKeyBytes the bytes of their dict keys.
	Distinct, DistinctKeyBytes uint64
}

// sat adds with saturation.
func sat(a, b uint64) uint64 {
	s, c := bits.Add64(a, b, 0)
	if c != 0 {
		return ^uint64(0)
	}
	return s
}

// satMul multiplies with saturation.
func satMul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return ^uint64(0)
	}
	return lo
}

// size is the expansion of one node.
type size struct{ nodes, leaves, names uint64 }

type expander struct {
	memo     map[any]size
	open     map[any]bool
	distinct uint64
	keyBytes uint64
	depth    int
}

// tupleID identifies a tuple by its backing array, as the decoder shares it.
type tupleID struct {
	first *Value
	n     int
}

// Expand measures v's expanded tree. A container that contains itself counts once there
// (Walk reports it as an error).
func Expand(v Value) (Expansion, error) {
	e := expander{memo: map[any]size{}, open: map[any]bool{}}
	s, err := e.size(v)
	return Expansion{Nodes: s.nodes, Leaves: s.leaves, NameBytes: s.names, Distinct: e.distinct, DistinctKeyBytes: e.keyBytes}, err
}

// CheckExpansion refuses a value tree whose expansion exceeds the limits, with an error
// wrapping ckpterr.ErrUnsupported.
func CheckExpansion(v Value) error {
	x, err := Expand(v)
	if err != nil {
		return err
	}
	maxNodes := max(uint64(ExpansionFloorNodes), satMul(uint64(ExpansionFactor), x.Distinct))
	maxNames := max(uint64(ExpansionFloorNameBytes), satMul(uint64(NameExpansionFactor), sat(x.DistinctKeyBytes, x.Distinct)))
	if x.Nodes > maxNodes || x.NameBytes > maxNames {
		return fmt.Errorf("%w: %d distinct values share structure that expands to %s entries and %s bytes of names when listed or flattened (limits %d and %d): a pickle bomb",
			ckpterr.ErrUnsupported, x.Distinct, count(x.Nodes), count(x.NameBytes), maxNodes, maxNames)
	}
	return nil
}

// count prints a saturated count as "more than 2^64".
func count(n uint64) string {
	if n == ^uint64(0) {
		return "more than 2^64"
	}
	return fmt.Sprint(n)
}

// key returns the memo identity of shared nodes, or nil for values copied by value.
func key(v Value) any {
	switch c := v.(type) {
	case *Dict, *List, *Object, *Tensor:
		return c
	case Tuple:
		if len(c) > 0 {
			return tupleID{&c[0], len(c)}
		}
	}
	return nil
}

func (e *expander) size(v Value) (size, error) {
	k := key(v)
	if k != nil {
		if s, ok := e.memo[k]; ok {
			return s, nil
		}
		if e.open[k] {
			return size{1, 1, 0}, nil
		}
		e.open[k] = true
		defer delete(e.open, k)
	}
	e.depth++
	defer func() { e.depth-- }()
	if e.depth > maxValueDepth {
		return size{}, fmt.Errorf("%w: values nested deeper than %d levels", ckpterr.ErrUnsupported, maxValueDepth)
	}
	e.distinct++
	s := size{nodes: 1}
	child := func(keyLen int, c Value) error {
		cs, err := e.size(c)
		if err != nil {
			return err
		}
		s.nodes = sat(s.nodes, cs.nodes)
		s.leaves = sat(s.leaves, cs.leaves)
		s.names = sat(s.names, sat(cs.names, satMul(uint64(keyLen)+1, cs.leaves)))
		return nil
	}
	var err error
	switch c := v.(type) {
	case *Dict:
		for _, en := range c.entries {
			ks := KeyString(en.Key)
			e.keyBytes = sat(e.keyBytes, uint64(len(ks)))
			if err = child(len(ks), en.Value); err != nil {
				break
			}
		}
		if err == nil && c.Attrs != nil {
			err = child(0, c.Attrs)
		}
	case *List:
		for i, x := range c.Items {
			if err = child(digits(i), x); err != nil {
				break
			}
		}
	case Tuple:
		for i, x := range c {
			if err = child(digits(i), x); err != nil {
				break
			}
		}
	case *Object:
		// Walk stops at objects, but readers of pickled modules and remap look inside.
		for i, x := range c.Args {
			if err = child(digits(i), x); err != nil {
				break
			}
		}
		if err == nil && c.State != nil {
			err = child(0, c.State)
		}
		for i, x := range c.ListItems {
			if err != nil {
				break
			}
			err = child(digits(i), x)
		}
		for _, v := range []*Dict{c.Kwargs, c.DictItems} {
			if err == nil && v != nil {
				err = child(0, v)
			}
		}
	case *Tensor:
		if c.Attrs != nil {
			err = child(0, c.Attrs)
		}
	}
	if err != nil {
		return size{}, err
	}
	if _, isTensor := v.(*Tensor); isTensor || s.leaves == 0 {
		s.leaves = 1 // a leaf, or an empty container Walk reports as one
	}
	if k != nil {
		e.memo[k] = s
	}
	return s, nil
}

// digits is the length of i in decimal.
func digits(i int) int {
	n := 1
	for i >= 10 {
		i /= 10
		n++
	}
	return n
}
