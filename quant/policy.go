package quant

import (
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// ElementDType is the dtype of the group's values as the matrix units would see them:
// float4_e2m1fn_x2 for the FP4 schemes, whatever dtype their bytes are stored as (gpt-oss
// and compressed-tensors keep FP4 pairs in uint8), the codes' float8 dtype otherwise.
func (g *Group) ElementDType() statedict.DType {
	switch g.Scheme {
	case SchemeMXFP4, SchemeNVFP4:
		return statedict.Float4E2M1FNx2
	}
	return g.weight.DType
}

// NativeOn reports whether a TPU of generation gen computes with the group as stored: its
// matrix units take the group's element dtype as a weight operand (runtime's catalogue:
// float8_e4m3fn on TPU7x only, float8_e5m2 from v5e on, FP4 nowhere). A nil generation runs
// nothing natively.
func (g *Group) NativeOn(gen *runtime.Generation) bool {
	return gen != nil && gen.NativeWeight(g.ElementDType())
}
