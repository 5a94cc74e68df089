package codec

import (
	"math"
	"testing"
)

// TestMXFP4Table checks the MXFP4 tables at the scale bytes that matter: 127 (the FP4
// values themselves), a power of two either way, the float32 subnormals of byte 0 and the
// overflow to ±inf of byte 255; and that the bfloat16 table holds the same values.
func TestMXFP4Table(t *testing.T) {
	tab, bf := MXFP4(), MXFP4BF16()
	for _, tc := range []struct {
		e    int
		n    byte
		want float32
	}{
		{127, 0x7, 6}, {127, 0xF, -6}, {127, 0x1, 0.5}, {127, 0x8, float32(math.Copysign(0, -1))},
		{128, 0x2, 2}, {125, 0x4, 0.5}, {0, 0x1, float32(math.Ldexp(0.5, -127))}, {0, 0x2, float32(math.Ldexp(1, -127))},
		{255, 0x2, float32(math.Inf(1))}, {255, 0x9, float32(math.Ldexp(-0.5, 128))}, {255, 0xF, float32(math.Inf(-1))},
	} {
		got := tab[tc.e][tc.n]
		if math.Float32bits(got) != math.Float32bits(tc.want) {
			t.Errorf("MXFP4[%d][%#x] = %g, want %g", tc.e, tc.n, got, tc.want)
		}
	}
	for e := range 256 {
		for n := range 16 {
			if w := BF16ToFloat32(bf[e][n]); math.Float32bits(w) != math.Float32bits(tab[e][n]) {
				t.Fatalf("MXFP4BF16[%d][%d] = %g, MXFP4 %g", e, n, w, tab[e][n])
			}
		}
	}
}
