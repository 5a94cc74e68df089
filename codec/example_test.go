package codec_test

import (
	"context"
	"fmt"

	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/formats"
)

// Decode a tensor of any floating dtype — float8 here — to float32, exactly as torch's
// t.float() does.
func ExampleFloat32s() {
	ck, err := formats.Open(context.Background(), "../testdata/torch/dtypes.pt")
	if err != nil {
		panic(err)
	}
	defer ck.Close()
	t, err := ck.Tensor("float8_e4m3fn")
	if err != nil {
		panic(err)
	}
	vals, err := codec.Float32s(t)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.DType, t.Shape, vals)
	// Output:
	// float8_e4m3fn [3 4] [0 0.001953125 0.013671875 1 352 384 448 NaN -0 -0.001953125 -384 NaN]
}

// Round float32 values to the nearest float8_e4m3fn codes, ties to even, saturating as
// torch's cast does, and back.
func ExampleFormat_Encode() {
	for _, x := range []float32{0.3, 448, 1000, -0.0009765625} {
		code := codec.E4M3FN.Encode(x)
		fmt.Printf("%g → %#02x → %g\n", x, code, codec.E4M3FN.Decode(code))
	}
	// Output:
	// 0.3 → 0x2a → 0.3125
	// 448 → 0x7e → 448
	// 1000 → 0x7e → 448
	// -0.0009765625 → 0x80 → -0
}
