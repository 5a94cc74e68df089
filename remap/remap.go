package remap

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Rename is one --rename REGEX=REPL rule, applied to tensor names in order. Repl may use
// $1-style references (Go regexp syntax).
type Rename struct {
	Pattern *regexp.Regexp
	Repl    string
}

// ParseRename parses "REGEX=REPL" (split at the first "=").
func ParseRename(s string) (Rename, error) {
	pat, repl, ok := strings.Cut(s, "=")
	if !ok || pat == "" {
		return Rename{}, optionError("rename", fmt.Errorf("%q is not REGEX=REPL", s))
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		return Rename{}, optionError("rename", fmt.Errorf("%q: %w", s, err))
	}
	return Rename{re, repl}, nil
}

// OptionError is an error in one of the remapping rules. Option names the rule as the
// command line does (map-location, rename, select), so a front end can point at its flag;
// the message itself speaks of the checkpoint.
type OptionError struct {
	Option string
	Err    error
}

// Error formats as "select state_dict: no key ...".
func (e *OptionError) Error() string { return e.Option + " " + e.Err.Error() }

// Unwrap returns the cause.
func (e *OptionError) Unwrap() error { return e.Err }

func optionError(option string, err error) error { return &OptionError{option, err} }

// Options are the remapping rules. The zero value changes nothing.
type Options struct {
	// DType, when valid, is the dtype floating-point tensors are cast to (float16,
	// bfloat16, float32, float64 sources only; integer, bool and fp8/fp4 codes untouched)
	// unless their policy says otherwise.
	DType statedict.DType
	// Device maps the device tag a storage was saved with to the tag written; nil keeps
	// the tags. A policy's Host or KeepDevice overrides it.
	Device func(saved string) string
	// StripWrappers removes the DDP "module." and torch.compile "_orig_mod." prefixes when
	// every name of a model state dict carries them.
	StripWrappers bool
	// Renames are applied in order to each tensor name of the model state dicts.
	Renames []Rename
	// Select keeps only the sub-tree at this dotted path (e.g. "state_dict").
	Select string
	// Drop removes every entry whose flattened name matches one of these.
	Drop []*regexp.Regexp
	// Decisions are what the tree's values are and what happens to them, decided by the
	// plan; nil decides nothing (every tensor is cast and placed, no dict is a model's).
	Decisions Decisions
	// Consume lets Apply remap the tensors and storages of root in place instead of
	// copying them (a cast still makes a storage of its own): for a caller that gives
	// root up, so that a checkpoint of many small tensors is not held twice while it is
	// remapped. The containers are rebuilt all the same.
	Consume bool
}

// Decisions are the decisions about the values of a tree that Apply applies.
type Decisions interface {
	// Policy is how the value v, found at the flattened name, is treated: a tensor's cast,
	// device and drop; a container's drop.
	Policy(name string, v statedict.Value) statedict.Policy
	// Model reports whether d holds a model state dict, whose keys are parameter names:
	// the conversion's renames and wrapper stripping apply to them. With tensorsOnly, the
	// model is d's tensor entries alone — a model flattened into a dict of training state,
	// as torchtitan saves it — and d's other keys are left as they are.
	Model(d *statedict.Dict) (model, tensorsOnly bool)
}

// Report says what a remap did.
type Report struct {
	// Stripped lists wrapper prefixes removed, e.g. "module." (in model.*).
	Stripped []string
	// Renamed counts tensor names changed by the rename rules.
	Renamed int
	// Dropped lists the flattened names removed by Options.Drop; PolicyDropped those a
	// policy dropped.
	Dropped, PolicyDropped []string
	// Cast counts tensors whose dtype changed.
	Cast int
	// Locations maps each saved tag seen to the tag written.
	Locations map[string]string
	// Hosted lists the tensors whose storage a policy kept on the CPU, by flattened name,
	// the first of each storage.
	Hosted []string
}

// Trace is where each value of the source went: what a caller needs to make the rest of
// the tree follow (an optimizer state following its renamed model).
type Trace struct {
	// Dicts lists every dict occurrence the walk rebuilt, in walk order.
	Dicts []DictTrace
	// Tensors maps each source tensor to its remapped tensor; nil when Apply consumed the
	// source (Options.Consume), where every tensor is its own remapped tensor.
	Tensors map[*statedict.Tensor]*statedict.Tensor
}

// DictTrace is one source dict, where it was found, and its rebuilt copy.
type DictTrace struct {
	Name     string
	Src, Out *statedict.Dict
	// Keys are the output keys of Src's entries, in order (whether Out holds them or they
	// were dropped), for a model state dict whose names changed; nil when its keys are
	// Src's.
	Keys []statedict.Value
}

// noDecisions decides nothing.
type noDecisions struct{}

func (noDecisions) Policy(string, statedict.Value) statedict.Policy { return statedict.Policy{} }
func (noDecisions) Model(*statedict.Dict) (bool, bool)              { return false, false }

// Apply remaps root. The source tree is not modified (unless Options.Consume): containers,
// tensors and storages that change are copied (shallowly; tensor bytes are never read
// here).
func Apply(root statedict.Value, opts Options) (statedict.Value, *Report, *Trace, error) {
	rep := &Report{Locations: map[string]string{}}
	if opts.Select != "" {
		v, err := Select(root, opts.Select)
		if err != nil {
			return nil, nil, nil, err
		}
		root = v
	}
	if opts.Decisions == nil {
		opts.Decisions = noDecisions{}
	}
	r := &remapper{opts: opts, rep: rep, storages: map[*statedict.Storage]*statedict.Storage{},
		trace: &Trace{Tensors: map[*statedict.Tensor]*statedict.Tensor{}}, hits: make([]int, len(opts.Renames))}
	out, err := r.value(root, "")
	if err != nil {
		return nil, nil, nil, err
	}
	for i, n := range r.hits {
		if n == 0 {
			return nil, nil, nil, optionError("rename", fmt.Errorf("%s=%s matched no tensor name", opts.Renames[i].Pattern, opts.Renames[i].Repl))
		}
	}
	sort.Strings(rep.Stripped)
	if opts.Consume {
		r.trace.Tensors = nil // the identity: not held through the conversion
	}
	return out, rep, r.trace, nil
}

// Select is the sub-tree of root at a dotted path of dict keys and list indices.
func Select(root statedict.Value, path string) (statedict.Value, error) {
	return selectPath(root, path)
}

// selectPath walks a dotted path of dict keys and list indices.
func selectPath(root statedict.Value, path string) (statedict.Value, error) {
	v := root
	for _, part := range strings.Split(path, ".") {
		switch c := v.(type) {
		case *statedict.Dict:
			next, ok := c.Get(part)
			if !ok {
				keys := make([]string, 0, c.Len())
				for _, e := range c.Entries() {
					keys = append(keys, statedict.KeyString(e.Key))
				}
				return nil, optionError("select", fmt.Errorf("%s: no key %q (keys: %s)", path, part, strings.Join(keys, ", ")))
			}
			v = next
		case *statedict.List:
			var i int
			if _, err := fmt.Sscanf(part, "%d", &i); err != nil || i < 0 || i >= len(c.Items) {
				return nil, optionError("select", fmt.Errorf("%s: %q is not an index of a %d-item list", path, part, len(c.Items)))
			}
			v = c.Items[i]
		default:
			return nil, optionError("select", fmt.Errorf("%s: %q is inside a %T, not a container", path, part, v))
		}
	}
	return v, nil
}

type remapper struct {
	opts     Options
	rep      *Report
	storages map[*statedict.Storage]*statedict.Storage
	trace    *Trace
	hits     []int
}

// dropped reports (and records) whether the entry v at name is left out: by the drop
// rules, or by its policy.
func (r *remapper) dropped(name string, v statedict.Value) bool {
	for _, re := range r.opts.Drop {
		if re.MatchString(name) {
			r.rep.Dropped = append(r.rep.Dropped, name)
			return true
		}
	}
	if r.opts.Decisions.Policy(name, v).Drop {
		r.rep.PolicyDropped = append(r.rep.PolicyDropped, name)
		return true
	}
	return false
}

// value remaps v (named name).
func (r *remapper) value(v statedict.Value, name string) (statedict.Value, error) {
	switch c := v.(type) {
	case *statedict.Dict:
		out := statedict.NewDictSize(c.Class, c.Len())
		out.Attrs = c.Attrs
		model, tensorsOnly := r.opts.Decisions.Model(c)
		names, renamed, err := r.names(c, name, model, tensorsOnly)
		if err != nil {
			return nil, err
		}
		for i, e := range c.Entries() {
			full := statedict.JoinName(name, statedict.KeyString(e.Key))
			if r.dropped(full, e.Value) {
				continue
			}
			nv, err := r.value(e.Value, full)
			if err != nil {
				return nil, err
			}
			out.Append(names[i], nv) // distinct: c's keys, or renamed ones names checked
		}
		dt := DictTrace{Name: name, Src: c, Out: out}
		if renamed {
			dt.Keys = names
		}
		r.trace.Dicts = append(r.trace.Dicts, dt)
		return out, nil
	case *statedict.List:
		out := &statedict.List{}
		for i, it := range c.Items {
			full := statedict.JoinName(name, fmt.Sprint(i))
			if r.dropped(full, it) {
				continue
			}
			nv, err := r.value(it, full)
			if err != nil {
				return nil, err
			}
			out.Items = append(out.Items, nv)
		}
		return out, nil
	case statedict.Tuple:
		out := make(statedict.Tuple, 0, len(c))
		for i, it := range c {
			nv, err := r.value(it, statedict.JoinName(name, fmt.Sprint(i)))
			if err != nil {
				return nil, err
			}
			out = append(out, nv)
		}
		return out, nil
	case *statedict.Tensor:
		return r.tensor(c, name)
	}
	return v, nil
}

// maxName bounds a renamed tensor name: rules that double a name at each step grow it
// exponentially.
const maxName = 1 << 16

// wrapperPrefixes are added by wrappers around a model: DDP/DataParallel and torch.compile.
var wrapperPrefixes = []string{"module.", "_orig_mod."}

// names returns the (possibly renamed) key of each entry of d. Only model state dicts are
// renamed (not the per-parameter dicts inside an optimizer state), and of a dict holding
// a model in its tensor entries (tensorsOnly) only those; a rename that makes two names
// collide is an error.
func (r *remapper) names(d *statedict.Dict, where string, model, tensorsOnly bool) ([]statedict.Value, bool, error) {
	out := make([]statedict.Value, d.Len())
	var keys []int // the positions of the model's entries
	for i, e := range d.Entries() {
		out[i] = e.Key
		if _, isTensor := e.Value.(*statedict.Tensor); !tensorsOnly || isTensor {
			if _, isStr := e.Key.(string); isStr {
				keys = append(keys, i)
			}
		}
	}
	if !model || len(keys) == 0 {
		return out, false, nil
	}
	renamed := false
	if r.opts.StripWrappers {
		for changed := true; changed; {
			changed = false
			for _, p := range wrapperPrefixes {
				all := true
				for _, i := range keys {
					if !strings.HasPrefix(out[i].(string), p) {
						all = false
						break
					}
				}
				if all {
					for _, i := range keys {
						out[i] = strings.TrimPrefix(out[i].(string), p)
					}
					label := p
					if where != "" {
						label += " (in " + where + ")"
					}
					r.rep.Stripped = append(r.rep.Stripped, label)
					changed, renamed = true, true
				}
			}
		}
	}
	for ri, rule := range r.opts.Renames {
		for _, i := range keys {
			s := out[i].(string)
			if rule.Pattern.MatchString(s) {
				ns := rule.Pattern.ReplaceAllString(s, rule.Repl)
				if len(ns) > maxName {
					return nil, false, optionError("rename", fmt.Errorf("%s=%s makes %q %d bytes long, more than the %d a name may have", rule.Pattern, rule.Repl, statedict.JoinName(where, s), len(ns), maxName))
				}
				r.hits[ri]++
				if ns != s {
					out[i] = ns
					r.rep.Renamed++
					renamed = true
				}
			}
		}
	}
	if !renamed {
		return out, false, nil // the keys of a dict: no two alike
	}
	seen := make(map[string]string, len(out))
	for i, k := range out {
		s := statedict.KeyString(k)
		orig := statedict.KeyString(d.Entries()[i].Key)
		if prev, dup := seen[s]; dup {
			return nil, false, fmt.Errorf("renaming maps both %q and %q to %q", statedict.JoinName(where, prev), statedict.JoinName(where, orig), statedict.JoinName(where, s))
		}
		seen[s] = orig
	}
	return out, true, nil
}

// tensor remaps one tensor's storage location and dtype, keeping shared storages shared.
func (r *remapper) tensor(t *statedict.Tensor, name string) (*statedict.Tensor, error) {
	if done, ok := r.trace.Tensors[t]; ok {
		return done, nil
	}
	nt := t
	if !r.opts.Consume {
		c := *t
		nt = &c
	}
	if t.Storage != nil {
		from := t.Storage.DType // t is nt when consumed
		st, err := r.storage(t, name)
		if err != nil {
			return nil, err
		}
		nt.Storage = st
		if st.DType != from && castable(nt.DType) {
			nt.DType = st.DType
			r.rep.Cast++
		}
	}
	r.trace.Tensors[t] = nt
	return nt, nil
}

// castable reports whether a dtype cast applies to a tensor of dtype d: the IEEE float
// types only. fp8/fp4/e8m0 hold quantized codes whose meaning needs their scales
// (dequantization), so a plain cast would silently produce wrong weights.
func castable(d statedict.DType) bool {
	switch d {
	case statedict.Float16, statedict.BFloat16, statedict.Float32, statedict.Float64:
		return true
	}
	return false
}

// storage remaps the storage of t (named name) as its policy says: the device tag from the
// placement unless it stays on the host or keeps its own, the dtype cast unless exempt.
func (r *remapper) storage(t *statedict.Tensor, name string) (*statedict.Storage, error) {
	src := t.Storage
	if done, ok := r.storages[src]; ok {
		return done, nil
	}
	st := *src
	pol := r.opts.Decisions.Policy(name, t)
	switch {
	case pol.Host:
		st.Location = "cpu"
		r.rep.Hosted = append(r.rep.Hosted, name)
	case pol.KeepDevice || r.opts.Device == nil:
	default:
		to := r.opts.Device(src.Location)
		r.rep.Locations[src.Location] = to
		st.Location = to
	}
	target := r.opts.DType
	switch {
	case pol.DType != statedict.Invalid:
		target = pol.DType
	case pol.NoCast:
		target = statedict.Invalid
	}
	if target != statedict.Invalid && target != t.DType && castable(t.DType) && castable(target) {
		cast, err := codec.CastStorage(&st, t.DType, target)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.storages[src] = cast
		return cast, nil
	}
	if r.opts.Consume {
		*src = st
		r.storages[src] = src
		return src, nil
	}
	r.storages[src] = &st
	return &st, nil
}
