package optimizerstate

import (
	"strconv"

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
	// DataParallel is, for an output split over a mesh, the data-parallel degree of the
	// run that loads it (runtime.Mesh.DataParallel): the training state beside the model is
	// carried for it (Decisions.Carried). 0 for an output that is not per device.
	DataParallel int
	// Config is the checkpoint's config.json (a Hugging Face folder's), nil when it has
	// none: its model_type says in which order the model registers its parameters, which
	// ties an optimizer state saved by position (Optimizer.state_dict()) to a model state
	// dict that lists them by name (see Map).
	Config []byte
}

// Decisions is what a tree's training state is and what a conversion must do with it.
type Decisions struct {
	// Found are the tree's optimizer states mapped onto their models (see Find).
	Found []*Found
	// States gives each per-parameter state tensor of a parsed optimizer state: which
	// optimizer, which parameter, which key.
	States map[*statedict.Tensor]State
	// RNG are the tree's RNG states (see FindRNG).
	RNG RNG
	// Models are the tree's model state dicts: dicts of parameter names to tensors outside
	// any optimizer state (whose per-parameter dicts look alike), and the dicts whose tensor
	// entries are a model's (Inline).
	Models map[*statedict.Dict]bool
	// Inline are the dicts of Models of which only the tensor entries are the model's: a
	// model flattened into a dict of training state (InlineModel), as torchtitan saves it.
	Inline map[*statedict.Dict]bool
	// Schedulers and Scalers are the LR scheduler and GradScaler state dicts, with where
	// they are.
	Schedulers, Scalers []Located
	// Policies decide each training-state tensor: optimizer tensors are never cast by the
	// weights' dtype (moments take MomentDType when set), step counters keep their device,
	// RNG states stay on the CPU.
	Policies statedict.Policies
	// Drop lists, by flattened name, the entries to leave out (the CUDA RNG states, unless
	// kept), each with the reason: an entry is a position in the tree, whatever its value
	// (a tensor, or a list of one per device).
	Drop map[string]string
	// OnCPU lists, by flattened name, the RNG states kept as CPU tensors.
	OnCPU map[string]bool
	// Carried says, for an output split over a mesh (Options.DataParallel), what becomes of
	// each piece of training state that is not a parameter's, by path; the ones dropped are
	// in Drop too.
	Carried []Carried
}

// State locates a per-parameter optimizer state tensor.
type State struct {
	Found *Found
	// Param is the parameter's index in Found.Optimizer.Params; Key its state key
	// ("exp_avg", "step", …).
	Param int
	Key   string
}

// Located is a dict of the tree and its flattened name.
type Located struct {
	Path string
	Dict *statedict.Dict
	// Kind names a scheduler's class (SchedulerKind); "" for others.
	Kind string
}

// Decide finds the training state of root — optimizer states, with the model each maps
// onto, schedulers, scalers and RNG states — and decides how a conversion treats each of
// its tensors. The decisions follow from the structure Find and FindRNG recognize, not
// from tensor names: a model weight called "….step" is a weight. It is the one place a
// conversion learns what its training state is.
func Decide(root statedict.Value, opts Options) (*Decisions, error) {
	found, err := find(root, opts.Names, opts.Config)
	if err != nil {
		return nil, err
	}
	d := &Decisions{Found: found, States: map[*statedict.Tensor]State{}, RNG: FindRNG(root), Models: map[*statedict.Dict]bool{}, Inline: map[*statedict.Dict]bool{},
		Policies: statedict.Policies{}, Drop: map[string]string{}, OnCPU: map[string]bool{}}
	inOptimizer := map[*statedict.Dict]bool{}
	for _, f := range found {
		markDicts(f.Dict, inOptimizer)
		if f.Optimizer != nil {
			for i, p := range f.Optimizer.Params {
				if p.State == nil {
					continue
				}
				for _, e := range p.State.Entries() {
					if t, ok := e.Value.(*statedict.Tensor); ok {
						d.States[t] = State{Found: f, Param: i, Key: statedict.KeyString(e.Key)}
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
			s, isState := d.States[t]
			switch {
			case isState && s.Key != "step":
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
	d.findDicts(root, "", inOptimizer, map[*statedict.Dict]bool{})
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
	d.carry(root, opts.DataParallel, opts.KeepCUDARNG)
	statedict.Walk(root, "", func(name string, v statedict.Value) error {
		if t, ok := v.(*statedict.Tensor); ok && d.OnCPU[name] {
			d.Policies[t] = statedict.Policy{NoCast: true, Host: true, Why: "RNG state"}
		}
		return nil
	})
	return d, nil
}

// findDicts records the model state dicts, schedulers and scalers of v (named path),
// outside the optimizer states' dicts.
func (d *Decisions) findDicts(v statedict.Value, path string, inOptimizer, seen map[*statedict.Dict]bool) {
	switch c := v.(type) {
	case *statedict.Dict:
		if inOptimizer[c] || seen[c] {
			return
		}
		seen[c] = true
		if IsModelStateDict(c) {
			d.Models[c] = true
			return
		}
		if InlineModel(c) != nil {
			d.Models[c], d.Inline[c] = true, true
		}
		if kind, ok := SchedulerKind(c); ok {
			d.Schedulers = append(d.Schedulers, Located{Path: path, Dict: c, Kind: kind})
		} else if IsGradScalerState(c) {
			d.Scalers = append(d.Scalers, Located{Path: path, Dict: c})
		}
		for _, e := range c.Entries() {
			d.findDicts(e.Value, statedict.JoinName(path, statedict.KeyString(e.Key)), inOptimizer, seen)
		}
	case *statedict.List:
		for i, it := range c.Items {
			d.findDicts(it, statedict.JoinName(path, itoa(i)), inOptimizer, seen)
		}
	case statedict.Tuple:
		for i, it := range c {
			d.findDicts(it, statedict.JoinName(path, itoa(i)), inOptimizer, seen)
		}
	}
}

// markDicts records every dict in v.
func markDicts(v statedict.Value, seen map[*statedict.Dict]bool) {
	switch x := v.(type) {
	case *statedict.Dict:
		if seen[x] {
			return
		}
		seen[x] = true
		for _, e := range x.Entries() {
			markDicts(e.Value, seen)
		}
	case *statedict.List:
		for _, it := range x.Items {
			markDicts(it, seen)
		}
	case statedict.Tuple:
		for _, it := range x {
			markDicts(it, seen)
		}
	}
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

func itoa(i int) string { return strconv.Itoa(i) }
