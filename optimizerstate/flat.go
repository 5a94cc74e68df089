package optimizerstate

import (
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// The flattened form of an FQN-keyed optimizer state dict: what
// torch.distributed.checkpoint.state_dict's get_optimizer_state_dict returns with
// StateDictOptions(flatten_optimizer_state_dict=True), and what torchtitan saves as its
// "optimizer" (merged over model parts). {"state": {FQN: {KEY: v}}, "param_groups":
// [{OPT: v, …, "params": [FQN, …]}]} becomes one flat dict of
//
//	"state.FQN.KEY"        a parameter's state value (a nested state dict, as Shampoo
//	                       keeps, is flattened further: "state.FQN.KEY.SUB")
//	"param_groups.FQN.OPT" the option OPT of the group listing FQN: every parameter
//	                       carries its group's options
//
// The groups themselves are not saved: on load, torch takes each group's options from the
// entries of its first parameter in the live optimizer. FQNs hold dots; option names do
// not, so a param_groups key splits at its last dot, and a state key at the longest
// prefix that is a parameter some param_groups key names.
const (
	flatState  = "state."
	flatGroups = "param_groups."
)

// isFlat reports whether d is an optimizer state dict in the flattened form: every key a
// string starting "state." or "param_groups.", and at least one of the latter.
func isFlat(d *statedict.Dict) bool {
	groups := false
	for _, e := range d.Entries() {
		k, ok := e.Key.(string)
		if !ok {
			return false
		}
		switch {
		case strings.HasPrefix(k, flatGroups):
			groups = true
		case strings.HasPrefix(k, flatState):
		default:
			return false
		}
	}
	return groups
}

// splitGroupKey splits "param_groups.FQN.OPT" into FQN and OPT.
func splitGroupKey(k string) (fqn, opt string, ok bool) {
	rest := k[len(flatGroups):]
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// splitStateKey splits "state.FQN.KEY" at the longest FQN that is a key of params.
func splitStateKey(k string, params map[string]int) (fqn, key string, ok bool) {
	rest := k[len(flatState):]
	for i := strings.LastIndexByte(rest, '.'); i > 0; i = strings.LastIndexByte(rest[:i], '.') {
		if _, ok := params[rest[:i]]; ok {
			return rest[:i], rest[i+1:], true
		}
	}
	return "", "", false
}

// parseFlat reads a flattened optimizer state dict. Parameters are listed in the order
// their first param_groups entry comes in (a DCP folder saved by several ranks lists each
// rank's entries together, so that order need not be the optimizer's); the groups are
// rebuilt as the sets of parameters with the same options, in that order. Two groups with the same options
// become one, which changes nothing torch loads: it takes each live group's options from
// its parameters' entries.
func parseFlat(d *statedict.Dict) (*Optimizer, error) {
	o := &Optimizer{Form: ByName, Flat: true}
	index := map[string]int{}
	var opts []*statedict.Dict // options of each parameter, by index
	for _, e := range d.Entries() {
		k := e.Key.(string)
		if !strings.HasPrefix(k, flatGroups) {
			continue
		}
		fqn, opt, ok := splitGroupKey(k)
		if !ok {
			return nil, fmt.Errorf("key %q names no parameter and option (param_groups.FQN.OPTION)", k)
		}
		i, seen := index[fqn]
		if !seen {
			i = len(o.Params)
			index[fqn] = i
			o.Params = append(o.Params, Param{ID: fqn, Name: fqn})
			opts = append(opts, statedict.NewDict(""))
		}
		opts[i].Append(opt, e.Value) // a dict's keys are distinct, and so are their splits
	}
	for i := range o.Params {
		g := slices.IndexFunc(o.Groups, func(g Group) bool { return sameOptions(g.Options, opts[i]) })
		if g < 0 {
			g = len(o.Groups)
			o.Groups = append(o.Groups, Group{Options: opts[i]})
		}
		o.Groups[g].Params = append(o.Groups[g].Params, i)
		o.Params[i].Group = g
	}
	orphans := map[string]bool{}
	for _, e := range d.Entries() {
		k := e.Key.(string)
		if strings.HasPrefix(k, flatGroups) {
			continue
		}
		fqn, key, ok := splitStateKey(k, index)
		if !ok {
			// State of a parameter no group names: torch's loader never reads it.
			if rest := k[len(flatState):]; !orphans[rest] {
				orphans[rest] = true
				o.Orphans = append(o.Orphans, rest)
			}
			continue
		}
		p := &o.Params[index[fqn]]
		if p.State == nil {
			p.State = statedict.NewDict("")
		}
		p.State.Append(key, e.Value)
	}
	o.Kind = kindOf(o)
	return o, nil
}

// sameOptions reports whether two parameters' options are those of one group: the same
// names in the same order with equal values (tensor values, which a flattened DCP stores
// one per parameter, by dtype and shape).
func sameOptions(a, b *statedict.Dict) bool {
	if a.Len() != b.Len() {
		return false
	}
	for i, e := range a.Entries() {
		f := b.Entries()[i]
		if e.Key != f.Key || !sameValue(e.Value, f.Value) {
			return false
		}
	}
	return true
}

// sameValue compares two option values as Python's == would for the values optimizers
// keep: numbers, booleans, strings, None, tuples and lists of them.
func sameValue(a, b statedict.Value) bool {
	switch x := a.(type) {
	case statedict.Tuple:
		y, ok := b.(statedict.Tuple)
		return ok && slices.EqualFunc(x, y, sameValue)
	case *statedict.List:
		y, ok := b.(*statedict.List)
		return ok && slices.EqualFunc(x.Items, y.Items, sameValue)
	case *statedict.Tensor:
		y, ok := b.(*statedict.Tensor)
		return ok && x.DType == y.DType && slices.Equal(x.Shape, y.Shape)
	case *big.Int:
		y, ok := b.(*big.Int)
		return ok && x.Cmp(y) == 0
	case []byte:
		y, ok := b.([]byte)
		return ok && string(x) == string(y)
	case nil, bool, int64, float64, complex128, string, statedict.DType:
		return a == b
	}
	return false
}
