package quant

import (
	"errors"
	"fmt"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Mode says what a conversion does with quantized tensors.
type Mode string

// Dequantization modes.
const (
	// DequantizeNone passes quantized tensors through unchanged, with their scales and
	// quantization config (TPU-side kernels can take them); the dtype cast leaves their
	// scales alone.
	DequantizeNone Mode = ""
	// DequantizeAll unpacks every quantized tensor.
	DequantizeAll Mode = "all"
	// DequantizeAuto unpacks what the target's TPU generation does not run natively (see
	// Group.NativeOn): FP4 everywhere, float8_e4m3fn except on TPU7x.
	DequantizeAuto Mode = "auto"
)

// ParseMode reads a mode as a record or a command line spells it: "", "none", "all" or
// "auto".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "none":
		return DequantizeNone, nil
	case "all", "auto":
		return Mode(s), nil
	}
	return "", fmt.Errorf("dequantize mode %q: all or auto", s)
}

// Report says what a conversion did with a quantized checkpoint.
type Report struct {
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

// Prepared is what a conversion does with a checkpoint's quantization, decided once: the
// tree to convert, the policies of the members of groups passed through, and the files to
// rewrite.
type Prepared struct {
	// Root is the source tree with the groups to unpack replaced by their dequantized
	// tensors (the source's own tree when nothing is unpacked).
	Root statedict.Value
	// Report is nil for a checkpoint that is not quantized.
	Report *Report
	// Policies shield the members of the groups passed through from the dtype cast.
	Policies statedict.Policies
	// Groups gives, for each dequantized tensor of Root, the group it unpacks.
	Groups map[*statedict.Tensor]*Group
	// Rewrite replaces extra files of the output folder; a nil content leaves the file out.
	Rewrite map[string][]byte
	// NotUnderstood is why a checkpoint that looks quantized could not be understood; its
	// tensors then pass through unchanged (set only when that is allowed: nothing is
	// unpacked or cast).
	NotUnderstood error
	// NothingToUnpack is set when dequantizing was asked of a checkpoint that is not
	// quantized.
	NothingToUnpack bool
}

// ErrGeneration is the error of DequantizeAuto without a TPU generation to decide for.
var ErrGeneration = errors.New("dequantizing for the target needs its TPU generation")

// Prepare detects the quantization of ck and applies mode: groups to unpack are replaced
// by lazily dequantized tensors under their post-load names, computed as dtype (bfloat16
// when Invalid), their scales and the runtime-only scales dropped, and the config removed
// once nothing quantized is left; the members of groups kept are shielded from the dtype
// cast. gen is the TPU generation DequantizeAuto decides for. A checkpoint that looks
// quantized but cannot be understood is an error when unpacking or casting (cast), and
// passes through otherwise (Prepared.NotUnderstood; its bytes are not touched).
func Prepare(ck *statedict.Checkpoint, mode Mode, dtype statedict.DType, cast bool, gen *runtime.Generation) (*Prepared, error) {
	q := &Prepared{Root: ck.Root, Policies: statedict.Policies{}}
	switch mode {
	case DequantizeNone, DequantizeAll:
	case DequantizeAuto:
		if gen == nil {
			return nil, fmt.Errorf("%w (%s)", ErrGeneration, runtime.GenerationNames())
		}
	default:
		return nil, fmt.Errorf("dequantize mode %q: all or auto", mode)
	}
	_, plan, err := DetectCheckpoint(ck)
	if err != nil {
		if mode != DequantizeNone || cast {
			return nil, err // naming ck.Path already
		}
		q.NotUnderstood = err
		return q, nil
	}
	if plan == nil {
		q.NothingToUnpack = mode != DequantizeNone
		return q, nil
	}
	out := statedict.BFloat16
	if dtype != statedict.Invalid {
		out = dtype
	}
	unpacked := 0
	for _, g := range plan.Groups {
		if mode == DequantizeAll || mode == DequantizeAuto && !g.NativeOn(gen) {
			unpacked++
		}
	}
	all := unpacked > 0 && unpacked == len(plan.Groups)
	if unpacked > 0 && !all {
		return nil, fmt.Errorf("%s: %w: dequantizing for %s would unpack %d of the %d quantized tensors and keep the rest, which one %s quantization config cannot describe; unpack all of them instead",
			ck.Path, ckpterr.ErrUnsupported, gen, unpacked, len(plan.Groups), plan.Config.Method)
	}
	d, ok := ck.Root.(*statedict.Dict)
	if !ok {
		return nil, fmt.Errorf("%s: %w: a quantized checkpoint must be a flat state dict, not a %T", ck.Path, ckpterr.ErrUnsupported, ck.Root)
	}
	q.Report = &Report{Method: plan.Config.Method}
	role := plan.roles()
	aux := map[string]bool{}
	for _, a := range plan.Aux {
		aux[a] = true
	}
	root := statedict.NewDict(d.Class)
	root.Attrs = d.Attrs
	q.Groups = map[*statedict.Tensor]*Group{}
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
				return nil, fmt.Errorf("%s: %w: dequantized %s would replace the tensor already named so", ck.Path, ckpterr.ErrCorrupt, g.Name)
			}
			root.Set(g.Name, dq)
			q.Groups[dq] = g
			q.Report.Dequantized = append(q.Report.Dequantized, g.Name)
		case (g != nil || aux[name]) && all:
			q.Report.Dropped = append(q.Report.Dropped, name)
		default:
			if (g != nil || aux[name]) && t != nil {
				q.Policies[t] = statedict.Policy{NoCast: true, Why: "member of a " + plan.Config.Method + "-quantized layer kept as stored"}
			}
			root.Set(e.Key, e.Value)
		}
		if g != nil && !all && name == g.Weight {
			q.Report.Kept = append(q.Report.Kept, name)
		}
	}
	if all {
		q.Report.DType = out.String()
		if q.Rewrite, err = removeConfig(ck, plan.Config); err != nil {
			return nil, err
		}
		q.Report.ConfigRemoved = plan.Config.Files
	}
	q.Root = root
	return q, nil
}

// roles maps every stored member name to its group.
func (p *Plan) roles() map[string]*Group {
	role := map[string]*Group{}
	for _, g := range p.Groups {
		for _, m := range g.Members() {
			role[m] = g
		}
	}
	return role
}

// removeConfig returns the extra-file rewrites that leave the quantization config out:
// config.json without quantization_config, no hf_quant_config.json.
func removeConfig(ck *statedict.Checkpoint, cfg *Config) (map[string][]byte, error) {
	rw := map[string][]byte{}
	for _, f := range cfg.Files {
		if f != ConfigFile {
			rw[f] = nil
			continue
		}
		b, err := ck.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if rw[f], err = StripConfig(b); err != nil {
			return nil, err
		}
	}
	return rw, nil
}

func hasKey(d *statedict.Dict, k string) bool {
	_, ok := d.Get(k)
	return ok
}
