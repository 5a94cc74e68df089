package optimizerstate

import (
	"github.com/ckpt-dev/ckpt/statedict"
)

// Options say how a conversion treats training state.
type Options struct {
	// Names lists parameter names in id order by optimizer path, as for Find.
	Names map[string][]string
	// MomentDType, when valid, is the dtype optimizer moments (per-parameter state other
	// than step) are cast to; by default they keep theirs whatever the weights get.
	MomentDType statedict.DType
	// KeepCUDARNG keeps CUDA RNG states, as CPU byte tensors, instead of dropping them.
	KeepCUDARNG bool
}

// Decisions is what a conversion must do with a tree's training state.
type Decisions struct {
	// Found are the tree's optimizer states mapped onto their models (see Find).
	Found []*Found
	// RNG are the tree's RNG states (see FindRNG).
	RNG RNG
	// Policies decide each training-state tensor: optimizer tensors are never cast by the
	// weights' dtype (moments take MomentDType when set), step counters keep their device,
	// RNG states stay on the CPU.
	Policies statedict.Policies
	// Drop lists the flattened names of entries to leave out (the CUDA RNG states, unless
	// kept), each with the reason.
	Drop map[string]string
	// OnCPU lists, by flattened name, the RNG states kept as CPU tensors.
	OnCPU map[string]bool
}

// Decide finds the training state of root — optimizer states, with the model each maps
// onto, and RNG states — and decides how a conversion treats each of its tensors. The
// decisions follow from the structure Find and FindRNG recognize, not from tensor names: a
// model weight called "….step" is a weight.
func Decide(root statedict.Value, opts Options) (*Decisions, error) {
	found, err := Find(root, opts.Names)
	if err != nil {
		return nil, err
	}
	d := &Decisions{Found: found, RNG: FindRNG(root), Policies: statedict.Policies{}, Drop: map[string]string{}, OnCPU: map[string]bool{}}
	for _, f := range found {
		moments := map[*statedict.Tensor]bool{}
		if f.Optimizer != nil {
			for _, p := range f.Optimizer.Params {
				if p.State == nil {
					continue
				}
				for _, e := range p.State.Entries() {
					if t, ok := e.Value.(*statedict.Tensor); ok && e.Key != "step" {
						moments[t] = true
					}
				}
			}
		}
		statedict.Walk(f.Dict, "", func(name string, v statedict.Value) error {
			t, ok := v.(*statedict.Tensor)
			if !ok {
				return nil
			}
			pol := statedict.Policy{NoCast: true, Why: "optimizer state"}
			switch {
			case moments[t]:
				pol.Why = "optimizer moment"
				if opts.MomentDType != statedict.Invalid {
					pol.NoCast, pol.DType = false, opts.MomentDType
				}
			case lastKey(name) == "step":
				pol.KeepDevice, pol.Why = true, "optimizer step"
			}
			d.Policies[t] = pol
			return nil
		})
	}
	for _, n := range d.RNG.CPU {
		d.OnCPU[n] = true
	}
	if opts.KeepCUDARNG {
		for _, n := range d.RNG.CUDA {
			d.OnCPU[n] = true
		}
	} else {
		for _, n := range d.RNG.CUDAEntries {
			d.Drop[n] = "a CUDA RNG state means nothing on a TPU"
		}
	}
	statedict.Walk(root, "", func(name string, v statedict.Value) error {
		if t, ok := v.(*statedict.Tensor); ok && d.OnCPU[name] {
			d.Policies[t] = statedict.Policy{NoCast: true, Host: true, Why: "RNG state"}
		}
		return nil
	})
	return d, nil
}

// lastKey is the last component of a flattened name.
func lastKey(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '.' {
			return name[i+1:]
		}
	}
	return name
}
