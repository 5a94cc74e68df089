package codec

import (
	"math"
	"strings"
	"testing"
)

// Readable spot checks from quant.md §1 and §6 (all verified with torch 2.14.1);
// the golden tests cover every code and input exhaustively.

func TestDecodeVectors(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		f    Format
		b    byte
		want float32
	}{
		{E4M3FN, 0x38, 1}, {E4M3FN, 0x7E, 448}, {E4M3FN, 0x08, 0.015625},
		{E4M3FN, 0x07, 0.013671875}, {E4M3FN, 0x01, 0.001953125},
		{E4M3FN, 0x1D, 0.1015625}, {E4M3FN, 0x9D, -0.1015625},
		{E5M2, 0x3C, 1}, {E5M2, 0x7B, 57344}, {E5M2, 0x7C, inf}, {E5M2, 0xFC, -inf},
		{E5M2, 0x04, 6.103515625e-05},
		{E4M3FNUZ, 0x40, 1}, {E4M3FNUZ, 0x38, 0.5}, {E4M3FNUZ, 0x7F, 240},
		{E5M2FNUZ, 0x40, 1}, {E5M2FNUZ, 0x01, 7.62939453125e-06}, {E5M2FNUZ, 0x7F, 57344},
		{E8M0FNU, 0x7F, 1}, {E8M0FNU, 0x7E, 0.5}, {E8M0FNU, 0xFE, 0x1p127}, {E8M0FNU, 0x00, 0x1p-127},
	} {
		if got := tc.f.Decode(tc.b); got != tc.want {
			t.Errorf("%v.Decode(%#02x) = %v, want %v", tc.f, tc.b, got, tc.want)
		}
	}
	// NaN bits as torch's .float() writes them.
	for _, tc := range []struct {
		f    Format
		b    byte
		want uint32
	}{
		{E4M3FN, 0x7F, 0x7FF00000}, {E4M3FN, 0xFF, 0xFFF00000}, {E4M3FN, 0x80, 0x80000000},
		{E5M2, 0x7D, 0x7FE00000}, {E5M2, 0x7E, 0x7FC00000}, {E5M2, 0xFF, 0xFFE00000},
		{E4M3FNUZ, 0x80, 0x7F800001}, {E5M2FNUZ, 0x80, 0x7F800001}, {E8M0FNU, 0xFF, 0x7F800001},
	} {
		if got := math.Float32bits(tc.f.Decode(tc.b)); got != tc.want {
			t.Errorf("%v.Decode(%#02x) bits = %#08x, want %#08x", tc.f, tc.b, got, tc.want)
		}
	}
}

func TestEncodeVectors(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	bits := math.Float32frombits
	for _, tc := range []struct {
		f    Format
		x    float32
		want byte
	}{
		// E4M3FN saturates (V2).
		{E4M3FN, 448, 0x7E}, {E4M3FN, 464, 0x7E}, {E4M3FN, 464.1, 0x7E}, {E4M3FN, 480, 0x7E},
		{E4M3FN, inf, 0x7E}, {E4M3FN, -inf, 0xFE}, {E4M3FN, nan, 0x7F}, {E4M3FN, -nan, 0xFF},
		{E4M3FN, float32(math.Copysign(0, -1)), 0x80}, {E4M3FN, 0x1p-10, 0x00},
		{E4M3FN, 3 * 0x1p-10, 0x02}, {E4M3FN, 0.1, 0x1D},
		// E5M2 overflows to inf.
		{E5M2, 57344, 0x7B}, {E5M2, 61439, 0x7B}, {E5M2, 61440, 0x7C}, {E5M2, -inf, 0xFC},
		{E5M2, nan, 0x7F}, {E5M2, 0x1p-17, 0x00}, {E5M2, 3 * 0x1p-17, 0x02},
		// The fnuz formats overflow to their NaN code and have no −0.
		{E4M3FNUZ, 247.9, 0x7F}, {E4M3FNUZ, 248, 0x80}, {E4M3FNUZ, -inf, 0x80},
		{E4M3FNUZ, nan, 0x80}, {E4M3FNUZ, -0x1p-12, 0x00}, {E4M3FNUZ, -1, 0xC0},
		{E5M2FNUZ, 57344, 0x7F}, {E5M2FNUZ, 61440, 0x80}, {E5M2FNUZ, inf, 0x80},
		// E8M0 rounds the exponent, ignores the sign, ties go up.
		{E8M0FNU, 1.4999, 0x7F}, {E8M0FNU, 1.5, 0x80}, {E8M0FNU, 3, 0x81}, {E8M0FNU, -4, 0x81},
		{E8M0FNU, 0, 0x00}, {E8M0FNU, math.MaxFloat32, 0xFF}, {E8M0FNU, bits(0x7F3FFFFF), 0xFE},
		{E8M0FNU, bits(0x00400000), 0x00}, {E8M0FNU, bits(0x00600000), 0x01},
		{E8M0FNU, inf, 0xFF}, {E8M0FNU, nan, 0xFF},
	} {
		if got := tc.f.Encode(tc.x); got != tc.want {
			t.Errorf("%v.Encode(%v) = %#02x, want %#02x", tc.f, tc.x, got, tc.want)
		}
	}
}

func TestHalfVectors(t *testing.T) {
	bits := math.Float32frombits
	for _, tc := range []struct {
		name string
		got  uint16
		want uint16
	}{
		{"bf16 subnormal tie down", Float32ToBF16(bits(0x00008000)), 0x0000},
		{"bf16 subnormal tie up", Float32ToBF16(bits(0x00018000)), 0x0002},
		{"bf16 max rounds to inf", Float32ToBF16(math.MaxFloat32), 0x7F80},
		{"bf16 NaN", Float32ToBF16(bits(0x7FC00000)), BF16NaN},
		{"bf16 -NaN", Float32ToBF16(bits(0xFFC00001)), BF16NaN},
		{"bf16 V3 product tie", Float32ToBF16(bits(0x3E8C8000)), 0x3E8C},
		{"f16 65519", Float32ToF16(65519), 0x7BFF},
		{"f16 65520", Float32ToF16(65520), 0x7C00},
		{"f16 NaN", Float32ToF16(bits(0x7FC00000)), 0x7E00},
		{"f16 -NaN", Float32ToF16(bits(0xFFC00000)), 0xFE00},
		{"f16 NaN payload 1", Float32ToF16(bits(0x7F800001)), 0x7E00},
		{"f16 NaN payload max", Float32ToF16(bits(0x7FBFFFFF)), 0x7FFF},
		{"f16 min subnormal", Float32ToF16(0x1p-24), 0x0001},
		{"f16 tie to zero", Float32ToF16(0x1p-25), 0x0000},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %#04x, want %#04x", tc.name, tc.got, tc.want)
		}
	}
	if got := math.Float32bits(F16ToFloat32(0x7C01)); got != 0x7FC02000 {
		t.Errorf("F16ToFloat32(0x7C01) = %#08x, want 0x7FC02000 (quieted)", got)
	}
	if got := math.Float32bits(BF16ToFloat32(0x7F81)); got != 0x7F810000 {
		t.Errorf("BF16ToFloat32(0x7F81) = %#08x, want 0x7F810000 (payload kept)", got)
	}
}

func TestFP4Vectors(t *testing.T) {
	// torchao test_fp4_pack_unpack: [0.0, 0.5, 4.0, -0.0, -0.0, 1.0, -6.0, 3.0].
	src := []byte{0x10, 0x86, 0x28, 0x5F}
	want := []float32{0, 0.5, 4, float32(math.Copysign(0, -1)), float32(math.Copysign(0, -1)), 1, -6, 3}
	got := make([]float32, 8)
	DecodeFP4x2(got, src)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("element %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestDecodeFP8ToBF16NaN(t *testing.T) {
	// torch's fp8 → bf16 cast is scalar: NaN is 0x7FC0 whatever the sign, unlike
	// float32 → bf16 (BF16NaN).
	for _, f := range formats {
		dst := make([]byte, 256*2)
		src := make([]byte, 256)
		for i := range src {
			src[i] = byte(i)
		}
		DecodeFP8ToBF16(dst, src, f)
		for i := range src {
			got := uint16(dst[2*i]) | uint16(dst[2*i+1])<<8
			v := f.Decode(byte(i))
			want := Float32ToBF16(v)
			if v != v {
				want = 0x7FC0
			}
			if got != want {
				t.Errorf("%v: DecodeFP8ToBF16(%#02x) = %#04x, want %#04x", f, i, got, want)
			}
		}
	}
}

func TestKernelsRejectMismatchedLengths(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func()
	}{
		{"DecodeFP8 short dst", func() { DecodeFP8(make([]float32, 3), make([]byte, 4), E4M3FN) }},
		{"DecodeFP8ToBF16 long dst", func() { DecodeFP8ToBF16(make([]byte, 10), make([]byte, 4), E5M2) }},
		{"EncodeFP8", func() { EncodeFP8(make([]byte, 5), make([]float32, 4), E8M0FNU) }},
		{"DecodeFP4x2", func() { DecodeFP4x2(make([]float32, 7), make([]byte, 4)) }},
		{"DecodeBF16 odd src", func() { DecodeBF16(make([]float32, 2), make([]byte, 5)) }},
		{"EncodeBF16", func() { EncodeBF16(make([]byte, 7), make([]float32, 4)) }},
		{"DecodeF16", func() { DecodeF16(make([]float32, 3), make([]byte, 8)) }},
		{"EncodeF16", func() { EncodeF16(make([]byte, 9), make([]float32, 4)) }},
		{"DecodeF64 partial element", func() { DecodeF64(make([]float32, 1), make([]byte, 12)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, ok := r.(string); !ok || !strings.HasPrefix(s, "codec.") {
					t.Errorf("recovered %v, want a quant.* length panic", r)
				}
			}()
			tc.call()
		})
	}
}

func TestKernelsHandleEmptyAndTails(t *testing.T) {
	// Every length from 0 to 17 exercises the unrolled body and the tail loop.
	for n := range 18 {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(i)/2 - 4
		}
		b16, f16 := make([]byte, 2*n), make([]byte, 2*n)
		EncodeBF16(b16, src)
		EncodeF16(f16, src)
		back16, backF := make([]float32, n), make([]float32, n)
		DecodeBF16(back16, b16)
		DecodeF16(backF, f16)
		fp8 := make([]byte, n)
		EncodeFP8(fp8, src, E4M3FN)
		back8 := make([]float32, n)
		DecodeFP8(back8, fp8, E4M3FN)
		fp4 := make([]float32, 2*n)
		DecodeFP4x2(fp4, fp8)
		for i, x := range src { // all these values are exact in every format used
			if back16[i] != x || backF[i] != x || back8[i] != x {
				t.Fatalf("n=%d element %d: %v round-trips to bf16 %v, f16 %v, e4m3fn %v", n, i, x, back16[i], backF[i], back8[i])
			}
			if a, b := FP4x2ToFloat32(fp8[i]); fp4[2*i] != a || fp4[2*i+1] != b {
				t.Fatalf("n=%d: DecodeFP4x2 byte %d = %v, %v, want %v, %v", n, i, fp4[2*i], fp4[2*i+1], a, b)
			}
		}
	}
}

func TestFormatString(t *testing.T) {
	for _, tc := range []struct {
		f    Format
		want string
	}{
		{E4M3FN, "float8_e4m3fn"}, {E5M2, "float8_e5m2"}, {E4M3FNUZ, "float8_e4m3fnuz"},
		{E5M2FNUZ, "float8_e5m2fnuz"}, {E8M0FNU, "float8_e8m0fnu"}, {Format(9), "codec.Format(9)"},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("Format(%d).String() = %q, want %q", uint8(tc.f), got, tc.want)
		}
	}
}
