package forward

import (
	"math"
	"sort"
)

// activations are transformers' ACT2FN activations by name, in float32 as torch computes
// them. "xielu" (parametric) and "gpt_oss_swiglu" (gated) are built by the MLP from its
// weights (parametric) or applied to the gate and up together.
var activations = map[Act]func(float32) float32{
	"silu": silu, "swish": silu,
	"gelu": geluErf, "gelu_python": geluErf,
	"gelu_pytorch_tanh": geluTanh, "gelu_new": geluTanh, "gelu_python_tanh": geluTanh, "gelu_accurate": geluTanh,
	"gelu_fast":  geluFast,
	"bloom_gelu": bloomGelu,
	"gelu_10":    func(x float32) float32 { return min(max(geluErf(x), -10), 10) },
	"quick_gelu": func(x float32) float32 { return x * sigmoid(1.702*x) },
	"relu":       relu,
	"relu2":      func(x float32) float32 { r := relu(x); return r * r },
	"relu6":      func(x float32) float32 { return min(relu(x), 6) },
	"tanh":       func(x float32) float32 { return float32(math.Tanh(float64(x))) },
	"sigmoid":    sigmoid,
	"linear":     func(x float32) float32 { return x },
	"mish": func(x float32) float32 {
		return x * float32(math.Tanh(float64(softplus(x))))
	},
	"xielu":          nil,
	"gpt_oss_swiglu": nil,
}

func activationNames() []string {
	var s []string
	for k := range activations {
		s = append(s, string(k))
	}
	sort.Strings(s)
	return s
}

func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

func relu(x float32) float32 { return max(x, 0) }

// softplus is torch's softplus (beta 1, threshold 20): log(1 + e^x), x itself above 20.
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

// geluTanh is torch's gelu(approximate="tanh"): ½x(1 + tanh(√(2/π)(x + 0.044715x³))).
func geluTanh(x float32) float32 {
	const k = 0.7978845608028654 // √(2/π)
	inner := float32(k) * (x + 0.044715*x*x*x)
	return 0.5 * x * (1 + float32(math.Tanh(float64(inner))))
}

// geluFast is FastGELUActivation: ½x(1 + tanh(x·0.7978845608·(1 + 0.044715x²))).
func geluFast(x float32) float32 {
	return 0.5 * x * (1 + float32(math.Tanh(float64(x*0.7978845608*(1+0.044715*x*x)))))
}

// bloomGelu is Bloom's bloom_gelu_forward: x·½·(1 + tanh(0.79788456·x·(1 + 0.044715x²))).
func bloomGelu(x float32) float32 {
	return x * 0.5 * (1 + float32(math.Tanh(float64(0.79788456*x*(1+0.044715*x*x)))))
}

// geluErf is torch's exact gelu: ½x(1 + erf(x/√2)).
func geluErf(x float32) float32 {
	return 0.5 * x * (1 + float32(math.Erf(float64(x*float32(1/math.Sqrt2)))))
}

// xielu is XIELUActivation with its learned parameters: αp·x² + βx above 0, else
// (expm1(min(x, eps)) − x)·αn + βx, with αp = softplus(alpha_p) and αn = β +
// softplus(alpha_n).
func xielu(alphaP, alphaN, beta, eps float32) func(float32) float32 {
	ap := softplus(alphaP)
	an := beta + softplus(alphaN)
	return func(x float32) float32 {
		if x > 0 {
			return ap*x*x + beta*x
		}
		return (float32(math.Expm1(float64(min(x, eps))))-x)*an + beta*x
	}
}

// gptOssSwiglu is gpt-oss' gated activation of one gate and up value: the gate clamped
// above at 7, up to ±7, (up + 1)·gate·sigmoid(1.702·gate).
func gptOssSwiglu(g, u float32) float32 {
	const alpha, limit = 1.702, 7.0
	g = min(g, limit)
	u = min(max(u, -limit), limit)
	return (u + 1) * (g * sigmoid(g*alpha))
}
