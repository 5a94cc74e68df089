package statedict

import (
	"errors"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

func dict(kv ...Value) *Dict {
	d := NewDict("")
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

// TestObjectData: which pickled objects become the data they hold, by their pickled
// structure alone.
func TestObjectData(t *testing.T) {
	node := func(v Value) *Object {
		return &Object{Class: "omegaconf.nodes.AnyNode", Call: CallNew, State: dict("_val", v, "_metadata", nil)}
	}
	cfg := &Object{Class: "omegaconf.dictconfig.DictConfig", Call: CallNew, State: dict("_content", dict("lr", node(0.1), "warm", node("${lr}"),
		"dims", &Object{Class: "omegaconf.listconfig.ListConfig", Call: CallNew, State: dict("_content", &List{Items: []Value{node(int64(4))}})}))}
	for _, tc := range []struct {
		name string
		o    *Object
		want string // KeyString of the result's entries, "" for none
		ok   bool
	}{
		{"AttributeDict", &Object{Class: "lightning.fabric.utilities.data.AttributeDict", Call: CallNew, Args: []Value{}, DictItems: dict("lr", 0.1)}, "lr", true},
		{"Namespace", &Object{Class: "argparse.Namespace", Call: CallNew, Args: []Value{}, State: dict("a", int64(1))}, "a", true},
		{"SimpleNamespace", &Object{Class: "types.SimpleNamespace", Call: CallReduce, Args: []Value{}, State: dict("b", int64(2))}, "b", true},
		{"slots", &Object{Class: "m.S", Call: CallNew, Args: []Value{}, State: Tuple{nil, dict("w", int64(8))}}, "w", true},
		{"DictConfig", cfg, "lr warm dims", true},
		{"class reference", &Object{Class: "omegaconf.dictconfig.DictConfig", Call: CallRef}, "", true},
		{"Fraction", &Object{Class: "fractions.Fraction", Call: CallReduce, Args: []Value{int64(1), int64(3)}}, "", false},
		{"call with no state", &Object{Class: "os.getcwd", Call: CallReduce, Args: []Value{}}, "", false},
		{"custom setstate", &Object{Class: "m.C", Call: CallNew, Args: []Value{}, State: Tuple{int64(1), int64(2), int64(3)}}, "", false},
		{"dict subclass with attributes", &Object{Class: "m.D", Call: CallNew, Args: []Value{}, DictItems: dict("k", int64(1)), State: dict("x", int64(1))}, "", false},
	} {
		v, _, ok, err := tc.o.Data()
		if err != nil || ok != tc.ok {
			t.Errorf("%s: ok %v, err %v", tc.name, ok, err)
			continue
		}
		if d, isDict := v.(*Dict); isDict {
			got := ""
			for i, e := range d.Entries() {
				if i > 0 {
					got += " "
				}
				got += KeyString(e.Key)
			}
			if got != tc.want {
				t.Errorf("%s: keys %q, want %q", tc.name, got, tc.want)
			}
		}
	}
	v, _, _, _ := cfg.Data()
	d := v.(*Dict)
	if w, _ := d.Get("warm"); w != "${lr}" {
		t.Errorf("interpolation read as %v", w)
	}
	if l, _ := d.Get("dims"); len(l.(*List).Items) != 1 || l.(*List).Items[0] != int64(4) {
		t.Errorf("ListConfig read as %v", l)
	}
	bad := &Object{Class: "omegaconf.dictconfig.DictConfig", Call: CallNew, State: int64(3)}
	if _, _, _, err := bad.Data(); !errors.Is(err, ckpterr.ErrCorrupt) {
		t.Errorf("a DictConfig without its __dict__: %v", err)
	}
}

// TestHiddenTensors counts tensors only reachable through objects that are not modules.
func TestHiddenTensors(t *testing.T) {
	tensor := &Tensor{DType: Float32, Shape: []int64{1}, Strides: []int64{1}, Storage: NewMappedStorage("0", "cpu", Float32, make([]byte, 4))}
	root := dict("visible", tensor, "opaque", &Object{Class: "m.Wrapper", Call: CallReduce, Args: []Value{dict("w", tensor)}},
		"other", &Object{Class: "m.Holder", Call: CallNew, State: dict("t", &Tensor{DType: Float32, Shape: []int64{}, Strides: []int64{}, Storage: NewMappedStorage("1", "cpu", Float32, make([]byte, 4))})})
	h := HiddenTensors(root)
	if h.Tensors != 1 || len(h.Classes) != 1 || h.Classes[0] != "m.Holder" {
		t.Errorf("%+v (the shared tensor counts once, where first seen)", h)
	}
}
