package zero

import (
	"fmt"
	"slices"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// baseState is the torch optimizer's state over a rank's flat partitions: stages 1 and 2
// save optimizer.state_dict() as base_optimizer_state ({"state": {group: …},
// "param_groups"}), or with elastic_checkpoint a list of per-group states; stage 3 saves it
// as optimizer_state_dict.
func baseState(osd *statedict.Dict, stage int64) (*statedict.Dict, error) {
	key := "base_optimizer_state"
	if stage == 3 {
		key = "optimizer_state_dict"
	}
	switch v := field(osd, key).(type) {
	case *statedict.Dict:
		if _, ok := field(v, "state").(*statedict.Dict); !ok {
			return nil, fmt.Errorf("%w: %s has no \"state\" dict", ckpterr.ErrCorrupt, key)
		}
		return v, nil
	case *statedict.List:
		// elastic_checkpoint: the per-group states without padding, no param_groups.
		st := statedict.NewDict("")
		for g, it := range v.Items {
			st.Set(int64(g), it)
		}
		out := statedict.NewDict("")
		out.Set("state", st)
		return out, nil
	default:
		return nil, fmt.Errorf("%w: no optimizer state (%s is %T)", ckpterr.ErrCorrupt, key, v)
	}
}

// optimizer consolidates the optimizer state of the ranks (bases, one per file of optims)
// as Options.Optimizer describes: every 1-D per-group state (exp_avg, exp_avg_sq, …) over
// the flat partitions is cut into the parameters exactly as the fp32 partitions are (the
// extraction DeepSpeed's ds_to_universal.py makes with param_slice_mappings), and each
// parameter gets its own copy of its group's other state (step).
func (c *consolidator) optimizer(optims []string, bases []*statedict.Dict) (*statedict.Dict, error) {
	shapes := c.models[0].paramShapes
	perParam := statedict.NewDict("")
	groupNames := make([][]string, len(shapes))
	params := map[string]*statedict.Dict{}
	for g, group := range shapes {
		for _, e := range group.Entries() {
			name := statedict.KeyString(e.Key)
			d := statedict.NewDict("")
			params[name] = d
			perParam.Set(name, d)
			groupNames[g] = append(groupNames[g], name)
		}
	}
	state := func(r, g int) (*statedict.Dict, error) {
		st, _ := field(bases[r], "state").(*statedict.Dict)
		v, ok := st.Get(int64(g))
		d, isDict := v.(*statedict.Dict)
		if !ok || !isDict {
			return nil, fmt.Errorf("%s: %w: the optimizer state has no state for group %d (%d groups in param_shapes)", optims[r], ckpterr.ErrCorrupt, g, len(shapes))
		}
		return d, nil
	}
	// Keys in rank 0's order, each group's own.
	for g := range shapes {
		st0, err := state(0, g)
		if err != nil {
			return nil, err
		}
		for _, e := range st0.Entries() {
			key := statedict.KeyString(e.Key)
			if t, ok := e.Value.(*statedict.Tensor); ok && len(t.Shape) == 1 {
				continue // a moment: consolidated below, over every group at once
			}
			for _, name := range groupNames[g] {
				v := e.Value
				if t, ok := v.(*statedict.Tensor); ok {
					if v, err = own(name+"."+key, t); err != nil {
						return nil, fmt.Errorf("%s: group %d %s: %w", optims[0], g, key, err)
					}
				}
				params[name].Set(key, v)
			}
		}
	}
	// The flat moments' keys: every group's, in rank 0's order of first appearance (a
	// key one group lacks is an error below, never dropped).
	var flat []string
	for g := range shapes {
		st0, err := state(0, g)
		if err != nil {
			return nil, err
		}
		for _, e := range st0.Entries() {
			key := statedict.KeyString(e.Key)
			if t, ok := e.Value.(*statedict.Tensor); ok && len(t.Shape) == 1 && !slices.Contains(flat, key) {
				flat = append(flat, key)
			}
		}
	}
	for _, key := range flat {
		moments := make([][]*statedict.Tensor, len(bases)) // per rank, per group
		var dt statedict.DType
		for r := range bases {
			for g := range shapes {
				st, err := state(r, g)
				if err != nil {
					return nil, err
				}
				t, ok := field(st, key).(*statedict.Tensor)
				if !ok || len(t.Shape) != 1 {
					return nil, fmt.Errorf("%s: %w: group %d's %s is %T, rank 0's a flat tensor", optims[r], ckpterr.ErrCorrupt, g, key, field(st, key))
				}
				if r == 0 && g == 0 {
					dt = t.DType
				}
				moments[r] = append(moments[r], t)
			}
		}
		put := func(name string, t *statedict.Tensor) { params[name].Set(key, t) }
		var err error
		if c.stage <= 2 {
			err = c.zero2(moments, dt, put)
		} else {
			err = c.zero3(moments, dt, put)
		}
		if err != nil {
			return nil, fmt.Errorf("optimizer state %s: %w", key, err)
		}
	}
	groups := &statedict.List{}
	saved, _ := field(bases[0], "param_groups").(*statedict.List)
	for g, names := range groupNames {
		pg := statedict.NewDict("")
		if saved != nil && g < len(saved.Items) {
			if d, ok := saved.Items[g].(*statedict.Dict); ok {
				for _, e := range d.Entries() {
					if statedict.KeyString(e.Key) != "params" {
						pg.Set(e.Key, e.Value)
					}
				}
			}
		}
		list := &statedict.List{}
		for _, n := range names {
			list.Items = append(list.Items, n)
		}
		pg.Set("params", list)
		groups.Items = append(groups.Items, pg)
	}
	out := statedict.NewDict("")
	out.Set("state", perParam)
	out.Set("param_groups", groups)
	return out, nil
}

// own returns a tensor of t's value with a storage of its own (read from t's), so that
// parameters sharing their group's step do not share one tensor: torch's optimizers
// increment each parameter's step in place.
func own(key string, t *statedict.Tensor) (*statedict.Tensor, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	n := t.NumEl()
	if n > 1 && !t.IsContiguous() {
		return nil, fmt.Errorf("%w: a non-contiguous %v tensor", ckpterr.ErrUnsupported, t.Shape)
	}
	es := int64(t.DType.Size())
	st := statedict.NewReaderStorage(key, t.Storage.Location, t.DType, t.Storage, t.Offset*es, n*es)
	st.File = t.Storage.File
	out := *t
	out.Storage, out.Offset, out.Strides = st, 0, statedict.ContiguousStrides(t.Shape)
	return &out, nil
}
