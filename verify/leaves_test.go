package verify

import (
	"math"
	"math/big"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// TestCompareValues compares the non-tensor values of two trees: equal ones counted, a
// changed, missing or extra one reported; empty containers may be absent on either side.
func TestCompareValues(t *testing.T) {
	tree := func(edit func(d *statedict.Dict)) *statedict.Dict {
		d := statedict.NewDict("")
		d.Set("lr", 0.001)
		d.Set("nan", math.NaN())
		d.Set("step", int64(7))
		d.Set("big", new(big.Int).Lsh(big.NewInt(1), 70))
		d.Set("name", "adamw")
		d.Set("none", nil)
		d.Set("betas", statedict.Tuple{0.9, 0.999})
		d.Set("empty", statedict.NewDict(""))
		if edit != nil {
			edit(d)
		}
		return d
	}
	for _, tc := range []struct {
		name  string
		edit  func(d *statedict.Dict)
		kind  string
		value string
	}{
		{"equal", nil, "", ""},
		{"float changed", func(d *statedict.Dict) { d.Set("lr", 0.0010000000000000002) }, "value", "lr"},
		{"int changed", func(d *statedict.Dict) { d.Set("step", int64(8)) }, "value", "step"},
		{"int became float", func(d *statedict.Dict) { d.Set("step", 7.0) }, "value", "step"},
		{"tuple item", func(d *statedict.Dict) { d.Set("betas", statedict.Tuple{0.9, 0.99}) }, "value", "betas.1"},
		{"missing", func(d *statedict.Dict) { d.Delete("name") }, "missing", "name"},
		{"extra", func(d *statedict.Dict) { d.Set("epoch", int64(3)) }, "extra", "epoch"},
		{"empty dict dropped", func(d *statedict.Dict) { d.Delete("empty") }, "", ""},
		{"empty list added", func(d *statedict.Dict) { d.Set("hist", &statedict.List{}) }, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &ParityReport{}
			if err := compareValues(rep, tree(nil), tree(tc.edit)); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.kind == "" && (len(rep.Problems) != 0 || rep.Values < 7):
				t.Fatalf("%d values equal, problems %+v", rep.Values, rep.Problems)
			case tc.kind != "" && (len(rep.Problems) != 1 || rep.Problems[0].Kind != tc.kind || rep.Problems[0].Tensor != tc.value):
				t.Fatalf("problems %+v, want %s of %s", rep.Problems, tc.kind, tc.value)
			}
		})
	}
}
