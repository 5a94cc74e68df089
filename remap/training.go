package remap

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/statedict"
)

// training is what a remap needs to keep the training state consistent with the model:
// the optimizer states of the tree mapped onto their models, the RNG states, and what the
// walk did to each model state dict.
type training struct {
	found map[*statedict.Dict]*optimizerstate.Found
	// moments are the per-parameter state tensors other than step (OptimizerDType).
	moments map[*statedict.Tensor]bool
	// onCPU are RNG states kept as CPU tensors; cudaEntries the CUDA RNG entries dropped.
	onCPU, cudaEntries map[string]bool
	// models records, per source model state dict, what happened to each key.
	models  map[*statedict.Dict]map[string]optimizerstate.Fate
	pending []pendingOptimizer
}

type pendingOptimizer struct{ src, out *statedict.Dict }

func newTraining(root statedict.Value, opts Options) (*training, error) {
	tr := &training{found: map[*statedict.Dict]*optimizerstate.Found{}, moments: map[*statedict.Tensor]bool{},
		onCPU: map[string]bool{}, cudaEntries: map[string]bool{}, models: map[*statedict.Dict]map[string]optimizerstate.Fate{}}
	found, err := optimizerstate.Find(root, opts.OptimizerNames)
	if err != nil {
		return nil, err
	}
	for _, f := range found {
		tr.found[f.Dict] = f
		if f.Optimizer == nil {
			continue
		}
		for _, p := range f.Optimizer.Params {
			if p.State == nil {
				continue
			}
			for _, e := range p.State.Entries() {
				if t, ok := e.Value.(*statedict.Tensor); ok && e.Key != "step" {
					tr.moments[t] = true
				}
			}
		}
	}
	rng := optimizerstate.FindRNG(root)
	for _, n := range rng.CPU {
		tr.onCPU[n] = true
	}
	for _, n := range rng.CUDA {
		tr.onCPU[n] = opts.KeepCUDARNG
	}
	for _, n := range rng.CUDAEntries {
		tr.cudaEntries[n] = !opts.KeepCUDARNG
	}
	return tr, nil
}

// dropsRNG reports (and records) whether name is a CUDA RNG entry to drop.
func (r *remapper) dropsRNG(name string) bool {
	if !r.training.cudaEntries[name] {
		return false
	}
	r.rep.DroppedRNG = append(r.rep.DroppedRNG, name)
	r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("dropped the CUDA RNG state %s: it means nothing on a TPU (--keep-cuda-rng keeps it as CPU bytes)", name))
	return true
}

// rngOnCPU reports (and records) whether the tensor named name is an RNG state kept as a
// CPU tensor: torch.set_rng_state and torch.cuda.set_rng_state take CPU byte tensors.
func (r *remapper) rngOnCPU(name string) bool {
	if r.training.onCPU[name] {
		r.rep.RNG = append(r.rep.RNG, name)
		return true
	}
	return false
}

// momentDType is the dtype an optimizer state tensor is cast to: OptimizerDType for the
// per-parameter state (moments), never for step counters or group options.
func (r *remapper) momentDType(t *statedict.Tensor) statedict.DType {
	if r.training.moments[t] {
		return r.opts.OptimizerDType
	}
	return statedict.Invalid
}

// noteDict records what the walk did to a dict: a model state dict's key fates, an
// optimizer state to rewrite once the whole tree is done, a scheduler state repaired.
func (r *remapper) noteDict(src, out *statedict.Dict, keys []statedict.Value, name string, inOptim bool) {
	if optimizerstate.RepairMilestones(out) {
		r.rep.Repaired = append(r.rep.Repaired, statedict.JoinName(name, "milestones"))
	}
	if _, ok := r.training.found[src]; ok {
		r.training.pending = append(r.training.pending, pendingOptimizer{src, out})
		return
	}
	if inOptim || !optimizerstate.IsModelStateDict(src) {
		return
	}
	fates := map[string]optimizerstate.Fate{}
	for i, e := range src.Entries() {
		key, _ := e.Key.(string)
		to, _ := keys[i].(string)
		v, kept := out.Get(to)
		ft := optimizerstate.Fate{Name: to, Dropped: !kept}
		if t, ok := v.(*statedict.Tensor); ok && t.Storage != nil {
			ft.Location = t.Storage.Location
		}
		fates[key] = ft
	}
	r.training.models[src] = fates
}

// finishTraining rewrites each optimizer state to follow its converted model.
func (r *remapper) finishTraining() error {
	for _, p := range r.training.pending {
		f := r.training.found[p.src]
		if f.Optimizer == nil {
			r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s: not understood as an optimizer state, converted as plain data: %v", f.Path, f.Err))
			continue
		}
		fates, converted := r.training.models[f.Model]
		fate := func(key string) (optimizerstate.Fate, bool) {
			if !converted { // the model was dropped or not selected: nothing to follow
				return optimizerstate.Fate{Name: key}, true
			}
			ft, ok := fates[key]
			return ft, ok
		}
		rep, err := optimizerstate.Rewrite(p.out, f, fate)
		if err != nil {
			return err
		}
		if rep.Unmapped != "" {
			r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("%s: its parameters could not be tied to the model, so its state keeps its own device tags: %s", f.Path, rep.Unmapped))
		}
		r.rep.Optimizers = append(r.rep.Optimizers, rep)
	}
	return nil
}
