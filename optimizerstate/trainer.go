package optimizerstate

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/paramorder"
	"github.com/ckpt-dev/ckpt/statedict"
)

// registered is a model's parameters in the order the model registers them
// (model.named_parameters()), which numbers the parameters of an optimizer built from them.
type registered struct {
	// params are the candidates in that order, each under the name named_parameters()
	// gives it (the first of a tied tensor's names in that order); skipped the entries
	// that are not parameters.
	params  []ModelParam
	skipped []Skipped
	// from says where the order comes from (Mapping.Order): "" for the state dict's own.
	from string
	// model knows the model's modules (which are torch.nn.LayerNorm).
	model *paramorder.Model
}

// Where a model's parameter order comes from (Mapping.Order), besides the state dict's own.
const (
	// OrderFromStructure: numbered layers by number, weight before bias (paramorder.Structure).
	OrderFromStructure = "the names' structure"
)

// orderFromConfig words an order read from a config.json's model_type.
func orderFromConfig(m *paramorder.Model) string { return "model_type " + m.Type + " (config.json)" }

// OrderError is an optimizer state saved by position (Optimizer.state_dict()) whose model
// state dict does not list its entries in the order the model registers them — the order
// that numbers the optimizer's parameters; a safetensors file lists them by name — when
// that order cannot be derived either. ckpt does not guess: a names file settles it.
type OrderError struct {
	// Err says why the order cannot be derived: a *paramorder.UnorderedError, a
	// *paramorder.NestedError, or a *paramorder.StoredApartError (stored tensors that are no
	// parameter of the model).
	Err error
	// Config is why the checkpoint's config.json did not give the order, when it has one.
	Config error
}

func (e *OrderError) Error() string {
	var sa *paramorder.StoredApartError
	if errors.As(e.Err, &sa) {
		return fmt.Sprintf("%v, the parameters the optimizer state belongs to: it cannot be tied to the stored tensors", e.Err)
	}
	msg := fmt.Sprintf("the model state dict does not list its entries in the order the model registers them (which numbers the optimizer's parameters), and that order cannot be derived: %v", e.Err)
	if e.Config != nil {
		msg += fmt.Sprintf(" (config.json: %v)", e.Config)
	}
	return msg + "; list the parameter names in id order in a names file"
}

// Is makes errors.Is(err, ErrNotFitting) true.
func (e *OrderError) Is(target error) bool { return target == ErrNotFitting }

func (e *OrderError) Unwrap() error { return e.Err }

// registration is the registration order of the parameters of model: the order cfg (the
// checkpoint's model, nil if unknown; cfgErr why not) describes; else the state dict's own,
// the order the program that saved it inserted its entries in (torch.save of
// model.state_dict() keeps named_parameters() order); else — for a dict its reader lists by
// name (statedict.Dict.NameOrder: a safetensors file) — the order the names' structure fixes
// (paramorder.Structure), or an *OrderError when it fixes none.
func registration(model *statedict.Dict, cfg *paramorder.Model, cfgErr error) (*registered, error) {
	params, skipped := ModelParams(model)
	keys := make([]string, 0, model.Len())
	for _, e := range model.Entries() {
		if k, ok := e.Key.(string); ok {
			keys = append(keys, k)
		}
	}
	if cfg != nil {
		ord, err := cfg.Order(keys)
		var sa *paramorder.StoredApartError
		switch {
		case err == nil:
			return reorder(params, skipped, ord, orderFromConfig(cfg), cfg), nil
		case errors.As(err, &sa):
			return nil, &OrderError{Err: err}
		}
		cfgErr = err
	}
	if !model.NameOrder {
		m := cfg
		if m == nil {
			m = paramorder.Structure
		}
		return &registered{params: params, skipped: skipped, model: m}, nil
	}
	ord, err := paramorder.Structure.Order(keys)
	if err != nil {
		return nil, &OrderError{Err: err, Config: cfgErr}
	}
	return reorder(params, skipped, ord, OrderFromStructure, paramorder.Structure), nil
}

// byShapesAlone ties o to params when no order is known: each parameter's state fits one
// model parameter, and after those are taken, one of the rest, and so on until every
// parameter has its own — whatever order the model registers them in. ok is false when
// the shapes leave a choice.
func byShapesAlone(o *Optimizer, params []ModelParam) (*Mapping, bool) {
	assign := make([]int, len(o.Params))
	for i := range assign {
		assign[i] = -1
	}
	taken := make([]bool, len(params))
	for left := len(o.Params); left > 0; {
		progress := false
		for i, p := range o.Params {
			if assign[i] >= 0 {
				continue
			}
			fit := -1
			for j, c := range params {
				if taken[j] || checkState(p, c.Tensor.Shape) != "" {
					continue
				}
				if p.State == nil || fit >= 0 {
					fit = -2 // a choice: no state to check, or two fitting
					break
				}
				fit = j
			}
			if fit >= 0 {
				assign[i], taken[fit] = fit, true
				left--
				progress = true
			}
		}
		if !progress {
			return nil, false
		}
	}
	m := &Mapping{By: ByShapes}
	for _, j := range assign {
		m.Params = append(m.Params, params[j])
	}
	for j, c := range params {
		if !taken[j] {
			m.Unused = append(m.Unused, Skipped{c.Name, "not trained by this optimizer"})
		}
	}
	return m, true
}

// reorder lists params in ord's order, each under its first name there; the entries ord
// says are buffers are skipped.
func reorder(params []ModelParam, skipped []Skipped, ord *paramorder.Order, from string, m *paramorder.Model) *registered {
	of := map[string]int{}
	for i, p := range params {
		for _, n := range append([]string{p.Name}, p.Tied...) {
			of[n] = i
		}
	}
	r := &registered{skipped: slices.Clone(skipped), from: from, model: m}
	seen := make([]bool, len(params))
	for _, n := range ord.Params {
		i, ok := of[n]
		if !ok || seen[i] {
			continue
		}
		seen[i] = true
		p := params[i]
		r.params = append(r.params, ModelParam{Name: n, Tensor: p.Tensor,
			Tied: slices.DeleteFunc(append([]string{p.Name}, p.Tied...), func(s string) bool { return s == n })})
	}
	for _, n := range ord.Buffers {
		if i, ok := of[n]; ok && !seen[i] {
			seen[i] = true
			r.skipped = append(r.skipped, Skipped{n, "buffer"})
		}
	}
	return r
}

// trainerNoDecay are the names transformers' Trainer never decays
// (Trainer.get_decay_parameter_names, transformers 5.12): matched against the lowercased
// parameter name; the parameters of torch.nn.LayerNorm modules are not decayed either.
var trainerNoDecay = regexp.MustCompile(`bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)`)

// TrainerDecays reports whether transformers' Trainer applies weight decay to the
// parameter name of model m (its first group): not to biases and norms, by name, nor to
// the parameters of torch.nn.LayerNorm modules (m knows which they are; Structure knows
// none).
func TrainerDecays(m *paramorder.Model, name string) bool {
	return !trainerNoDecay.MatchString(strings.ToLower(name)) && !m.InLayerNorm(name)
}

// trainerShaped reports whether o has the groups transformers' Trainer builds
// (create_optimizer): two, the second without weight decay.
func trainerShaped(o *Optimizer) bool {
	if len(o.Groups) != 2 {
		return false
	}
	switch wd, _ := o.Groups[1].Options.Get("weight_decay"); x := wd.(type) {
	case float64:
		return x == 0
	case int64:
		return x == 0
	}
	return false
}

// byTrainerGrouping maps o onto r by the groups transformers' Trainer builds: group 0
// lists the parameters it decays, group 1 the others, each in registration order, a
// frozen parameter left out (where shapes decide which one, or fail as ambiguous).
func byTrainerGrouping(o *Optimizer, r *registered) (*Mapping, error) {
	var decay, keep []ModelParam
	for _, p := range r.params {
		if TrainerDecays(r.model, p.Name) {
			decay = append(decay, p)
		} else {
			keep = append(keep, p)
		}
	}
	m := &Mapping{By: ByTrainerGrouping, Order: r.from, Params: make([]ModelParam, len(o.Params))}
	taken := map[string]bool{}
	for g, cands := range [][]ModelParam{decay, keep} {
		what := "group 0 lists %d; the model has %d parameters the Trainer decays"
		if g == 1 {
			what = "group 1 lists %d; the model has %d parameters the Trainer does not decay"
		}
		assign, err := newSolver(o, cands, [][]int{o.Groups[g].Params}, what).solve()
		if err != nil {
			return nil, err
		}
		for _, i := range o.Groups[g].Params {
			m.Params[i] = cands[assign[i]]
			taken[cands[assign[i]].Name] = true
		}
	}
	m.Unused = slices.Clone(r.skipped)
	for _, p := range r.params {
		if !taken[p.Name] {
			m.Unused = append(m.Unused, Skipped{p.Name, "not trained by this optimizer"})
		}
	}
	return m, nil
}
