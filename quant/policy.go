package quant

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/statedict"
)

// TPUGen is a TPU generation. It decides which quantized tensors a converted
// checkpoint may keep because the target computes with them natively.
type TPUGen string

// The TPU generations ckpt targets.
const (
	TPUv5e TPUGen = "v5e"
	TPUv5p TPUGen = "v5p"
	TPUv6e TPUGen = "v6e"
	TPUv7x TPUGen = "v7x"
)

// ParseTPUGen parses a generation name ("v5e", "v5p", "v6e", "v7x").
func ParseTPUGen(s string) (TPUGen, error) {
	switch g := TPUGen(s); g {
	case TPUv5e, TPUv5p, TPUv6e, TPUv7x:
		return g, nil
	}
	return "", fmt.Errorf("TPU generation %q: one of v5e, v5p, v6e, v7x", s)
}

// NativeOn reports whether TPUs of generation gen run the group as stored. Only
// TPU7x (Ironwood) has FP8 matrix units, for float8_e4m3fn; v5p and v6e run FP8
// at the bfloat16 rate (it would save memory only) and v5e not at all; no TPU
// runs FP4 (quant.md §5). Everything else must be dequantized.
func (g *Group) NativeOn(gen TPUGen) bool {
	return gen == TPUv7x && g.weight.DType == statedict.Float8E4M3FN
}
