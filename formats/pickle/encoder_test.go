package pickle

import (
	"bytes"
	"math"
	"math/big"
	"reflect"
	"testing"
)

// TestEncoderRoundTrip encodes values with each Encoder method and decodes them back with
// the Decoder, including the int-width boundaries where Python's pickler switches opcodes.
func TestEncoderRoundTrip(t *testing.T) {
	huge, _ := new(big.Int).SetString("-1180591620717411303424", 10) // -2**70
	cases := []struct {
		name string
		emit func(e *Encoder)
		want Value
	}{
		{"none", func(e *Encoder) { e.None() }, None{}},
		{"true", func(e *Encoder) { e.Bool(true) }, true},
		{"int 255", func(e *Encoder) { e.Int(255) }, int64(255)},
		{"int 256", func(e *Encoder) { e.Int(256) }, int64(256)},
		{"int 65536", func(e *Encoder) { e.Int(65536) }, int64(65536)},
		{"int -1", func(e *Encoder) { e.Int(-1) }, int64(-1)},
		{"int 2^31", func(e *Encoder) { e.Int(1 << 31) }, int64(1 << 31)},
		{"int min64", func(e *Encoder) { e.Int(math.MinInt64) }, int64(math.MinInt64)},
		{"big -2^70", func(e *Encoder) { e.BigInt(huge) }, huge},
		{"float", func(e *Encoder) { e.Float(-0.1) }, -0.1},
		{"string", func(e *Encoder) { e.String("päth") }, "päth"},
		{"bytes", func(e *Encoder) { e.PyBytes([]byte{0, 0xff, 'a'}) }, []byte{0, 0xff, 'a'}},
		{"global", func(e *Encoder) { e.Global(Global{"torch", "bfloat16"}) }, Global{"torch", "bfloat16"}},
		{"builtins spelled for protocol 2", func(e *Encoder) { e.Global(Global{"builtins", "set"}) }, Global{"builtins", "set"}},
		{"repeated global memoised", func(e *Encoder) {
			e.Op(OpMark)
			e.Global(Global{"torch", "bfloat16"})
			e.String("x")
			e.Put()
			e.Global(Global{"torch", "bfloat16"})
			e.Global(Global{"torch", "float16"})
			e.Global(Global{"torch", "float16"})
			e.Op(OpTuple)
		}, Tuple{Global{"torch", "bfloat16"}, "x", Global{"torch", "bfloat16"}, Global{"torch", "float16"}, Global{"torch", "float16"}}},
		{"tuple and memo", func(e *Encoder) {
			e.Op(OpMark)
			e.String("a")
			i := e.Put()
			e.Get(i)
			e.Op(OpTuple)
		}, Tuple{"a", "a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := NewEncoder()
			c.emit(e)
			got, err := NewDecoder(e.Finish(), Options{Strict: true}).Decode()
			if err != nil {
				t.Fatal(err)
			}
			if b, ok := c.want.(*big.Int); ok {
				if g, ok := got.(*big.Int); !ok || g.Cmp(b) != 0 {
					t.Fatalf("got %v, want %v", got, c.want)
				}
				return
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %#v, want %#v", got, c.want)
			}
		})
	}
}

// TestEncoderGlobalOnce: a global used many times is spelled out once, as Python's pickler
// memoises it, and fetched from the memo after.
func TestEncoderGlobalOnce(t *testing.T) {
	e := NewEncoder()
	for range 1000 {
		e.Global(Global{"torch._utils", "_rebuild_tensor_v2"})
		e.Op('0') // POP
	}
	if n := bytes.Count(e.Finish(), []byte("_rebuild_tensor_v2")); n != 1 {
		t.Fatalf("global spelled out %d times", n)
	}
}
