package optimizerstate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// Fate is what a conversion did to one model state-dict entry.
type Fate struct {
	// Name is the entry's key in the output.
	Name string
	// Dropped is set when the entry was left out of the output.
	Dropped bool
	// Location is the device tag of the entry's storage in the output.
	Location string
}

// Report says what Rewrite did to one optimizer state dict.
type Report struct {
	// Path is the optimizer state's flattened name; Kind and Form as in Optimizer.
	Path string `json:"path"`
	Kind string `json:"kind"`
	Form Form   `json:"form"`
	// Flat is set for the flattened FQN form (Optimizer.Flat).
	Flat bool `json:"flattened,omitempty"`
	// Model is the path of the model state dict it was mapped onto, MappedBy how (the
	// Mapping's By: "fqn", "shapes", "trainer grouping", …), and ParamOrder where the order
	// its parameters register in was read (Mapping.Order).
	Model      string `json:"model,omitempty"`
	MappedBy   string `json:"mapped_by,omitempty"`
	ParamOrder string `json:"param_order,omitempty"`
	// Tied and NotTied count the optimizer's parameters (as saved) whose state was and was
	// not tied to a model entry.
	Tied    int `json:"tied"`
	NotTied int `json:"not_tied"`
	// Params counts the parameters in the output.
	Params int `json:"params"`
	// Dropped lists the ids (as saved) of parameters removed with their model entries.
	Dropped []string `json:"dropped,omitempty"`
	// Renamed counts FQN keys and param_names entries renamed with their model entries.
	Renamed int `json:"renamed,omitempty"`
	// Renumbered is set when ids were renumbered (a parameter was dropped, or digit-string
	// ids from a DCP round trip became ints again).
	Renumbered bool `json:"renumbered,omitempty"`
	// Unmapped says why the parameters could not be tied to the model (the mapping error);
	// moments then keep their own remapped tags.
	Unmapped string `json:"unmapped,omitempty"`
}

// Rewrite makes out — the converted copy of f.Dict, whose tensors are already remapped
// — consistent with the converted model: parameters whose model entry was dropped leave
// "state" and their group (ByIndex ids are renumbered densely, in order), renamed entries
// rename FQN keys and param_names, and each parameter's state tensors take the location
// of its parameter's storage. The "step" counter stays a CPU tensor when it is one, as
// torch keeps it (capturable and fused optimizers keep it on the device, so it follows the
// parameter there). Digit-string ids left by a DCP round trip become ints, as
// Optimizer.load_state_dict matches them to the groups' int ids. fate reports what the
// conversion did to a model entry of f.Model (ok false for a key it does not know).
//
// Without a mapping (f.Err, or no model) the ids are kept, and a conversion that dropped
// or renamed model parameters is refused: the optimizer state could not follow.
//
// It returns, for a mapped optimizer, each per-parameter state tensor of the rewritten
// out with its parameter, in state order.
func Rewrite(out *statedict.Dict, f *Found, fate func(key string) (Fate, bool)) (*Report, []Follows, error) {
	o := f.Optimizer
	rep := &Report{Path: f.Path, Kind: o.Kind, Form: o.Form, Flat: o.Flat, Model: f.ModelPath}
	rep.Tied, rep.NotTied = f.TieCounts()
	n := len(o.Params)
	kept := make([]bool, n)
	ids := make([]statedict.Value, n)
	names := make([]string, n)
	locs := make([]string, n)
	params := make([]string, n) // the output name of each parameter's model entry
	if f.Mapping != nil {
		rep.MappedBy, rep.ParamOrder = f.Mapping.By, f.Mapping.Order
	} else {
		if f.Err != nil {
			rep.Unmapped = f.Err.Error()
		}
		if changed := changedEntries(f.Model, fate); changed != "" {
			return nil, nil, fmt.Errorf("%s: model entry %s, but the optimizer state cannot follow: %v", f.Path, changed, unmappedWhy(f))
		}
	}
	next := int64(0)
	for i, p := range o.Params {
		kept[i], ids[i], names[i] = true, p.ID, p.Name
		if f.Mapping != nil {
			mp := f.Mapping.Params[i]
			kept[i] = false
			known := false
			for _, key := range append([]string{mp.Name}, mp.Tied...) {
				ft, ok := fate(key)
				known = known || ok
				if ok && !ft.Dropped {
					kept[i], locs[i], params[i] = true, ft.Location, ft.Name
					if ft.Name != key && p.Name != "" {
						names[i] = renamed(p.Name, key, ft.Name)
					}
					if ft.Name != key && o.Form == ByName {
						ids[i] = renamed(p.IDString(), key, ft.Name)
					}
					break
				}
			}
			if !known {
				// State is dropped only for parameters the conversion dropped, never because
				// the mapping and the conversion disagree about the model.
				return nil, nil, fmt.Errorf("%s: optimizer parameter %s maps to model entry %q of %q, which the conversion does not know", f.Path, p.IDString(), mp.Name, f.ModelPath)
			}
		}
		if !kept[i] {
			rep.Dropped = append(rep.Dropped, p.IDString())
			continue
		}
		if names[i] != p.Name {
			rep.Renamed++
		}
		if o.Form == ByIndex {
			if ids[i] != next {
				rep.Renumbered = true
			}
			ids[i] = next
			next++
		}
		rep.Params++
	}
	index := map[string]int{}
	for i, p := range o.Params {
		index[p.IDString()] = i
	}
	r := rewritten{o: o, f: f, kept: kept, ids: ids, locs: locs, params: params}
	if o.Flat {
		follows, err := r.flat(out)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		return rep, follows, nil
	}
	var follows []Follows
	if sv, ok := out.Get("state"); ok {
		st, ok := sv.(*statedict.Dict)
		if !ok {
			return nil, nil, fmt.Errorf("%s: state is a %T", f.Path, sv)
		}
		ns := statedict.NewDict(st.Class)
		ns.Attrs = st.Attrs
		moved := map[*statedict.Storage]*statedict.Storage{}
		for _, e := range st.Entries() {
			key, _ := stateKey(e.Key, o.Form)
			i, listed := index[key]
			switch {
			case !listed:
				ns.Set(e.Key, e.Value) // an orphan: torch keeps it as is
			case kept[i]:
				if k, isStr := e.Key.(string); isStr && o.Form == ByIndex && k == key {
					rep.Renumbered = true
				}
				nv := relocate(e.Value, locs[i], "", moved)
				ns.Set(ids[i], nv)
				if pd, ok := nv.(*statedict.Dict); ok {
					for _, pe := range pd.Entries() {
						follows = r.follow(follows, i, statedict.KeyString(pe.Key), pe.Value)
					}
				}
			}
		}
		out.Set("state", ns)
	}
	gv, _ := out.Get("param_groups")
	groups, ok := gv.(*statedict.List)
	if !ok || len(groups.Items) != len(o.Groups) {
		return nil, nil, fmt.Errorf("%s: param_groups changed during conversion (were entries inside the optimizer state dropped?)", f.Path)
	}
	ng := &statedict.List{}
	for gi, g := range o.Groups {
		od, ok := groups.Items[gi].(*statedict.Dict)
		if !ok {
			return nil, nil, fmt.Errorf("%s: param_groups.%d is a %T", f.Path, gi, groups.Items[gi])
		}
		params, pnames := &statedict.List{}, &statedict.List{}
		for _, i := range g.Params {
			if kept[i] {
				params.Items = append(params.Items, ids[i])
				pnames.Items = append(pnames.Items, names[i])
			}
		}
		nd := statedict.NewDict(od.Class)
		nd.Attrs = od.Attrs
		for _, e := range od.Entries() {
			switch e.Key {
			case "params":
				nd.Set(e.Key, params)
			case "param_names":
				nd.Set(e.Key, pnames)
			default:
				nd.Set(e.Key, e.Value)
			}
		}
		ng.Items = append(ng.Items, nd)
	}
	out.Set("param_groups", ng)
	return rep, follows, nil
}

// rewritten is what Rewrite decided for each optimizer parameter, by index: whether it
// stays, its id, the location and output name of its model entry.
type rewritten struct {
	o      *Optimizer
	f      *Found
	kept   []bool
	ids    []statedict.Value
	locs   []string
	params []string
}

// follow appends to fs the state value v (key KEY) of parameter i if it is a tensor tied
// to its model entry.
func (r *rewritten) follow(fs []Follows, i int, key string, v statedict.Value) []Follows {
	if t, ok := v.(*statedict.Tensor); ok && r.params[i] != "" {
		fs = append(fs, Follows{Tensor: t, Param: r.params[i], Shape: r.f.Mapping.Params[i].Tensor.Shape, Key: key})
	}
	return fs
}

// flat rewrites a flattened optimizer state dict in place, entry by entry in its order: the
// entries of dropped parameters leave, renamed parameters' keys take the new FQN, each
// state value takes its parameter's location (a CPU "step" stays on the CPU). Entries of
// parameters no group names are kept as they are. Renames that make two keys one are an
// error.
func (r *rewritten) flat(out *statedict.Dict) ([]Follows, error) {
	index := make(map[string]int, len(r.o.Params))
	for i, p := range r.o.Params {
		index[p.Name] = i
	}
	entries := slices.Clone(out.Entries())
	out.Clear()
	moved := map[*statedict.Storage]*statedict.Storage{}
	var follows []Follows
	seen := make(map[string]bool, len(entries))
	add := func(k string, v statedict.Value) error {
		if seen[k] {
			return fmt.Errorf("the parameters' renames give two entries the key %q", k)
		}
		seen[k] = true
		out.Append(k, v)
		return nil
	}
	for _, e := range entries {
		k, _ := e.Key.(string)
		var fqn, key string
		var ok bool
		group := strings.HasPrefix(k, flatGroups)
		if group {
			fqn, key, ok = splitGroupKey(k)
		} else {
			fqn, key, ok = splitStateKey(k, index)
		}
		if !ok {
			if err := add(k, e.Value); err != nil {
				return nil, err
			}
			continue
		}
		i := index[fqn]
		if !r.kept[i] {
			continue
		}
		id := statedict.KeyString(r.ids[i])
		if group {
			if err := add(flatGroups+id+"."+key, e.Value); err != nil {
				return nil, err
			}
			continue
		}
		last := key[strings.LastIndexByte(key, '.')+1:]
		nv := relocate(e.Value, r.locs[i], last, moved)
		if err := add(flatState+id+"."+key, nv); err != nil {
			return nil, err
		}
		follows = r.follow(follows, i, key, nv)
	}
	return follows, nil
}

// Follows ties a rewritten optimizer state tensor to its parameter: the output name and the
// shape of the parameter's model entry, and the tensor's state key ("exp_avg", "step", …).
type Follows struct {
	Tensor *statedict.Tensor
	Param  string
	Shape  []int64
	Key    string
}

// renamed applies a model entry's rename (from → to) to a name saved with the optimizer:
// the new key when the name is the key, else (a name matched up to wrapper components)
// the new key without them.
func renamed(saved, from, to string) string {
	if saved == from {
		return to
	}
	return canonical(to)
}

// changedEntries names a model parameter entry the conversion dropped or renamed ("" if
// none).
func changedEntries(model *statedict.Dict, fate func(string) (Fate, bool)) string {
	if model == nil {
		return ""
	}
	params, _ := ModelParams(model)
	for _, p := range params {
		for _, key := range append([]string{p.Name}, p.Tied...) {
			ft, ok := fate(key)
			switch {
			case !ok:
			case ft.Dropped:
				return strconv.Quote(key) + " was dropped"
			case ft.Name != key:
				return strconv.Quote(key) + " was renamed"
			}
		}
	}
	return ""
}

func unmappedWhy(f *Found) error {
	if f.Err != nil {
		return f.Err
	}
	return fmt.Errorf("no model state dict in the checkpoint to map it onto")
}

// relocate returns v with every tensor's storage tagged loc (no change when loc is "").
// Under a "step" key a CPU tensor stays on the CPU. moved keeps shared storages shared.
func relocate(v statedict.Value, loc, key string, moved map[*statedict.Storage]*statedict.Storage) statedict.Value {
	if loc == "" {
		return v
	}
	switch x := v.(type) {
	case *statedict.Tensor:
		if x.Storage == nil || x.Storage.Location == loc || key == "step" && x.Storage.Location == "cpu" {
			return x
		}
		st, ok := moved[x.Storage]
		if !ok {
			c := *x.Storage
			c.Location = loc
			st = &c
			moved[x.Storage] = st
		}
		t := *x
		t.Storage = st
		return &t
	case *statedict.Dict:
		nd := statedict.NewDict(x.Class)
		nd.Attrs = x.Attrs
		for _, e := range x.Entries() {
			k, _ := e.Key.(string)
			nd.Set(e.Key, relocate(e.Value, loc, k, moved))
		}
		return nd
	case *statedict.List:
		nl := &statedict.List{Items: make([]statedict.Value, len(x.Items))}
		for i, it := range x.Items {
			nl.Items[i] = relocate(it, loc, key, moved)
		}
		return nl
	case statedict.Tuple:
		nt := make(statedict.Tuple, len(x))
		for i, it := range x {
			nt[i] = relocate(it, loc, key, moved)
		}
		return nt
	}
	return v
}
