package optimizerstate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/internal/plural"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Carried says what a conversion for a mesh — an output every rank of a run loads its
// part of — does with one piece of training state that is not a parameter's: kept as
// saved, replicated (one state of the source loaded by every rank), or dropped, and why.
type Carried struct {
	// Path is the entry's flattened name; Kind says what it is (a scheduler's class,
	// "grad scaler", "per-rank data-loader state of 2 ranks", "RNG state", "training
	// state").
	Path string `json:"path"`
	Kind string `json:"kind"`
	// Action is Kept, Replicated or Dropped.
	Action string `json:"action"`
	Why    string `json:"why"`
	// tensors is set when the entry is or holds a tensor.
	tensors bool
}

// HoldsTensors reports whether the entry is or holds a tensor: what a layout of tensors
// alone carries of it.
func (c Carried) HoldsTensors() bool { return c.tensors }

// What a conversion for a mesh does with a piece of training state.
const (
	// Kept: a value the ranks shared (a scheduler's, a step count), every rank loads it as
	// saved; or per-rank state for as many ranks as the output has, each its own.
	Kept = "kept"
	// Replicated: one state the source held, which ranks may each have had their own of
	// (a generator's): every rank loads the same one.
	Replicated = "replicated"
	// Dropped: per-rank state of another number of ranks, or state meaningless on the
	// target; it is not in the output.
	Dropped = "dropped"
)

// carry decides, for an output loaded by dataParallel data-parallel ranks, what happens
// to each piece of training state beside the model and its optimizer state: schedulers and
// scalers are kept (they step alike on every rank); per-rank data-loader states (PerRank)
// are kept when saved by as many ranks, and dropped otherwise — no rank's place in the
// data carries to another split, and giving one rank's to all would make them read the
// same samples; a CPU generator state is replicated, said so, since the source holds one;
// CUDA ones are dropped (unless kept as CPU tensors, then replicated); the other entries
// beside an optimizer state (torchtitan's train_state, an epoch count) are kept.
func (d *Decisions) carry(root statedict.Value, dataParallel int, keepCUDA bool) {
	if dataParallel <= 0 {
		return
	}
	covered := map[string]bool{}
	add := func(c Carried, v statedict.Value) {
		if !covered[c.Path] {
			covered[c.Path] = true
			c.tensors = holdsTensor(v)
			d.Carried = append(d.Carried, c)
		}
	}
	for _, s := range d.Schedulers {
		add(Carried{Path: s.Path, Kind: s.Kind, Action: Kept, Why: "a scheduler steps alike on every rank"}, s.Dict)
	}
	for _, s := range d.Scalers {
		add(Carried{Path: s.Path, Kind: "grad scaler", Action: Kept, Why: "the loss scale is the same on every rank"}, s.Dict)
	}
	for _, n := range d.RNG.CPU {
		add(Carried{Path: n, Kind: "RNG state", Action: Replicated,
			Why: fmt.Sprintf("the checkpoint holds one generator state: each of the %d ranks loads the same one, and ranks seeded alike draw alike", dataParallel)}, &statedict.Tensor{})
	}
	for _, n := range d.RNG.CUDAEntries {
		c := Carried{Path: n, Kind: "CUDA RNG state", Action: Dropped, Why: d.Drop[n]}
		if keepCUDA {
			c.Action, c.Why = Replicated, "kept as CPU byte tensors (--keep-cuda-rng): every rank loads the same ones"
		}
		add(c, &statedict.Tensor{})
	}
	inRNG := func(path string) bool {
		return slices.ContainsFunc(slices.Concat(d.RNG.CPU, d.RNG.CUDAEntries), func(n string) bool {
			return n == path || strings.HasPrefix(n, path+".")
		})
	}
	seen := map[*statedict.Dict]bool{}
	var visit func(v statedict.Value, path string)
	visit = func(v statedict.Value, path string) {
		c, ok := v.(*statedict.Dict)
		if !ok || seen[c] || IsOptimizerState(c) || d.Models[c] && !d.Inline[c] {
			return
		}
		seen[c] = true
		if ranks, ok := PerRank(c); ok {
			pc := Carried{Path: path, Kind: "per-rank data-loader state of " + plural.Of(ranks, "rank"), Action: Kept,
				Why: "saved by as many data-parallel ranks as the output has: each rank loads its own"}
			if ranks != dataParallel {
				pc.Action = Dropped
				pc.Why = fmt.Sprintf("saved by %s, the output is for %d: a rank's place in the data does not carry to another split, nor may one rank's be given to all (resume with it excluded from loading — torchtitan: checkpoint.exclude_from_loading = [\"dataloader\"] — and the data order starts over)", plural.Of(ranks, "data-parallel rank"), dataParallel)
				d.Drop[path] = pc.Why
			}
			add(pc, c)
			return
		}
		holder := slices.ContainsFunc(c.Entries(), func(e statedict.Entry) bool { return IsOptimizerState(e.Value) })
		for _, e := range c.Entries() {
			name := statedict.JoinName(path, statedict.KeyString(e.Key))
			visit(e.Value, name)
			if _, tensor := e.Value.(*statedict.Tensor); !holder || covered[name] || inRNG(name) || tensor && d.Inline[c] {
				continue
			}
			if ev, ok := e.Value.(*statedict.Dict); ok && (IsOptimizerState(ev) || d.Models[ev]) {
				continue
			}
			add(Carried{Path: name, Kind: "training state", Action: Kept, Why: "values beside the optimizer state, not per-rank state: every rank loads them as saved"}, e.Value)
		}
	}
	visit(root, "")
	slices.SortStableFunc(d.Carried, func(a, b Carried) int { return strings.Compare(a.Path, b.Path) })
}

// holdsTensor reports whether v is or holds a tensor.
func holdsTensor(v statedict.Value) bool {
	found := false
	statedict.Walk(v, "", func(_ string, x statedict.Value) error {
		_, t := x.(*statedict.Tensor)
		found = found || t
		return nil
	})
	return found
}

// PerRank reports whether d is the state of a data loader kept per data-parallel rank, as
// torchtitan's ParallelAwareDataloader saves it — {"dp_rank_R": the rank's state, …,
// "world_size": N}, every rank's entry beside the others in a DCP checkpoint — and how
// many ranks saved it (world_size, or the number of dp_rank_R entries without it).
func PerRank(d *statedict.Dict) (ranks int, ok bool) {
	n, world := 0, int64(0)
	for _, e := range d.Entries() {
		k, _ := e.Key.(string)
		if k == "world_size" {
			if world, ok = e.Value.(int64); !ok || world <= 0 {
				return 0, false
			}
			continue
		}
		r, found := strings.CutPrefix(k, "dp_rank_")
		if _, err := strconv.ParseUint(r, 10, 31); !found || err != nil {
			return 0, false
		}
		n++
	}
	switch {
	case n == 0:
		return 0, false
	case world > 0:
		return int(min(world, 1<<31-1)), true
	}
	return n, true
}
