package megatron

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// indexState reads the optimizer state a run without the distributed optimizer saves in
// each rank file — Float16OptimizerWithFloat16Params.state_dict() ({"optimizer": the torch
// optimizer's state_dict over the fp32 main copies, "fp32_from_fp16_params": those copies
// per group}) or FP32Optimizer's (the torch optimizer's state_dict itself, over the model's
// own fp32 parameters) — and ties each rank's parameter ids to its parameters as
// _get_param_groups numbers them: group after group, each group's parameters in model
// order. It returns the param groups (the same on every rank but for their ids).
func (m *merger) indexState() ([]*statedict.Dict, error) {
	path := []string{"optimizer", "optimizer"}
	if _, nested := fieldPath(m.grid[0][0].root, "optimizer", "optimizer", "state").(*statedict.Dict); !nested {
		path = path[:1]
	}
	groups, err := m.paramGroups(append(path, "param_groups")...)
	if err != nil {
		return nil, err
	}
	decay, noDecay, err := groupRule(groups)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.at, err)
	}
	for _, stage := range m.grid {
		for _, k := range stage {
			if err := k.placeIndexState(path, decay, noDecay); err != nil {
				return nil, fmt.Errorf("%s: %w", k.file, err)
			}
		}
	}
	return groups, nil
}

// placeIndexState ties the rank's optimizer state by id (at path in its file) to its
// parameters: its state ("param", the fp32 main copy of a 16-bit parameter, then the
// optimizer's per-parameter tensors) and its step.
func (k *rank) placeIndexState(path []string, decay, noDecay int) error {
	sd, _ := fieldPath(k.root, path...).(*statedict.Dict)
	state, ok := fieldPath(sd, "state").(*statedict.Dict)
	saved, ok2 := fieldPath(sd, "param_groups").(*statedict.List)
	if sd == nil || !ok || !ok2 {
		return fmt.Errorf("%w: %s is not a torch optimizer state_dict", ckpterr.ErrCorrupt, joinPath(path))
	}
	var mains *statedict.List
	if len(path) == 2 {
		if mains, ok = fieldPath(k.root, "optimizer", "fp32_from_fp16_params").(*statedict.List); !ok || len(mains.Items) != len(saved.Items) {
			return fmt.Errorf("%w: optimizer.fp32_from_fp16_params is not one list of main parameters per group", ckpterr.ErrCorrupt)
		}
	}
	// The rank's trainable parameters, group by group, in model order.
	members := make([][]string, len(saved.Items))
	for _, e := range k.model {
		name := e.Key.(string)
		t, ok := e.Value.(*statedict.Tensor)
		if !ok || isExtraState(name) {
			continue
		}
		g, err := groupOf(name, len(t.Shape), k.args.wdQKNorm, decay, noDecay)
		if err != nil {
			return err
		}
		members[g] = append(members[g], name)
	}
	k.state, k.steps = map[string][]namedTensor{}, map[string]*statedict.Tensor{}
	for g, gv := range saved.Items {
		ids, _ := fieldPath(gv.(*statedict.Dict), "params").(*statedict.List)
		if ids == nil || len(ids.Items) != len(members[g]) {
			return fmt.Errorf("%w: param_groups[%d] lists %s parameters, the rank's model has %d of that group (Megatron numbers a group's parameters in model order)", ckpterr.ErrCorrupt, g, countOf(ids), len(members[g]))
		}
		var groupMains []statedict.Value
		if mains != nil {
			l, ok := mains.Items[g].(*statedict.List)
			if !ok {
				return fmt.Errorf("%w: optimizer.fp32_from_fp16_params[%d] is %s", ckpterr.ErrCorrupt, g, describe(mains.Items[g]))
			}
			groupMains = l.Items
		}
		half := 0 // the group's 16-bit parameters so far: fp32_from_fp16_params lists their copies
		for j, name := range members[g] {
			param := k.byName[name]
			id := ids.Items[j]
			sv, _ := state.Get(id)
			st, ok := sv.(*statedict.Dict)
			if !ok {
				return fmt.Errorf("%w: no optimizer state for %s (id %s)", ckpterr.ErrCorrupt, name, describe(id))
			}
			var list []namedTensor
			if mains != nil && (param.DType == statedict.BFloat16 || param.DType == statedict.Float16) {
				if half >= len(groupMains) {
					return fmt.Errorf("%w: optimizer.fp32_from_fp16_params[%d] holds %d copies, %s needs one more", ckpterr.ErrCorrupt, g, len(groupMains), name)
				}
				main, ok := groupMains[half].(*statedict.Tensor)
				if !ok || !sameShape(main, param) {
					return fmt.Errorf("%w: optimizer.fp32_from_fp16_params[%d][%d] is not a copy of %s %v", ckpterr.ErrCorrupt, g, half, name, param.Shape)
				}
				list = append(list, namedTensor{"param", main})
				half++
			}
			for _, e := range st.Entries() {
				key, _ := e.Key.(string)
				t, isT := e.Value.(*statedict.Tensor)
				switch {
				case key == "step" && isT && len(t.Shape) == 0:
					k.steps[name] = t
				case isT && sameShape(t, param):
					list = append(list, namedTensor{key, t})
				default:
					return fmt.Errorf("%w: optimizer state %s of %s (id %s) is %s, not a tensor of its shape %v", ckpterr.ErrCorrupt, statedict.KeyString(e.Key), name, describe(id), describe(e.Value), param.Shape)
				}
			}
			k.state[name] = list
		}
		if half != len(groupMains) {
			return fmt.Errorf("%w: optimizer.fp32_from_fp16_params[%d] holds %d copies for %d 16-bit parameters", ckpterr.ErrCorrupt, g, len(groupMains), half)
		}
	}
	return nil
}

// step is a parameter's step counter, as the optimizer of its stage's first tensor rank
// kept it, the same on the stage's other ranks.
func (m *merger) step(e entry) (*statedict.Tensor, error) {
	stage := m.grid[e.stage]
	t := stage[0].steps[e.local]
	if t == nil {
		return nil, fmt.Errorf("%s: %w: no step counter for %s", stage[0].file, ckpterr.ErrCorrupt, e.local)
	}
	for _, k := range stage[1:] {
		u := k.steps[e.local]
		if u == nil {
			return nil, fmt.Errorf("%s: %w: no step counter for %s", k.file, ckpterr.ErrCorrupt, e.local)
		}
		eq, err := equalValue(t, u)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.file, err)
		}
		if !eq {
			return nil, fmt.Errorf("%s: %w: %s: the step counter differs between %s and %s", m.at, ckpterr.ErrCorrupt, e.name, stage[0].folder, k.folder)
		}
	}
	return t, nil
}

func sameShape(a, b *statedict.Tensor) bool {
	if len(a.Shape) != len(b.Shape) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	return true
}

func countOf(l *statedict.List) string {
	if l == nil {
		return "no"
	}
	return fmt.Sprint(len(l.Items))
}

func joinPath(path []string) string {
	s := ""
	for i, p := range path {
		if i > 0 {
			s += "."
		}
		s += p
	}
	return s
}
