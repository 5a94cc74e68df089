package convert

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// sharding decides how the tensors of the remapped tree root are split across the ranks
// of a target with a mesh (nil without one): the entries of model state dicts by their
// names under the target's plan, each optimizer state tensor after the parameter it
// belongs to (Target.PlaceState: moments take the parameter's placements, scalar state is
// replicated), and everything else — and whatever training-state policy keeps on the host
// or on its saved device (step counters, RNG states) — whole on every rank, as plain
// tensors. Optimizer states that cannot be tied to their model are placed whole, with a
// warning.
func sharding(root statedict.Value, t *runtime.Target, names map[string][]string) (*statedict.Sharding, []remap.Warning, error) {
	sh := t.Sharding()
	if sh == nil {
		return nil, nil, nil
	}
	d, err := optimizerstate.Decide(root, optimizerstate.Options{Names: names})
	if err != nil {
		return nil, nil, err
	}
	whole := func(x *statedict.Tensor) bool {
		p := d.Policies[x]
		return p.Host || p.KeepDevice
	}
	place := func(name string, x *statedict.Tensor, pl runtime.Placed) error {
		if pl.Sharding == nil {
			return nil
		}
		l, err := pl.Sharding.Layout(x.Shape, t.Mesh)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if prev, ok := sh.Tensors[x]; ok && fmt.Sprint(prev.Pieces) != fmt.Sprint(l.Pieces) {
			return fmt.Errorf("%s: one tensor under two names placed two ways (%v and %v)", name, prev.Placements, l.Placements)
		}
		sh.Tensors[x] = l
		return nil
	}
	inOptimizer := map[*statedict.Dict]bool{}
	var warnings []remap.Warning
	var unmapped []string
	for _, f := range d.Found {
		markOptimizer(f.Dict, inOptimizer)
		if f.Optimizer == nil || f.Mapping == nil {
			unmapped = append(unmapped, f.Path)
			continue
		}
		for i, p := range f.Optimizer.Params {
			if p.State == nil {
				continue
			}
			param := statedict.JoinName(f.ModelPath, f.Mapping.Params[i].Name)
			pv, _ := f.Model.Get(f.Mapping.Params[i].Name)
			pt, ok := pv.(*statedict.Tensor)
			if !ok {
				continue
			}
			for _, e := range p.State.Entries() {
				x, ok := e.Value.(*statedict.Tensor)
				if !ok || whole(x) || x.Storage == nil {
					continue
				}
				pl, err := t.PlaceState(param, pt.Shape, x.Shape, x.DType, x.Storage.Location)
				if err != nil {
					return nil, nil, fmt.Errorf("optimizer state of %s: %w", param, err)
				}
				if err := place(param+" ("+statedict.KeyString(e.Key)+")", x, pl); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	if len(unmapped) > 0 {
		warnings = append(warnings, remap.Warning{Kind: "optimizer_unsharded", Items: unmapped,
			Message: fmt.Sprintf("optimizer state %s could not be tied to its model's parameters: its tensors are written whole on every rank instead of following their parameters' sharding", remap.Summarize(unmapped))})
	}
	var visit func(v statedict.Value, name string) error
	visit = func(v statedict.Value, name string) error {
		switch c := v.(type) {
		case *statedict.Dict:
			if inOptimizer[c] {
				return nil
			}
			model := optimizerstate.IsModelStateDict(c)
			for _, e := range c.Entries() {
				full := statedict.JoinName(name, statedict.KeyString(e.Key))
				if x, ok := e.Value.(*statedict.Tensor); ok && model {
					if whole(x) || x.Storage == nil {
						continue
					}
					pl, err := t.Place(full, x.Shape, x.DType, x.Storage.Location)
					if err != nil {
						return err
					}
					if err := place(full, x, pl); err != nil {
						return err
					}
					continue
				}
				if err := visit(e.Value, full); err != nil {
					return err
				}
			}
		case *statedict.List:
			for i, it := range c.Items {
				if err := visit(it, statedict.JoinName(name, fmt.Sprint(i))); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := visit(root, ""); err != nil {
		return nil, nil, err
	}
	return sh, warnings, nil
}

// markOptimizer records the dicts of an optimizer state, whose entries are not weights.
func markOptimizer(v statedict.Value, seen map[*statedict.Dict]bool) {
	switch c := v.(type) {
	case *statedict.Dict:
		seen[c] = true
		for _, e := range c.Entries() {
			markOptimizer(e.Value, seen)
		}
	case *statedict.List:
		for _, it := range c.Items {
			markOptimizer(it, seen)
		}
	}
}
