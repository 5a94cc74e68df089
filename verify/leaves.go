package verify

import (
	"bytes"
	"fmt"
	"math"
	"math/big"

	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/torchlegacy"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/statedict"
)

// treeFormats are the formats that hold a whole checkpoint tree — counters, learning-rate
// schedules, optimizer hyperparameters — and not only tensors.
var treeFormats = map[string]bool{torchzip.Format: true, torchlegacy.Format: true, dcp.Format: true}

// compareValues compares the non-tensor leaves of the expected tree with the destination's:
// every value equal (floats bit for bit, NaN equal to NaN), none missing, none extra. Empty
// containers may be missing on either side (DCP does not save them; safetensors cannot),
// and a tuple may have become a list.
func compareValues(rep *ParityReport, exp, dst statedict.Value) error {
	el, err := statedict.Flatten(exp)
	if err != nil {
		return err
	}
	dl, err := statedict.Flatten(dst)
	if err != nil {
		return err
	}
	got := map[string]statedict.Value{}
	var order []string
	for _, l := range dl {
		if _, ok := l.Value.(*statedict.Tensor); !ok {
			got[l.Name] = l.Value
			order = append(order, l.Name)
		}
	}
	for _, l := range el {
		if _, ok := l.Value.(*statedict.Tensor); ok {
			continue
		}
		v, ok := got[l.Name]
		delete(got, l.Name)
		switch {
		case !ok && emptyContainer(l.Value):
		case !ok:
			rep.Problems = append(rep.Problems, ParityProblem{Tensor: l.Name, Kind: "missing", Want: statedict.JSON(l.Value)})
		case !sameValue(l.Value, v):
			rep.Problems = append(rep.Problems, ParityProblem{Tensor: l.Name, Kind: "value", Want: statedict.JSON(l.Value), Got: statedict.JSON(v)})
		default:
			rep.Values++
		}
	}
	for _, n := range order {
		if v, ok := got[n]; ok && !emptyContainer(v) {
			rep.Problems = append(rep.Problems, ParityProblem{Tensor: n, Kind: "extra", Got: statedict.JSON(v)})
		}
	}
	return nil
}

// countValues counts the non-tensor leaves of v that are not empty containers.
func countValues(v statedict.Value) int {
	n := 0
	statedict.Walk(v, "", func(_ string, x statedict.Value) error {
		if _, ok := x.(*statedict.Tensor); !ok && !emptyContainer(x) {
			n++
		}
		return nil
	})
	return n
}

func emptyContainer(v statedict.Value) bool {
	switch x := v.(type) {
	case *statedict.Dict:
		return x.Len() == 0
	case *statedict.List:
		return len(x.Items) == 0
	case statedict.Tuple:
		return len(x) == 0
	}
	return false
}

// sameValue reports whether two non-tensor leaves hold the same value.
func sameValue(a, b statedict.Value) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool, int64, string, statedict.DType:
		return a == b
	case float64:
		y, ok := b.(float64)
		return ok && (math.Float64bits(x) == math.Float64bits(y) || math.IsNaN(x) && math.IsNaN(y))
	case complex128:
		y, ok := b.(complex128)
		return ok && sameValue(real(x), real(y)) && sameValue(imag(x), imag(y))
	case *big.Int:
		y, ok := b.(*big.Int)
		return ok && x.Cmp(y) == 0
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case *statedict.Object:
		y, ok := b.(*statedict.Object)
		return ok && x.Class == y.Class
	case *statedict.NDArray:
		y, ok := b.(*statedict.NDArray)
		return ok && x.DType == y.DType && fmt.Sprint(x.Shape) == fmt.Sprint(y.Shape) && x.Fortran == y.Fortran && bytes.Equal(x.Data, y.Data)
	}
	if emptyContainer(a) {
		return emptyContainer(b)
	}
	return false
}
