// Package optimizerstate understands the training state saved next to a model's weights —
// torch.optim state dicts, LR scheduler and GradScaler state, RNG states — so that a
// converted checkpoint stays consistent with its converted weights and training resumes
// exactly where it stopped.
//
// An optimizer state dict identifies parameters by position (Optimizer.state_dict(): int
// ids numbering the parameters of all groups in order) or by name (DCP's
// get_optimizer_state_dict: fully qualified names, nested or flattened into
// "state.FQN.KEY" / "param_groups.FQN.OPTION" keys as torchtitan saves them). Positions only mean something against
// the model, so [Map] reconstructs which model state-dict entry each position is, checking
// every state tensor's shape against its parameter's; when the shapes cannot decide, it
// says so instead of guessing, and a list of names can be given instead.
package optimizerstate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Form is how an optimizer state dict identifies its parameters.
type Form string

// The two forms torch writes.
const (
	// ByIndex is Optimizer.state_dict(): "state" keyed by int ids that number the
	// parameters of all groups in order (digit strings after a DCP round trip).
	ByIndex Form = "index"
	// ByName is torch.distributed.checkpoint's get_optimizer_state_dict: "state" keyed by
	// fully qualified parameter names, which also fill the groups' "params" lists.
	ByName Form = "fqn"
)

// Optimizer is a parsed optimizer state dict.
type Optimizer struct {
	// Kind names the optimizer class as far as its group options tell ("AdamW", "SGD",
	// "Adafactor (transformers)", …), or "unknown".
	Kind string
	Form Form
	// Flat is set for the flattened ByName form ("state.FQN.KEY", "param_groups.FQN.OPTION"
	// keys in one dict; see parseFlat), whose groups are rebuilt from their options.
	Flat bool
	// Groups are the param_groups, in order.
	Groups []Group
	// Params lists every parameter the groups name, in id order (group by group).
	Params []Param
	// Orphans are state keys no group lists; torch keeps their state unattached on load.
	Orphans []string
}

// Group is one entry of param_groups.
type Group struct {
	// Params are indices into Optimizer.Params.
	Params []int
	// Options is the group dict as saved (hyperparameters, params, param_names); for a
	// flattened state, the options its parameters' entries carry.
	Options *statedict.Dict
}

// Param is one parameter an optimizer lists.
type Param struct {
	// ID is the parameter's id as the groups list it: an int64 position or a name.
	ID statedict.Value
	// Group is the index of the group listing it.
	Group int
	// Name is the name saved with the parameter: its FQN (ByName) or its entry in the
	// group's param_names (torch ≥ 2.6 optimizers built from named_parameters()); "" when
	// only its position is known.
	Name string
	// State is the parameter's per-parameter state, nil before its first step.
	State *statedict.Dict
}

// IDString renders the id as torch prints it.
func (p Param) IDString() string { return statedict.KeyString(p.ID) }

// IsOptimizerState reports whether v is a torch.optim state dict: a dict with a "state"
// dict and a "param_groups" list, or the flattened form of one (keys "state.FQN.KEY" and
// "param_groups.FQN.OPTION" only).
func IsOptimizerState(v statedict.Value) bool {
	d, ok := v.(*statedict.Dict)
	if !ok {
		return false
	}
	if isFlat(d) {
		return true
	}
	s, _ := d.Get("state")
	pg, _ := d.Get("param_groups")
	_, sd := s.(*statedict.Dict)
	_, gl := pg.(*statedict.List)
	return sd && gl
}

// Parse reads an optimizer state dict. Unknown optimizers parse too: their state is kept
// as generic per-parameter values. An optimizer state dict whose param_groups or state do
// not hold what torch's optimizers write is ckpterr.ErrCorrupt.
func Parse(d *statedict.Dict) (*Optimizer, error) {
	if !IsOptimizerState(d) {
		return nil, fmt.Errorf("not an optimizer state dict (needs a \"state\" dict and a \"param_groups\" list)")
	}
	o, err := parse(d)
	if err != nil && ckpterr.CorruptCause(err) && !errors.Is(err, ckpterr.ErrCorrupt) {
		return nil, fmt.Errorf("%w: %w", ckpterr.ErrCorrupt, err)
	}
	return o, err
}

// parse is Parse for a dict IsOptimizerState accepts.
func parse(d *statedict.Dict) (*Optimizer, error) {
	if isFlat(d) {
		return parseFlat(d)
	}
	sv, _ := d.Get("state")
	gv, _ := d.Get("param_groups")
	state, groups := sv.(*statedict.Dict), gv.(*statedict.List)
	o := &Optimizer{}
	seen := map[string]int{}
	for gi, g := range groups.Items {
		gd, ok := g.(*statedict.Dict)
		if !ok {
			return nil, fmt.Errorf("param_groups[%d] is a %T, not a dict", gi, g)
		}
		pv, _ := gd.Get("params")
		plist, ok := pv.(*statedict.List)
		if !ok {
			return nil, fmt.Errorf("param_groups[%d] has no params list", gi)
		}
		var names []statedict.Value
		if nv, ok := gd.Get("param_names"); ok {
			nl, ok := nv.(*statedict.List)
			if !ok || len(nl.Items) != len(plist.Items) {
				return nil, fmt.Errorf("param_groups[%d]: param_names does not list one name per parameter", gi)
			}
			names = nl.Items
		}
		grp := Group{Options: gd}
		for k, id := range plist.Items {
			p := Param{Group: gi}
			switch x := id.(type) {
			case int64:
				p.ID = x
			case string:
				p.ID, p.Name = x, x
			default:
				return nil, fmt.Errorf("param_groups[%d].params[%d] is a %T, not an int id or a name", gi, k, id)
			}
			form := ByIndex
			if _, ok := p.ID.(string); ok {
				form = ByName
			}
			if o.Form == "" {
				o.Form = form
			} else if o.Form != form {
				return nil, fmt.Errorf("param_groups[%d].params[%d]: ids mix positions and names", gi, k)
			}
			if names != nil {
				n, ok := names[k].(string)
				if !ok {
					return nil, fmt.Errorf("param_groups[%d].param_names[%d] is a %T, not a name", gi, k, names[k])
				}
				p.Name = n
			}
			key := p.IDString()
			if prev, dup := seen[key]; dup {
				return nil, fmt.Errorf("parameter %s is listed twice (param_groups[%d] and [%d])", key, o.Params[prev].Group, gi)
			}
			seen[key] = len(o.Params)
			grp.Params = append(grp.Params, len(o.Params))
			o.Params = append(o.Params, p)
		}
		o.Groups = append(o.Groups, grp)
	}
	if o.Form == "" {
		o.Form = ByIndex
	}
	for _, e := range state.Entries() {
		key, ok := stateKey(e.Key, o.Form)
		if !ok {
			return nil, fmt.Errorf("state key %s (%T) is not a parameter id", statedict.KeyString(e.Key), e.Key)
		}
		i, listed := seen[key]
		if !listed {
			o.Orphans = append(o.Orphans, key)
			continue
		}
		st, ok := e.Value.(*statedict.Dict)
		if !ok {
			return nil, fmt.Errorf("state[%s] is a %T, not a dict", key, e.Value)
		}
		o.Params[i].State = st
	}
	o.Kind = kindOf(o)
	return o, nil
}

// stateKey renders a state key as the id it stands for. A DCP round trip turns int keys
// into digit strings ("0"), which still name positions.
func stateKey(k statedict.Value, form Form) (string, bool) {
	switch x := k.(type) {
	case int64:
		return strconv.FormatInt(x, 10), form == ByIndex
	case string:
		if form == ByName {
			return x, true
		}
		n, err := strconv.ParseInt(x, 10, 64)
		return strconv.FormatInt(n, 10), err == nil && strconv.FormatInt(n, 10) == x
	}
	return "", false
}

// kinds recognizes optimizer classes by the option keys their groups carry (and, where
// options are shared, a state key), checked in order.
var kinds = []struct {
	kind  string
	keys  []string
	state string
}{
	{"Adafactor (transformers)", []string{"scale_parameter", "relative_step", "warmup_init"}, ""},
	{"Adafactor", []string{"beta2_decay"}, ""},
	{"Adam", []string{"betas", "amsgrad"}, ""},
	{"NAdam", []string{"momentum_decay"}, ""},
	{"SGD", []string{"momentum", "dampening", "nesterov"}, ""},
	{"Adagrad", []string{"lr_decay", "initial_accumulator_value"}, ""},
	{"RMSprop", []string{"alpha", "centered"}, ""},
	{"Adadelta", []string{"rho"}, ""},
	{"Rprop", []string{"etas", "step_sizes"}, ""},
	{"ASGD", []string{"lambd", "t0"}, ""},
	{"LBFGS", []string{"history_size", "line_search_fn"}, ""},
	{"Adamax", []string{"betas"}, "exp_inf"},
}

func kindOf(o *Optimizer) string {
	if len(o.Groups) == 0 {
		return "unknown"
	}
	g := o.Groups[0].Options
	for _, k := range kinds {
		if slices.ContainsFunc(k.keys, func(key string) bool { _, ok := g.Get(key); return !ok }) ||
			k.state != "" && !o.hasState(k.state) {
			continue
		}
		if k.kind == "Adam" {
			// AdamW derives from Adam since torch 2.7 and sets decoupled_weight_decay.
			switch v, ok := g.Get("decoupled_weight_decay"); {
			case !ok:
				return "Adam or AdamW"
			case v == true:
				return "AdamW"
			}
		}
		return k.kind
	}
	return "unknown"
}

func (o *Optimizer) hasState(key string) bool {
	for _, p := range o.Params {
		if p.State != nil {
			if _, ok := p.State.Get(key); ok {
				return true
			}
		}
	}
	return false
}

// paramShaped are the state keys of torch.optim and transformers optimizers that hold
// one value per parameter element: their shape is the parameter's.
var paramShaped = map[string]bool{
	"exp_avg":         true, // Adam, AdamW, NAdam, RAdam, Adamax, Adafactor (transformers)
	"exp_avg_sq":      true, // Adam, AdamW, NAdam, RAdam, Adafactor (transformers, vectors)
	"max_exp_avg_sq":  true, // Adam, AdamW with amsgrad
	"momentum_buffer": true, // SGD, RMSprop
	"sum":             true, // Adagrad
	"square_avg":      true, // RMSprop, Adadelta
	"grad_avg":        true, // RMSprop (centered)
	"acc_delta":       true, // Adadelta
	"exp_inf":         true, // Adamax
	"ax":              true, // ASGD
	"prev":            true, // Rprop
	"step_size":       true, // Rprop
	"variance":        true, // Adafactor (torch, vectors)
}

// scalarState are per-parameter counters and scalars: 0-dim tensors or numbers.
var scalarState = map[string]bool{"step": true, "mu_product": true, "eta": true, "mu": true, "RMS": true}

// ExpectedShape returns the shape the state tensor named key must have for a parameter of
// shape param, and false for keys ckpt does not know (their tensors are carried along
// unchecked). Factored second moments have their own shapes: transformers' Adafactor keeps
// exp_avg_sq_row = param[:-1] and exp_avg_sq_col = param[:-2]+param[-1:]; torch's keeps
// row_var and col_var with the last, resp. second-to-last, dimension set to 1.
func ExpectedShape(key string, param []int64) ([]int64, bool) {
	n := len(param)
	switch {
	case paramShaped[key]:
		return param, true
	case scalarState[key]:
		return []int64{}, true
	case n < 2 && (key == "exp_avg_sq_row" || key == "exp_avg_sq_col" || key == "row_var" || key == "col_var"):
		return nil, true // factored state only exists for matrices
	case key == "exp_avg_sq_row":
		return slices.Clone(param[:n-1]), true
	case key == "exp_avg_sq_col":
		return append(slices.Clone(param[:n-2]), param[n-1]), true
	case key == "row_var":
		s := slices.Clone(param)
		s[n-1] = 1
		return s, true
	case key == "col_var":
		s := slices.Clone(param)
		s[n-2] = 1
		return s, true
	}
	return nil, false
}

// checkState compares each known state tensor of p with a parameter of shape shape and
// describes the first disagreement ("" if none).
func checkState(p Param, shape []int64) string {
	if p.State == nil {
		return ""
	}
	for _, e := range p.State.Entries() {
		key, _ := e.Key.(string)
		t, ok := e.Value.(*statedict.Tensor)
		if !ok {
			continue
		}
		want, known := ExpectedShape(key, shape)
		if !known {
			continue
		}
		if want == nil {
			return fmt.Sprintf("%s %v exists only for matrices, the parameter is %v", key, t.Shape, shape)
		}
		switch {
		case slices.Equal(t.Shape, want):
		case slices.Equal(want, shape):
			return fmt.Sprintf("%s has shape %v, the parameter %v", key, t.Shape, shape)
		default:
			return fmt.Sprintf("%s has shape %v, a parameter of shape %v needs %v", key, t.Shape, shape, want)
		}
	}
	return ""
}
