package optimizerstate

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// RNG lists the random-number-generator states of a checkpoint tree, by flattened name.
//
// Detection: an RNG subtree starts at a dict key containing "rng" (any case: rng,
// rng_state, rng_states, cuda_rng_state, torch_rng_state, …), or is the whole tree when
// its root dict has a "cpu" uint8 tensor next to a "cuda", "python" or "numpy" key (the
// rng_state.pth files of transformers' Trainer and accelerate). Every uint8 tensor in an
// RNG subtree is a generator state. It is a CUDA state when a key from the subtree's
// first key down contains "cuda" (rng.cuda.0, rng_state.cuda, cuda_rng_state.1 from
// torch.cuda.get_rng_state_all()); otherwise it is a CPU (or other device's) generator
// state. RNG states kept elsewhere, under keys without "rng", are not recognized.
type RNG struct {
	// CPU lists the generator states that are not CUDA's: torch.set_rng_state needs them
	// as CPU tensors, so a conversion keeps them tagged "cpu".
	CPU []string `json:"cpu,omitempty"`
	// CUDA lists the CUDA generator states, meaningless on a TPU.
	CUDA []string `json:"cuda,omitempty"`
	// CUDAEntries are the outermost entries inside RNG subtrees that hold nothing but CUDA
	// states (rng.cuda for {"cpu": …, "cuda": [t0, t1]}; cuda_rng_state as a whole): what
	// a conversion drops.
	CUDAEntries []string `json:"cuda_entries,omitempty"`
}

// FindRNG finds the RNG states of a checkpoint tree.
func FindRNG(root statedict.Value) RNG {
	var r RNG
	in := false
	if d, ok := root.(*statedict.Dict); ok {
		cpu, _ := d.Get("cpu")
		t, isT := cpu.(*statedict.Tensor)
		_, hasCUDA := d.Get("cuda")
		_, hasPy := d.Get("python")
		_, hasNP := d.Get("numpy")
		in = isT && t.DType == statedict.Uint8 && (hasCUDA || hasPy || hasNP)
	}
	_, _, r.CUDAEntries = r.visit(root, "", in, false)
	return r
}

// visit walks v (named path; in: inside an RNG subtree; cuda: a key from the subtree's
// start down said "cuda"). It returns the number of CUDA states below, the number of other
// leaves, and the CUDA-only entries below.
func (r *RNG) visit(v statedict.Value, path string, in, cuda bool) (nCUDA, nOther int, entries []string) {
	child := func(x statedict.Value, name string, cin, ccuda, mayDrop bool) {
		c, o, es := r.visit(x, name, cin, ccuda)
		nCUDA += c
		nOther += o
		if c > 0 && o == 0 && mayDrop {
			entries = append(entries, name)
		} else {
			entries = append(entries, es...)
		}
	}
	switch x := v.(type) {
	case *statedict.Dict:
		if x.Len() == 0 {
			return 0, 1, nil
		}
		for _, e := range x.Entries() {
			k := strings.ToLower(statedict.KeyString(e.Key))
			cin := in || strings.Contains(k, "rng")
			ccuda := cin && (cuda || strings.Contains(k, "cuda"))
			child(e.Value, statedict.JoinName(path, statedict.KeyString(e.Key)), cin, ccuda, in || ccuda)
		}
	case *statedict.List:
		if len(x.Items) == 0 {
			return 0, 1, nil
		}
		for i, it := range x.Items {
			child(it, statedict.JoinName(path, strconv.Itoa(i)), in, cuda, in)
		}
	case statedict.Tuple:
		for i, it := range x {
			child(it, statedict.JoinName(path, strconv.Itoa(i)), in, cuda, in)
		}
	case *statedict.Tensor:
		switch {
		case !in || x.DType != statedict.Uint8:
			return 0, 1, nil
		case cuda:
			r.CUDA = append(r.CUDA, path)
			return 1, 0, nil
		default:
			r.CPU = append(r.CPU, path)
		}
		return 0, 1, nil
	default:
		return 0, 1, nil
	}
	return nCUDA, nOther, entries
}

// SchedulerKind names the torch.optim.lr_scheduler class whose state_dict d is, judged by
// the attributes only that class saves; ok is false when d is not a scheduler state.
// transformers' schedules are LambdaLR.
func SchedulerKind(d *statedict.Dict) (kind string, ok bool) {
	has := func(keys ...string) bool {
		for _, k := range keys {
			if _, ok := d.Get(k); !ok {
				return false
			}
		}
		return true
	}
	if has("mode", "factor", "patience", "best", "num_bad_epochs") {
		return "ReduceLROnPlateau", true
	}
	if !has("last_epoch") || !has("base_lrs") && !has("_schedulers") {
		return "", false
	}
	for _, c := range []struct{ kind, key string }{
		{"SequentialLR", "_milestones"}, {"ChainedScheduler", "_schedulers"},
		{"LambdaLR", "lr_lambdas"}, {"OneCycleLR", "_schedule_phases"}, {"CyclicLR", "max_lrs"},
		{"CosineAnnealingWarmRestarts", "T_0"}, {"CosineAnnealingLR", "T_max"},
		{"MultiStepLR", "milestones"}, {"StepLR", "step_size"}, {"LinearLR", "start_factor"},
		{"PolynomialLR", "power"}, {"ConstantLR", "factor"}, {"ExponentialLR", "gamma"},
	} {
		if has(c.key) {
			return c.kind, true
		}
	}
	return "LRScheduler", true
}

// IsGradScalerState reports whether d is an enabled GradScaler's state_dict (a disabled
// one saves {}).
func IsGradScalerState(d *statedict.Dict) bool {
	for _, k := range []string{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} {
		if _, ok := d.Get(k); !ok {
			return false
		}
	}
	return true
}

// RepairMilestones restores a MultiStepLR state whose milestones lost their type in a
// torch.distributed.checkpoint round trip: DCP flattens the collections.Counter into a
// dict with string keys ({"2": 1, "4": 2}), and MultiStepLR.load_state_dict takes it as
// is, so `last_epoch in milestones` never holds again and the learning rate silently
// stops decaying. The milestones become a Counter with int keys again; it reports whether
// d changed.
func RepairMilestones(d *statedict.Dict) bool {
	if kind, _ := SchedulerKind(d); kind != "MultiStepLR" {
		return false
	}
	mv, _ := d.Get("milestones")
	m, ok := mv.(*statedict.Dict)
	if !ok {
		return false
	}
	c := statedict.NewDict("collections.Counter")
	changed := m.Class != c.Class
	for _, e := range m.Entries() {
		switch k := e.Key.(type) {
		case int64:
			c.Set(k, e.Value)
		case string:
			n, err := strconv.ParseInt(k, 10, 64)
			if err != nil || strconv.FormatInt(n, 10) != k {
				return false
			}
			c.Set(n, e.Value)
			changed = true
		default:
			return false
		}
	}
	if changed {
		d.Set("milestones", c)
	}
	return changed
}

// describeValue renders a scalar for reports in the spelling of the --json outputs
// (statedict.JSON): 65536, 1e-8, true, null; strings as they are.
func describeValue(v statedict.Value) string {
	switch x := v.(type) {
	case string:
		return x
	case *statedict.Tensor:
		return fmt.Sprintf("tensor %s %v", x.DType, x.Shape)
	}
	b, err := json.Marshal(statedict.JSON(v))
	if err != nil {
		return statedict.KeyString(v)
	}
	return string(b)
}
