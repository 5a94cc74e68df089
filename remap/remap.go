package remap

import (
	"fmt"
	"github.com/ckpt-dev/ckpt/internal/plural"
	"regexp"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/optimizerstate"
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

// Warning is one kind of problem a conversion worked around, said once however many
// values it concerns.
type Warning struct {
	// Kind names the problem for programs ("cuda_rng_dropped", "values_not_written", …).
	Kind string `json:"kind"`
	// Message says it in one line, with the count and the first few items.
	Message string `json:"message"`
	// Items lists every value or file concerned, by flattened name.
	Items []string `json:"items,omitempty"`
	// Dropped is set when data of the source is not in the output.
	Dropped bool `json:"dropped,omitempty"`
}

// Summarize lists up to four items and how many more there are.
func Summarize(items []string) string {
	if len(items) > 4 {
		return strings.Join(items[:4], ", ") + fmt.Sprintf(" and %d more", len(items)-4)
	}
	return strings.Join(items, ", ")
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
	// Place decides the device tag of every storage; nil keeps the tags.
	Place Placement
	// DType, when valid, is the dtype floating-point weights are cast to (float16, bfloat16,
	// float32, float64 sources only; integer, bool, fp8/fp4 and optimizer state untouched).
	DType statedict.DType
	// StripWrappers removes the DDP "module." and torch.compile "_orig_mod." prefixes when
	// every name of a state dict carries them.
	StripWrappers bool
	// Renames are applied in order to each tensor name of the model state dicts.
	Renames []Rename
	// Select keeps only the sub-tree at this dotted path (e.g. "state_dict").
	Select string
	// Drop removes every entry whose flattened name matches one of these.
	Drop []*regexp.Regexp
	// PlainData turns values torch.load(weights_only=True) refuses into the data they hold:
	// numpy scalars into numbers, numpy arrays into tensors, pickled modules into their
	// state_dict, containers of data (argparse.Namespace, AttributeDict, DictConfig,
	// dataclasses: statedict.Object.Data) into dicts and lists.
	PlainData bool
	// OptimizerDType, when valid, is the dtype optimizer moments (per-parameter state
	// except step) are cast to; by default they keep theirs whatever DType does to weights.
	OptimizerDType statedict.DType
	// KeepCUDARNG keeps CUDA RNG states, as CPU byte tensors, instead of dropping them.
	KeepCUDARNG bool
	// OptimizerNames lists the model entry names of an optimizer's parameters in id order,
	// by optimizer state path ("" for the only one), for ids shapes cannot map.
	OptimizerNames map[string][]string
	// Policies are decisions about particular tensors made by the packages that know what
	// they are (quant: the codes and scales of quantized layers passed through are not
	// cast). The training state's own decisions come from optimizerstate.Decide.
	Policies statedict.Policies
	// Consume lets Apply remap the tensors and storages of root in place instead of
	// copying them (a cast still makes a storage of its own): for a caller that gives
	// root up, so that a checkpoint of many small tensors is not held twice while it is
	// remapped. The containers are rebuilt all the same.
	Consume bool
}

// Report says what a remap did, for the user and the manifest.
type Report struct {
	// Stripped lists wrapper prefixes removed, e.g. "module." (in model.*).
	Stripped []string `json:"stripped,omitempty"`
	// Renamed counts tensor names changed by --rename rules.
	Renamed int `json:"renamed"`
	// Dropped lists the flattened names removed by --drop.
	Dropped []string `json:"dropped,omitempty"`
	// Cast counts tensors whose dtype changed.
	Cast int `json:"cast"`
	// Converted lists values turned into plain data (PlainData).
	Converted []string `json:"converted,omitempty"`
	// Locations maps each saved tag seen to the tag written.
	Locations map[string]string `json:"locations"`
	// Optimizers says how each optimizer state was made to follow its model.
	Optimizers []*optimizerstate.Report `json:"optimizers,omitempty"`
	// RNG lists the RNG states written as CPU tensors; DroppedRNG the CUDA ones dropped.
	RNG []string `json:"rng,omitempty"`
	// HostData lists the tensors made from numpy arrays (PlainData): host data, never on a
	// device in the source, so they stay tagged "cpu" (numpy's RNG state must, for
	// np.random.set_state to take it back).
	HostData   []string `json:"host_data,omitempty"`
	DroppedRNG []string `json:"dropped_rng,omitempty"`
	// Repaired lists scheduler values restored after a DCP round trip (MultiStepLR
	// milestones).
	Repaired []string `json:"repaired,omitempty"`
	// Warnings are problems the remap worked around, one per kind.
	Warnings []Warning `json:"warnings,omitempty"`
}

// Apply remaps root. The source tree is not modified: containers, tensors and storages that
// change are copied (shallowly; tensor bytes are never read here).
func Apply(root statedict.Value, opts Options) (statedict.Value, *Report, error) {
	rep := &Report{Locations: map[string]string{}}
	if opts.Select != "" {
		v, err := selectPath(root, opts.Select)
		if err != nil {
			return nil, nil, err
		}
		root = v
	}
	r := &remapper{opts: opts, rep: rep, storages: map[*statedict.Storage]*statedict.Storage{},
		tensors: map[*statedict.Tensor]*statedict.Tensor{}, hits: make([]int, len(opts.Renames)),
		policies: statedict.Policies{}}
	tr, err := newTraining(root, opts)
	if err != nil {
		return nil, nil, err
	}
	r.training = tr
	r.policies.Merge(tr.decisions.Policies)
	r.policies.Merge(opts.Policies)
	out, err := r.value(root, "")
	if err != nil {
		return nil, nil, err
	}
	for i, n := range r.hits {
		if n == 0 {
			return nil, nil, optionError("rename", fmt.Errorf("%s=%s matched no tensor name", opts.Renames[i].Pattern, opts.Renames[i].Repl))
		}
	}
	if err := r.finishTraining(); err != nil {
		return nil, nil, err
	}
	if n := len(rep.DroppedRNG); n > 0 {
		rep.Warnings = append(rep.Warnings, Warning{Kind: "cuda_rng_dropped", Items: rep.DroppedRNG, Dropped: true,
			Message: fmt.Sprintf("dropped %s (%s): they mean nothing on a TPU", plural.Of(n, "CUDA RNG state"), Summarize(rep.DroppedRNG))})
	}
	sort.Strings(rep.Stripped)
	return out, rep, nil
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
	tensors  map[*statedict.Tensor]*statedict.Tensor
	hits     []int
	training *training
	// policies are the decisions about particular tensors (training state, quantized
	// groups, host data made from numpy arrays).
	policies statedict.Policies
}

func (r *remapper) dropped(name string) bool {
	for _, re := range r.opts.Drop {
		if re.MatchString(name) {
			r.rep.Dropped = append(r.rep.Dropped, name)
			return true
		}
	}
	return r.dropsRNG(name)
}

// value remaps v (named name).
func (r *remapper) value(v statedict.Value, name string) (statedict.Value, error) {
	if r.opts.PlainData {
		pv, ok, err := r.plainValue(v, name)
		if err != nil {
			return nil, err
		}
		if ok {
			v = pv
		}
	}
	switch c := v.(type) {
	case *statedict.Dict:
		out := statedict.NewDictSize(c.Class, c.Len())
		out.Attrs = c.Attrs
		names, err := r.names(c, name)
		if err != nil {
			return nil, err
		}
		for i, e := range c.Entries() {
			full := statedict.JoinName(name, statedict.KeyString(e.Key))
			if r.dropped(full) {
				continue
			}
			nv, err := r.value(e.Value, full)
			if err != nil {
				return nil, err
			}
			out.Append(names[i], nv) // distinct: c's keys, or renamed ones names checked
		}
		r.noteDict(c, out, names, name)
		return out, nil
	case *statedict.List:
		out := &statedict.List{}
		for i, it := range c.Items {
			full := statedict.JoinName(name, fmt.Sprint(i))
			if r.dropped(full) {
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

// wrapperPrefixes are added by wrappers around a model: DDP/DataParallel and torch.compile.
var wrapperPrefixes = []string{"module.", "_orig_mod."}

// names returns the (possibly renamed) key of each entry of d. Only model state dicts are
// renamed (not the per-parameter dicts inside an optimizer state); a rename that makes two
// names collide is an error.
func (r *remapper) names(d *statedict.Dict, where string) ([]statedict.Value, error) {
	out := make([]statedict.Value, d.Len())
	for i, e := range d.Entries() {
		out[i] = e.Key
	}
	if r.training.inOptimizer[d] || !optimizerstate.IsModelStateDict(d) {
		return out, nil
	}
	renamed := false
	if r.opts.StripWrappers {
		for changed := true; changed; {
			changed = false
			for _, p := range wrapperPrefixes {
				all := true
				for _, k := range out {
					if !strings.HasPrefix(k.(string), p) {
						all = false
						break
					}
				}
				if all {
					for i, k := range out {
						out[i] = strings.TrimPrefix(k.(string), p)
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
		for i, k := range out {
			s := k.(string)
			if rule.Pattern.MatchString(s) {
				ns := rule.Pattern.ReplaceAllString(s, rule.Repl)
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
		return out, nil // the keys of a dict: no two alike
	}
	seen := make(map[string]string, len(out))
	for i, k := range out {
		s := k.(string)
		orig := statedict.KeyString(d.Entries()[i].Key)
		if prev, dup := seen[s]; dup {
			return nil, fmt.Errorf("renaming maps both %q and %q to %q", statedict.JoinName(where, prev), statedict.JoinName(where, orig), statedict.JoinName(where, s))
		}
		seen[s] = orig
	}
	return out, nil
}

// tensor remaps one tensor's storage location and dtype, keeping shared storages shared.
func (r *remapper) tensor(t *statedict.Tensor, name string) (*statedict.Tensor, error) {
	if done, ok := r.tensors[t]; ok {
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
	r.tensors[t] = nt
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
	pol := r.policies[t]
	switch {
	case pol.Host:
		st.Location = "cpu"
		if r.training.decisions.OnCPU[name] {
			r.rep.RNG = append(r.rep.RNG, name)
		}
	case pol.KeepDevice || r.opts.Place == nil:
	default:
		to, err := r.opts.Place(name, t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
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
