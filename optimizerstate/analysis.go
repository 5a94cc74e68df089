package optimizerstate

import (
	"fmt"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// Analysis describes the training state of a checkpoint: what `ckpt inspect --optimizer`
// prints, and its JSON.
type Analysis struct {
	// Optimizers are the optimizer states, each with its mapping onto the model.
	Optimizers []OptimizerInfo `json:"optimizers"`
	// Schedulers and Scalers are the LR scheduler and enabled or disabled GradScaler
	// states, with their kind (SchedulerKind) and a few values.
	Schedulers []Entry `json:"schedulers"`
	Scalers    []Entry `json:"scalers"`
	RNG        RNG     `json:"rng"`
	// Counters are integer entries outside the optimizer and scheduler states whose key
	// names an epoch, step or iteration.
	Counters []Entry `json:"counters"`
}

// Entry is one piece of training state: where it is, what kind, and a short summary.
type Entry struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	// Detail summarizes the entry for people ("last_epoch=2, _last_lr=[0.001]", "disabled").
	Detail string `json:"detail,omitempty"`
	// Value is a counter's value, typed (statedict.JSON).
	Value any `json:"value,omitempty"`
	// Values are the scheduler's or scaler's values Detail summarizes, typed
	// (statedict.JSON), by key.
	Values map[string]any `json:"values,omitempty"`
}

// OptimizerInfo describes one optimizer state and its mapping onto the model.
type OptimizerInfo struct {
	// Path, Kind, Form and Flat as in Found and Optimizer; Model, MappedBy and ParamOrder
	// as in Report.
	Path       string `json:"path"`
	Kind       string `json:"kind"`
	Form       Form   `json:"form"`
	Flat       bool   `json:"flattened,omitempty"`
	Model      string `json:"model,omitempty"`
	MappedBy   string `json:"mapped_by,omitempty"`
	ParamOrder string `json:"param_order,omitempty"`
	// Tied and NotTied count the parameters tied to a model entry and not (Found.TieCounts).
	Tied    int         `json:"tied"`
	NotTied int         `json:"not_tied"`
	Groups  []GroupInfo `json:"groups"`
	Params  []ParamInfo `json:"params"`
	Unused  []Skipped   `json:"unused,omitempty"`
	Orphans []string    `json:"orphans,omitempty"`
	// Error is why the parameters could not be mapped (a mismatch names the parameter and
	// the model entry at fault).
	Error string `json:"error,omitempty"`
}

// GroupInfo summarizes a param group: how many parameters, and its scalar options.
type GroupInfo struct {
	Params int `json:"params"`
	// Options are the group's hyperparameters as typed values (numbers, booleans, lists,
	// null; statedict.JSON), the params list left out.
	Options map[string]any `json:"options"`
}

// ParamInfo is one optimizer parameter: its id, group, the model entry it maps to (with
// that entry's shape) and its state tensors.
type ParamInfo struct {
	// ID is the parameter's id as saved: an int, or a name for FQN-keyed optimizers.
	ID    any    `json:"id"`
	Group int    `json:"group"`
	Name  string `json:"name,omitempty"`
	// Shape is the model entry's shape when mapped ([] for a 0-d tensor).
	Shape []int64       `json:"shape,omitzero"`
	State []StateTensor `json:"state,omitempty"`
}

// StateTensor is one per-parameter state value.
type StateTensor struct {
	Key string `json:"key"`
	// DType and Shape describe a tensor state (Shape [] for a 0-d tensor such as Adam's
	// step); both are absent for a non-tensor state.
	DType string  `json:"dtype,omitempty"`
	Shape []int64 `json:"shape,omitzero"`
	// Value is a non-tensor state's value, typed (statedict.JSON).
	Value any `json:"value,omitempty"`
}

// Analyze describes the training state of root; opts.Names are names files as for Find,
// opts.Config the checkpoint's config.json as for Decide.
func Analyze(root statedict.Value, opts Options) (*Analysis, error) {
	a := &Analysis{Optimizers: []OptimizerInfo{}, Schedulers: []Entry{}, Scalers: []Entry{}, Counters: []Entry{}, RNG: FindRNG(root)}
	found, err := find(root, opts.Names, opts.Config)
	if err != nil {
		return nil, err
	}
	for _, f := range found {
		a.Optimizers = append(a.Optimizers, describeOptimizer(f))
	}
	var visit func(v statedict.Value, path string)
	visit = func(v statedict.Value, path string) {
		switch x := v.(type) {
		case *statedict.Dict:
			if IsOptimizerState(x) || IsModelStateDict(x) {
				return
			}
			if kind, ok := SchedulerKind(x); ok {
				a.Schedulers = append(a.Schedulers, scalars(path, kind, x, "last_epoch", "_last_lr", "best"))
				return
			}
			if IsGradScalerState(x) {
				a.Scalers = append(a.Scalers, scalars(path, "GradScaler", x, "scale", "_growth_tracker"))
				return
			}
			if x.Len() == 0 && strings.Contains(strings.ToLower(path), "scaler") {
				a.Scalers = append(a.Scalers, Entry{Path: path, Kind: "GradScaler", Detail: "disabled"})
			}
			for _, e := range x.Entries() {
				key := statedict.KeyString(e.Key)
				if n, ok := e.Value.(int64); ok && counterKey(key) {
					a.Counters = append(a.Counters, Entry{Path: statedict.JoinName(path, key), Kind: "int", Detail: fmt.Sprint(n), Value: statedict.JSON(n)})
				}
				visit(e.Value, statedict.JoinName(path, key))
			}
		case *statedict.List:
			for i, it := range x.Items {
				visit(it, statedict.JoinName(path, fmt.Sprint(i)))
			}
		}
	}
	visit(root, "")
	return a, nil
}

func counterKey(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "epoch") || strings.Contains(k, "step") || strings.Contains(k, "iter")
}

// scalars is the entry of the state dict d at path: the given keys' values, typed and
// rendered as "k=v, …".
func scalars(path, kind string, d *statedict.Dict, keys ...string) Entry {
	e := Entry{Path: path, Kind: kind}
	var parts []string
	for _, k := range keys {
		if v, ok := d.Get(k); ok {
			if e.Values == nil {
				e.Values = map[string]any{}
			}
			e.Values[k] = statedict.JSON(v)
			if l, ok := v.(*statedict.List); ok {
				items := make([]string, len(l.Items))
				for i, it := range l.Items {
					items[i] = describeValue(it)
				}
				parts = append(parts, k+"=["+strings.Join(items, ",")+"]")
				continue
			}
			parts = append(parts, k+"="+describeValue(v))
		}
	}
	e.Detail = strings.Join(parts, ", ")
	return e
}

func describeOptimizer(f *Found) OptimizerInfo {
	info := OptimizerInfo{Path: f.Path, Model: f.ModelPath, Groups: []GroupInfo{}, Params: []ParamInfo{}}
	if f.Err != nil {
		info.Error = f.Err.Error()
	}
	o := f.Optimizer
	if o == nil {
		return info
	}
	info.Kind, info.Form, info.Flat, info.Orphans = o.Kind, o.Form, o.Flat, o.Orphans
	info.Tied, info.NotTied = f.TieCounts()
	if f.Mapping != nil {
		info.MappedBy, info.ParamOrder, info.Unused = f.Mapping.By, f.Mapping.Order, f.Mapping.Unused
	}
	for _, g := range o.Groups {
		gi := GroupInfo{Params: len(g.Params), Options: map[string]any{}}
		for _, e := range g.Options.Entries() {
			if k := statedict.KeyString(e.Key); k != "params" && k != "param_names" {
				gi.Options[k] = statedict.JSON(e.Value)
			}
		}
		info.Groups = append(info.Groups, gi)
	}
	for i, p := range o.Params {
		pi := ParamInfo{ID: statedict.JSON(p.ID), Group: p.Group, Name: p.Name}
		if f.Mapping != nil {
			mp := f.Mapping.Params[i]
			pi.Name, pi.Shape = mp.Name, shape(mp.Tensor.Shape)
		}
		if p.State != nil {
			for _, e := range p.State.Entries() {
				st := StateTensor{Key: statedict.KeyString(e.Key)}
				if t, ok := e.Value.(*statedict.Tensor); ok {
					st.DType, st.Shape = t.DType.String(), shape(t.Shape)
				} else {
					st.Value = statedict.JSON(e.Value)
				}
				pi.State = append(pi.State, st)
			}
		}
		info.Params = append(info.Params, pi)
	}
	return info
}

// shape is s, never nil: a 0-d tensor's shape is written [] rather than left out.
func shape(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}
