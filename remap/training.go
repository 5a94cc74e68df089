package remap

import (
	"errors"
	"fmt"

	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/statedict"
)

// training is what a remap needs to keep the training state consistent with the model:
// optimizerstate's decisions about the tree (its optimizer states mapped onto their
// models, its RNG states), and what the walk did to each model state dict.
type training struct {
	decisions *optimizerstate.Decisions
	found     map[*statedict.Dict]*optimizerstate.Found
	// inOptimizer holds the dicts inside optimizer states, whose keys are never renamed.
	inOptimizer map[*statedict.Dict]bool
	// models records, per source model state dict an optimizer state follows (followed),
	// what happened to each key.
	models   map[*statedict.Dict]map[string]optimizerstate.Fate
	followed map[*statedict.Dict]bool
	pending  []pendingOptimizer
}

type pendingOptimizer struct{ src, out *statedict.Dict }

func newTraining(root statedict.Value, opts Options) (*training, error) {
	d, err := optimizerstate.Decide(root, optimizerstate.Options{Names: opts.OptimizerNames, MomentDType: opts.OptimizerDType, KeepCUDARNG: opts.KeepCUDARNG})
	if err != nil {
		return nil, err
	}
	tr := &training{decisions: d, found: map[*statedict.Dict]*optimizerstate.Found{}, inOptimizer: map[*statedict.Dict]bool{},
		models: map[*statedict.Dict]map[string]optimizerstate.Fate{}, followed: map[*statedict.Dict]bool{}}
	for _, f := range d.Found {
		tr.found[f.Dict] = f
		if f.Model != nil {
			tr.followed[f.Model] = true
		}
		markDicts(f.Dict, tr.inOptimizer)
	}
	return tr, nil
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

// dropsRNG reports (and records) whether name is a CUDA RNG entry to drop.
func (r *remapper) dropsRNG(name string) bool {
	if _, ok := r.training.decisions.Drop[name]; !ok {
		return false
	}
	r.rep.DroppedRNG = append(r.rep.DroppedRNG, name)
	return true
}

// noteDict records what the walk did to a dict: a model state dict's key fates, an
// optimizer state to rewrite once the whole tree is done, a scheduler state repaired.
func (r *remapper) noteDict(src, out *statedict.Dict, keys []statedict.Value, name string) {
	if optimizerstate.RepairMilestones(out) {
		r.rep.Repaired = append(r.rep.Repaired, statedict.JoinName(name, "milestones"))
	}
	if _, ok := r.training.found[src]; ok {
		r.training.pending = append(r.training.pending, pendingOptimizer{src, out})
		return
	}
	if !r.training.followed[src] || r.training.inOptimizer[src] || !optimizerstate.IsModelStateDict(src) {
		return // no optimizer state follows it: its keys' fates are not needed
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
		if f.Err != nil && r.opts.OptimizerNames != nil && errors.Is(f.Err, optimizerstate.ErrNotFitting) {
			// Names were given to tie this optimizer to its model, and they do not fit it.
			return fmt.Errorf("optimizer state %s: %w", f.Path, f.Err)
		}
		if f.Optimizer == nil {
			r.rep.Warnings = append(r.rep.Warnings, Warning{Kind: "optimizer_not_understood", Items: []string{f.Path},
				Message: fmt.Sprintf("%s: not understood as an optimizer state, converted as plain data: %v", f.Path, f.Err)})
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
			r.rep.Warnings = append(r.rep.Warnings, Warning{Kind: "optimizer_unmapped", Items: []string{f.Path},
				Message: fmt.Sprintf("%s: its parameters could not be tied to the model, so its state keeps its own device tags: %s", f.Path, rep.Unmapped)})
		}
		r.rep.Optimizers = append(r.rep.Optimizers, rep)
	}
	return nil
}
