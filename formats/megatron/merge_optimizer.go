package megatron

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// optimizer merges the optimizer state — distrib_optim.pt's buffers, or each rank's state
// by id (indexState) — into the form torch.distributed.checkpoint's get_optimizer_state_dict
// gives: "state" maps each parameter's global name to its step (the distributed
// optimizer's group step as the float32 scalar tensor torch's Adam keeps, or the
// parameter's own), its fp32 main copy ("fp32_param", Megatron's own name for it; none when
// the model's parameters are the optimizer's) and its moments, merged exactly as the
// weights; "param_groups" are the saved groups with the names of their parameters. nil when
// the run saved no optimizer.
func (m *merger) optimizer() (*statedict.Dict, error) {
	r0 := m.grid[0][0]
	ov, saved := r0.root.Get("optimizer")
	withState := 0
	for _, stage := range m.grid {
		for _, k := range stage {
			if k.optim != "" {
				withState++
			}
		}
	}
	total := len(m.grid) * len(m.grid[0])
	switch {
	case withState > 0 && withState < total:
		var missing []string
		for _, stage := range m.grid {
			for _, k := range stage {
				if k.optim == "" {
					missing = append(missing, k.folder)
				}
			}
		}
		return nil, fmt.Errorf("%s: %w: %s missing from %s", m.at, ckpterr.ErrCorrupt, DistribOptimFile, names(missing))
	case withState > 0 && !m.args.distributed:
		return nil, fmt.Errorf("%s: %w: the rank folders hold %s, but args.use_distributed_optimizer is not set", m.at, ckpterr.ErrCorrupt, DistribOptimFile)
	case !saved || ov == nil:
		if withState > 0 {
			return nil, fmt.Errorf("%s: %w: %s without the optimizer's other state (no optimizer in %s)", m.at, ckpterr.ErrCorrupt, DistribOptimFile, RankFile)
		}
		return nil, nil
	case withState == 0 && m.args.distributed:
		return nil, fmt.Errorf("%s: %w: the distributed optimizer keeps its moments in %s, which no rank folder holds", m.at, ckpterr.ErrCorrupt, DistribOptimFile)
	}
	var groups []*statedict.Dict
	var err error
	if withState > 0 {
		groups, err = m.paramGroups("optimizer", "optimizer", "param_groups")
	} else {
		groups, err = m.indexState()
	}
	if err != nil {
		return nil, err
	}
	assigned, err := assignGroups(groups, m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.at, err)
	}
	state := statedict.NewDict("")
	for _, e := range m.entries {
		if e.split == extraState {
			continue
		}
		ps := statedict.NewDict("")
		if withState == 0 {
			t, err := m.step(e)
			if err != nil {
				return nil, err
			}
			ps.Set("step", t)
		} else if step, ok := groups[assigned[e.name]].Get("step"); ok {
			t, err := scalarStep(e.name, step)
			if err != nil {
				return nil, fmt.Errorf("%s: param_groups[%d]: %w", r0.file, assigned[e.name], err)
			}
			ps.Set("step", t)
		}
		for _, s := range m.grid[e.stage][0].state[e.local] {
			t, err := m.merge(e, s.key, stateOf)
			if err != nil {
				return nil, err
			}
			name := s.key
			if name == "param" {
				name = "fp32_param"
			}
			ps.Set(name, t)
		}
		state.Set(e.name, ps)
	}
	pgs := &statedict.List{}
	for g, d := range groups {
		pg := statedict.NewDict("")
		for _, e := range d.Entries() {
			if e.Key != "params" {
				pg.Set(e.Key, e.Value)
			}
		}
		params := &statedict.List{}
		for _, e := range m.entries {
			if e.split != extraState && assigned[e.name] == g {
				params.Items = append(params.Items, e.name)
			}
		}
		pg.Set("params", params)
		pgs.Items = append(pgs.Items, pg)
	}
	out := statedict.NewDict("")
	out.Set("state", state)
	out.Set("param_groups", pgs)
	return out, nil
}

// scalarStep is a group's step as the per-parameter step tensor torch's Adam keeps: a
// float32 scalar, one storage per parameter (the optimizer increments each in place).
func scalarStep(param string, v statedict.Value) (*statedict.Tensor, error) {
	var f float64
	switch x := v.(type) {
	case int64:
		f = float64(x)
	case float64:
		f = x
	default:
		return nil, fmt.Errorf("%w: step is %s, not a number", ckpterr.ErrCorrupt, describe(v))
	}
	b := binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(f)))
	st := statedict.NewMappedStorage(param+".step", "cpu", statedict.Float32, b)
	return &statedict.Tensor{DType: statedict.Float32, Shape: []int64{}, Strides: []int64{}, Storage: st}, nil
}

// paramGroups are the optimizer's param_groups at path in each rank file (for the
// distributed optimizer optimizer → optimizer → param_groups, saved without their params),
// the same on every rank but for their params, which are left out.
func (m *merger) paramGroups(path ...string) ([]*statedict.Dict, error) {
	var out []*statedict.Dict
	for _, stage := range m.grid {
		for _, k := range stage {
			l, ok := fieldPath(k.root, path...).(*statedict.List)
			if !ok || len(l.Items) == 0 {
				return nil, fmt.Errorf("%s: %w: no %s (the optimizer's state_dict)", k.file, ckpterr.ErrCorrupt, strings.Join(path, "."))
			}
			var groups []*statedict.Dict
			for i, g := range l.Items {
				d, ok := g.(*statedict.Dict)
				if !ok {
					return nil, fmt.Errorf("%s: %w: param_groups[%d] is %s", k.file, ckpterr.ErrCorrupt, i, describe(g))
				}
				opts := statedict.NewDict(d.Class)
				for _, e := range d.Entries() {
					if e.Key != "params" {
						opts.Set(e.Key, e.Value)
					}
				}
				groups = append(groups, opts)
			}
			if out == nil {
				out = groups
				continue
			}
			eq, err := equalValue(&statedict.List{Items: dictItems(out)}, &statedict.List{Items: dictItems(groups)})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k.file, err)
			}
			if !eq {
				return nil, fmt.Errorf("%s: %w: the optimizer's param_groups differ from %s's", k.file, ckpterr.ErrCorrupt, m.grid[0][0].folder)
			}
		}
	}
	return out, nil
}

func dictItems(ds []*statedict.Dict) []statedict.Value {
	out := make([]statedict.Value, len(ds))
	for i, d := range ds {
		out[i] = d
	}
	return out
}

// fieldPath is d[k0][k1]…, nil where a step is missing or not a dict.
func fieldPath(d *statedict.Dict, keys ...string) statedict.Value {
	var v statedict.Value = d
	for _, k := range keys {
		dd, ok := v.(*statedict.Dict)
		if !ok {
			return nil
		}
		v, _ = dd.Get(k)
	}
	return v
}
