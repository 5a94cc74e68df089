package inspect

import (
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Quantized describes a quantized checkpoint: each group of stored tensors (codes and
// their scales) as the one logical tensor it encodes, named and shaped as transformers
// holds it after loading with dequantization. The report's tensors list still shows every
// stored tensor.
type Quantized struct {
	// Method is the config's quant_method ("fp8", "compressed-tensors", …); Config the
	// files it came from.
	Method string   `json:"method,omitempty"`
	Config []string `json:"config,omitempty"`
	// Groups are the quantized logical tensors, in checkpoint order.
	Groups []QuantGroup `json:"groups"`
	// RuntimeOnly lists stored tensors only quantized kernels use (activation and kv-cache
	// scales), which dequantization drops.
	RuntimeOnly []string `json:"runtime_only,omitempty"`
	// Error says why the quantization could not be understood (no config for tensors that
	// look quantized, a config that disagrees with them, an unsupported scheme).
	Error string `json:"error,omitempty"`
}

// QuantGroup is one quantized logical tensor.
type QuantGroup struct {
	Name string `json:"name"`
	// Scheme is the layout: fp8-tensor, fp8-channel, fp8-column, fp8-block, mxfp4, nvfp4.
	Scheme string `json:"scheme"`
	// Shape is the logical shape; Block how many stored values along the last two
	// dimensions share one scale.
	Shape []int64 `json:"shape"`
	Block []int64 `json:"block"`
	// CodeDType is the stored dtype of the codes; Stored the stored tensors, codes first.
	CodeDType string   `json:"code_dtype"`
	Stored    []string `json:"stored"`
}

// quantized describes ck's quantization, or returns nil when it is not quantized.
func quantized(ck *statedict.Checkpoint) *Quantized {
	cfg, plan, err := quant.DetectCheckpoint(ck)
	q := &Quantized{Groups: []QuantGroup{}}
	if cfg != nil {
		q.Method, q.Config = cfg.Method, cfg.Files
	}
	switch {
	case err != nil:
		q.Error = err.Error()
		return q
	case plan == nil:
		return nil
	}
	for _, g := range plan.Groups {
		q.Groups = append(q.Groups, QuantGroup{Name: g.Name, Scheme: string(g.Scheme), Shape: g.Shape, Block: g.Block,
			CodeDType: g.CodeDType().String(), Stored: g.Members()})
	}
	q.RuntimeOnly = plan.Aux
	return q
}
