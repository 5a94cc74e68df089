package optimizerstate

import (
	"fmt"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// ParamState is an optimizer's state for one model parameter.
type ParamState struct {
	// Optimizer is the flattened path of the optimizer state dict ("optimizer").
	Optimizer string
	// Model is the path of the model state dict the optimizer maps onto.
	Model string
	// ID is the parameter's id in the optimizer (its position, or its name).
	ID statedict.Value
	// Group is the index of its param group, Options that group's hyperparameters.
	Group   int
	Options *statedict.Dict
	// State holds the per-parameter state (exp_avg, exp_avg_sq, step, momentum_buffer,
	// …); nil when the optimizer has none for it yet.
	State *statedict.Dict
}

// Tensor returns the state tensor key ("exp_avg"), or nil.
func (p *ParamState) Tensor(key string) *statedict.Tensor {
	if p.State == nil {
		return nil
	}
	v, _ := p.State.Get(key)
	t, _ := v.(*statedict.Tensor)
	return t
}

// StateFor finds the optimizer state of the model parameter named name (its flattened name
// in the checkpoint, "model.fc1.weight", or its key in the model state dict, "fc1.weight";
// a tied alias also names it) in root: the optimizer is mapped onto its model
// as Find does, so ids, positions and shapes are checked, not guessed. An optimizer that
// does not fit its model is an error (matching ErrNotFitting); a name no optimizer trains
// is an error listing how many parameters the optimizers do train.
func StateFor(root statedict.Value, name string) (*ParamState, error) {
	found, err := Find(root, nil)
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no optimizer state in the checkpoint")
	}
	trained := 0
	for _, f := range found {
		if f.Err != nil {
			return nil, fmt.Errorf("optimizer state %q: %w", f.Path, f.Err)
		}
		if f.Mapping == nil {
			continue
		}
		for i, mp := range f.Mapping.Params {
			trained++
			if !names(f.ModelPath, mp, name) {
				continue
			}
			p := f.Optimizer.Params[i]
			ps := &ParamState{Optimizer: f.Path, Model: f.ModelPath, ID: p.ID, Group: p.Group, State: p.State}
			if p.Group >= 0 && p.Group < len(f.Optimizer.Groups) {
				ps.Options = f.Optimizer.Groups[p.Group].Options
			}
			return ps, nil
		}
	}
	return nil, fmt.Errorf("no optimizer trains %q (%d parameters mapped: %s)", name, trained, strings.Join(sample(found), ", "))
}

// names reports whether name names the model parameter mp of the model state dict at
// model.
func names(model string, mp ModelParam, name string) bool {
	for _, n := range append([]string{mp.Name}, mp.Tied...) {
		if name == n || name == statedict.JoinName(model, n) {
			return true
		}
	}
	return false
}

// sample names a few mapped parameters, for errors.
func sample(found []*Found) []string {
	var out []string
	for _, f := range found {
		if f.Mapping == nil {
			continue
		}
		for _, mp := range f.Mapping.Params {
			if len(out) == 3 {
				return append(out, "…")
			}
			out = append(out, statedict.JoinName(f.ModelPath, mp.Name))
		}
	}
	return out
}
