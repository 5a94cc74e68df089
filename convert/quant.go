package convert

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/statedict"
)

// QuantReport says what a conversion did with a quantized checkpoint.
type QuantReport struct {
	// Method is the configuration's quant_method.
	Method string `json:"method"`
	// DType is what dequantized tensors were computed as.
	DType string `json:"dtype,omitempty"`
	// Dequantized lists the logical tensors written in DType (transformers' names).
	Dequantized []string `json:"dequantized,omitempty"`
	// Kept lists the stored codes written unchanged, with their scales.
	Kept []string `json:"kept,omitempty"`
	// Dropped lists the stored scale and runtime-only tensors left out.
	Dropped []string `json:"dropped,omitempty"`
	// ConfigRemoved lists the files whose quantization config was removed
	// (config.json rewritten without it, hf_quant_config.json not copied).
	ConfigRemoved []string `json:"config_removed,omitempty"`
}

// quantStep is the quantization part of a conversion, applied to the source tree before
// the remap.
type quantStep struct {
	// root is the source tree with the groups to unpack replaced by their dequantized
	// tensors.
	root     statedict.Value
	report   *QuantReport
	warnings []remap.Warning
	// policies shield the members of the groups passed through from the dtype cast.
	policies statedict.Policies
	// rewrite replaces extra files of the output folder; a nil content leaves the file out.
	rewrite map[string][]byte
}

// prepareQuantized detects the quantization of ck and applies opts.Dequantize: groups to
// unpack are replaced by lazily dequantized tensors under their post-load names, their scales
// and the runtime-only scales dropped, and the config removed once nothing quantized is left;
// the members of groups kept are shielded from the dtype cast. A checkpoint that looks
// quantized but cannot be understood is an error when dequantizing or casting, and passes
// through with a warning otherwise (its bytes are not touched).
func prepareQuantized(ck *statedict.Checkpoint, opts Options) (*quantStep, error) {
	q := &quantStep{root: ck.Root, policies: statedict.Policies{}}
	switch opts.Dequantize {
	case DequantizeNone, DequantizeAll:
	case DequantizeAuto:
		if opts.Target == nil || opts.Target.Generation == nil {
			return nil, fmt.Errorf("dequantizing for the target needs its TPU generation (v5e, v5p, v6e or v7x)")
		}
	default:
		return nil, fmt.Errorf("dequantize mode %q: all or auto", opts.Dequantize)
	}
	cast := opts.Remap.DType != statedict.Invalid
	_, plan, err := quant.DetectCheckpoint(ck)
	if err != nil {
		if opts.Dequantize != DequantizeNone || cast {
			return nil, fmt.Errorf("%s: %w", opts.Src, err)
		}
		q.warnings = append(q.warnings, remap.Warning{Kind: "quantization_not_understood",
			Message: fmt.Sprintf("quantization not understood, tensors passed through unchanged: %v", err)})
		return q, nil
	}
	if plan == nil {
		if opts.Dequantize != DequantizeNone {
			q.warnings = append(q.warnings, remap.Warning{Kind: "not_quantized", Message: "nothing to dequantize: the checkpoint is not quantized"})
		}
		return q, nil
	}
	out := statedict.BFloat16
	if cast {
		out = opts.Remap.DType
	}
	unpack := map[*quant.Group]bool{}
	for _, g := range plan.Groups {
		unpack[g] = opts.Dequantize == DequantizeAll || opts.Dequantize == DequantizeAuto && !g.NativeOn(opts.Target.Generation)
	}
	all := len(unpack) > 0
	for _, u := range unpack {
		all = all && u
	}
	if n := countTrue(unpack); n > 0 && !all {
		return nil, fmt.Errorf("%s: dequantizing for %s would unpack %d of the %d quantized tensors and keep the rest, which one %s quantization config cannot describe; unpack all of them instead",
			opts.Src, opts.Target.Generation, n, len(plan.Groups), plan.Config.Method)
	}
	d, ok := ck.Root.(*statedict.Dict)
	if !ok {
		return nil, fmt.Errorf("%s: a quantized checkpoint must be a flat state dict, not a %T", opts.Src, ck.Root)
	}
	q.report = &QuantReport{Method: plan.Config.Method}
	role := map[string]*quant.Group{} // stored name → its group
	for _, g := range plan.Groups {
		for _, m := range g.Members() {
			role[m] = g
		}
	}
	aux := map[string]bool{}
	for _, a := range plan.Aux {
		aux[a] = true
	}
	root := statedict.NewDict(d.Class)
	root.Attrs = d.Attrs
	for _, e := range d.Entries() {
		name := statedict.KeyString(e.Key)
		t, _ := e.Value.(*statedict.Tensor)
		g := role[name]
		switch {
		case g != nil && all && name == g.Weight:
			dq, err := g.Dequantize(out)
			if err != nil {
				return nil, err
			}
			if _, dup := root.Get(g.Name); dup || g.Name != name && hasKey(d, g.Name) {
				return nil, fmt.Errorf("%s: dequantized %s would replace the tensor already named so", opts.Src, g.Name)
			}
			root.Set(g.Name, dq)
			q.report.Dequantized = append(q.report.Dequantized, g.Name)
		case (g != nil || aux[name]) && all:
			q.report.Dropped = append(q.report.Dropped, name)
		default:
			if (g != nil || aux[name]) && t != nil {
				q.policies[t] = statedict.Policy{NoCast: true, Why: "member of a " + plan.Config.Method + "-quantized layer kept as stored"}
			}
			root.Set(e.Key, e.Value)
		}
		if g != nil && !all && name == g.Weight {
			q.report.Kept = append(q.report.Kept, name)
		}
	}
	if all {
		q.report.DType = out.String()
		if q.rewrite, err = removeConfig(ck, plan.Config); err != nil {
			return nil, err
		}
		q.report.ConfigRemoved = plan.Config.Files
	}
	q.root = root
	return q, nil
}

// removeConfig returns the extra-file rewrites that leave the quantization config out:
// config.json without quantization_config, no hf_quant_config.json.
func removeConfig(ck *statedict.Checkpoint, cfg *quant.Config) (map[string][]byte, error) {
	rw := map[string][]byte{}
	for _, f := range cfg.Files {
		if f != quant.ConfigFile {
			rw[f] = nil
			continue
		}
		b, err := ck.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if rw[f], err = quant.StripConfig(b); err != nil {
			return nil, err
		}
	}
	return rw, nil
}

func hasKey(d *statedict.Dict, k string) bool {
	_, ok := d.Get(k)
	return ok
}

func countTrue(m map[*quant.Group]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}
