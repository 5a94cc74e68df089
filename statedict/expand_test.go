package statedict

import (
	"errors"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// TestCheckExpansion: tied weights and a state dict saved twice pass; T(i+1) = (Ti, Ti)
// through shared tuples, lists and dicts is measured exactly and refused.
func TestCheckExpansion(t *testing.T) {
	st := NewMappedStorage("0", "cpu", Float32, make([]byte, 16))
	w := &Tensor{DType: Float32, Shape: []int64{4}, Strides: []int64{1}, Storage: st}
	sd := NewDict("")
	sd.Set("embed.weight", w)
	sd.Set("lm_head.weight", w)
	twice := NewDict("")
	twice.Set("model", sd)
	twice.Set("ema", sd)
	if err := CheckExpansion(twice); err != nil {
		t.Errorf("honest sharing refused: %v", err)
	}
	x, _ := Expand(twice)
	// NameBytes counts a separator per level, root included: one byte per leaf over Walk's.
	names := len("model.embed.weight") + len("model.lm_head.weight") + len("ema.embed.weight") + len("ema.lm_head.weight")
	if x.Leaves != 4 || x.NameBytes != uint64(names+4) || x.Distinct != 3 {
		t.Errorf("Expand = %+v", x)
	}
	bombs := map[string]func(Value) Value{
		"tuple": func(v Value) Value { return Tuple{v, v} },
		"list":  func(v Value) Value { return &List{Items: []Value{v, v}} },
		"dict": func(v Value) Value {
			d := NewDict("")
			d.Set("a", v)
			d.Set("b", v)
			return d
		},
	}
	for name, next := range bombs {
		var v Value = w
		for range 48 {
			v = next(v)
		}
		x, err := Expand(v)
		if err != nil || x.Leaves != 1<<48 || x.Distinct != 49 {
			t.Errorf("%s: Expand = %+v, %v", name, x, err)
		}
		if err := CheckExpansion(v); !errors.Is(err, ckpterr.ErrUnsupported) {
			t.Errorf("%s bomb: %v", name, err)
		}
	}
}
