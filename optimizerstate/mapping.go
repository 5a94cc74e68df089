package optimizerstate

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/paramorder"
	"github.com/ckpt-dev/ckpt/statedict"
)

// How a Mapping was found.
const (
	ByNamesFile  = "names file"  // the caller listed the names in id order
	ByFQN        = "fqn"         // the optimizer state is keyed by names (DCP)
	ByParamNames = "param_names" // the groups saved the names (torch ≥ 2.6, named_parameters())
	ByOrder      = "order"       // one group listing every model parameter: id i is parameter i
	ByShapes     = "shapes"      // the only assignment of ids to parameters the shapes allow
	// ByTrainerGrouping: transformers' Trainer's groups (create_optimizer) — the parameters
	// it decays, then the others (biases, norms), each in registration order.
	ByTrainerGrouping = "trainer grouping"
)

// Mapping ties each parameter of an optimizer to its model state-dict entry.
type Mapping struct {
	// Params[i] is the model entry of Optimizer.Params[i]: Name is the key the parameter
	// maps to, Tied the other keys viewing the same tensor.
	Params []ModelParam
	// By is how the mapping was found (ByNamesFile, ByFQN, ByParamNames, ByOrder, ByShapes,
	// ByTrainerGrouping).
	By string
	// Order is, for a mapping by position, where the order the model registers its
	// parameters in was read: "" for the model state dict's own, OrderFromStructure, or a
	// config.json's model_type.
	Order string
	// Unused lists the model entries no optimizer parameter maps to, with the reason:
	// buffers, tied aliases, and parameters this optimizer does not train.
	Unused []Skipped
}

// ErrNotFitting is matched by errors.Is for every *MismatchError and *AmbiguousError: the
// optimizer state cannot be tied to its model, so training would not resume from it.
var ErrNotFitting = errors.New("optimizer state does not fit its model")

// Is makes errors.Is(err, ErrNotFitting) true.
func (e *MismatchError) Is(target error) bool { return target == ErrNotFitting }

// Is makes errors.Is(err, ErrNotFitting) true.
func (e *AmbiguousError) Is(target error) bool { return target == ErrNotFitting }

// MismatchError reports an optimizer state that does not fit its model: the optimizer
// parameter at fault (its position in id order and its id) and the model entry it was
// compared with.
type MismatchError struct {
	// Index is the parameter's position in id order (the pid for ByIndex optimizers).
	Index int
	// ID is the parameter's id as saved ("3", or a name).
	ID string
	// Name is the model entry it was matched against; "" when there is none.
	Name string
	// Detail says what disagrees.
	Detail string
}

// Error words the mismatch as `optimizer parameter ID vs model entry "NAME": DETAIL`.
func (e *MismatchError) Error() string {
	who := "optimizer parameter " + e.ID
	if e.ID != fmt.Sprint(e.Index) {
		who += fmt.Sprintf(" (position %d)", e.Index)
	}
	if e.Name != "" {
		who += fmt.Sprintf(" vs model entry %q", e.Name)
	}
	return who + ": " + e.Detail
}

// AmbiguousError reports that the shapes allow more than one assignment of optimizer
// parameters to model parameters: parameter Index could be any of Names. ckpt does not
// guess; a names file settles it.
type AmbiguousError struct {
	// Index and ID are the first optimizer parameter the fitting assignments disagree on.
	Index int
	ID    string
	// Names are the model entries two of those assignments give it.
	Names []string
}

// Error names the parameter and its candidates, and the way out (a names file).
func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("optimizer parameter %s could be %s: the shapes do not tell which; list the parameter names in id order in a names file",
		e.ID, strings.Join(quoteAll(e.Names), " or "))
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = fmt.Sprintf("%q", x)
	}
	return out
}

// Map finds the model state-dict entry of every parameter of o and checks each state
// tensor's shape against it. names, when not nil, lists the entries in id order (a names
// file). Otherwise the names o saved are used (FQN keys, param_names), and failing those
// the ids are matched to the model's parameters (ModelParams) by position and shape,
// assuming what torch's optimizers and the usual group-building code guarantee: ids
// number the groups' parameters in order, and each group lists its parameters in the
// order the model registers them (named_parameters()) — which the state dict keeps when
// torch.save wrote it; for one its reader lists by name (a safetensors file's), the order
// the checkpoint's config.json or the names' structure gives (paramorder), or else — unless
// the shapes alone leave one choice — an *OrderError. Groups built as transformers'
// Trainer builds them (decayed parameters, then biases and norms) are matched by that
// rule. Frozen parameters (not in any group) and unrecognized buffers may be skipped.
// If no assignment fits, the error is a *MismatchError naming the first parameter that
// does not; if several fit, an *AmbiguousError.
func Map(o *Optimizer, model *statedict.Dict, names []string) (*Mapping, error) {
	return mapModel(o, model, names, nil, nil)
}

// mapModel is Map for a model that cfg describes (nil: unknown; cfgErr why).
func mapModel(o *Optimizer, model *statedict.Dict, names []string, cfg *paramorder.Model, cfgErr error) (*Mapping, error) {
	switch {
	case names != nil:
		if len(names) != len(o.Params) {
			return nil, fmt.Errorf("the names file lists %d names, the optimizer has %d parameters", len(names), len(o.Params))
		}
		params, _ := ModelParams(model)
		return byNames(o, model, params, names, ByNamesFile)
	case o.Form == ByName:
		params, _ := ModelParams(model)
		return byNames(o, model, params, savedNames(o), ByFQN)
	case len(o.Params) > 0 && !slices.ContainsFunc(o.Params, func(p Param) bool { return p.Name == "" }):
		params, _ := ModelParams(model)
		return byNames(o, model, params, savedNames(o), ByParamNames)
	}
	r, err := registration(model, cfg, cfgErr)
	var oe *OrderError
	if errors.As(err, &oe) {
		// No order: the shapes alone may still leave one choice.
		params, skipped := ModelParams(model)
		if m, ok := byShapesAlone(o, params); ok {
			m.Unused = append(slices.Clone(skipped), m.Unused...)
			return m, nil
		}
	}
	if err != nil {
		return nil, err
	}
	var trainerErr error
	if trainerShaped(o) {
		m, err := byTrainerGrouping(o, r)
		if err == nil {
			return m, nil
		}
		trainerErr = err
	}
	m, err := byShapes(o, r.params)
	if err != nil {
		if trainerErr != nil {
			return nil, trainerErr
		}
		return nil, err
	}
	m.Order = r.from
	m.Unused = append(slices.Clone(r.skipped), m.Unused...)
	return m, nil
}

func savedNames(o *Optimizer) []string {
	out := make([]string, len(o.Params))
	for i, p := range o.Params {
		out[i] = p.Name
	}
	return out
}

// wrapperComponents are inserted into parameter names by wrappers (DDP, torch.compile,
// FSDP1, activation checkpointing); a saved name may carry them while the model keys do
// not, or the other way round.
var wrapperComponents = []string{"module", "_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"}

// canonical drops the wrapper components of a dotted name.
func canonical(name string) string {
	parts := strings.Split(name, ".")
	return strings.Join(slices.DeleteFunc(parts, func(p string) bool { return slices.Contains(wrapperComponents, p) }), ".")
}

// byNames maps by explicit names: each must be a key of the model state dict (up to
// wrapper prefixes), used at most once, and fit its state by shape.
func byNames(o *Optimizer, model *statedict.Dict, params []ModelParam, names []string, by string) (*Mapping, error) {
	byKey := map[string]ModelParam{}
	for _, p := range params {
		for _, n := range append([]string{p.Name}, p.Tied...) {
			aliases := slices.DeleteFunc(append([]string{p.Name}, p.Tied...), func(s string) bool { return s == n })
			byKey[n] = ModelParam{Name: n, Tensor: p.Tensor, Tied: aliases}
		}
	}
	byCanon := map[string][]string{}
	for _, e := range model.Entries() {
		k, _ := e.Key.(string)
		byCanon[canonical(k)] = append(byCanon[canonical(k)], k)
	}
	m := &Mapping{By: by}
	used := map[string]int{}
	for i, n := range names {
		key := n
		if _, ok := model.Get(n); !ok {
			if ks := byCanon[canonical(n)]; len(ks) == 1 {
				key = ks[0]
			}
		}
		mp, ok := byKey[key]
		if !ok {
			detail := "the model state dict has no such entry"
			if _, buf := model.Get(key); buf {
				detail = "the model entry is not a parameter (a buffer or an integer tensor)"
			}
			return nil, &MismatchError{Index: i, ID: o.Params[i].IDString(), Name: n, Detail: detail}
		}
		if prev, dup := used[key]; dup {
			return nil, &MismatchError{Index: i, ID: o.Params[i].IDString(), Name: key,
				Detail: fmt.Sprintf("the entry is already the model parameter of optimizer parameter %s", o.Params[prev].IDString())}
		}
		for _, t := range mp.Tied {
			used[t] = i
		}
		used[key] = i
		if d := checkState(o.Params[i], mp.Tensor.Shape); d != "" {
			return nil, &MismatchError{Index: i, ID: o.Params[i].IDString(), Name: key, Detail: d}
		}
		m.Params = append(m.Params, mp)
	}
	for _, e := range model.Entries() {
		k, _ := e.Key.(string)
		if _, ok := used[k]; !ok {
			reason := "not trained by this optimizer"
			if _, ok := byKey[k]; !ok {
				reason = "buffer"
			}
			m.Unused = append(m.Unused, Skipped{k, reason})
		}
	}
	return m, nil
}

// maxStates bounds the search over interleavings of parameter groups, and maxDiagnosis
// the search for where a mismatch starts (best effort: it only words the error).
const (
	maxStates    = 1 << 22
	maxDiagnosis = 1 << 18
)

// solver assigns optimizer parameters to model parameters: each group's parameters, in
// order, to an increasing sequence of model parameters, the groups' sequences disjoint,
// every state tensor's shape fitting. It counts the assignments (up to 2) by dynamic
// programming over (next model parameter, parameters placed per group).
type solver struct {
	o     *Optimizer
	cands []ModelParam
	// groups are the ids of each group to place, ids all of them in order; what words how
	// many there are and how many candidates, for errors ("the optimizer lists %d
	// parameters; the model state dict has %d that can be parameters").
	groups [][]int
	ids    []int
	what   string
	compat map[[2]int]bool
	memo   map[string]int
	// prune cuts states that cannot place every parameter any more; the error report
	// searches without it, to find the longest consistent placement, and with a lower
	// limit on the memo.
	prune bool
	limit int
	// last[g][p] is the last model parameter where parameter p of group g can go with the
	// rest of its group still fitting after it, other groups ignored (negative: nowhere).
	last [][]int
	// deepest is the first state placing the longest prefix (in id order) of the
	// optimizer parameters, for the error report.
	deepest struct{ prefix, j int }
}

// newSolver places the parameters of groups (ids of o.Params, each group in order) on
// cands; what words the candidates for errors.
func newSolver(o *Optimizer, cands []ModelParam, groups [][]int, what string) *solver {
	s := &solver{o: o, cands: cands, what: what, compat: map[[2]int]bool{}, memo: map[string]int{}, prune: true, limit: maxStates}
	for _, g := range groups {
		s.groups = append(s.groups, g)
		s.ids = append(s.ids, g...)
		last := make([]int, len(g))
		j := len(cands) - 1
		for p := len(g) - 1; p >= 0; p-- {
			for j >= 0 && !s.fits(g[p], j) {
				j--
			}
			last[p] = j
			j--
		}
		s.last = append(s.last, last)
	}
	s.deepest.prefix = -1
	return s
}

func (s *solver) fits(i, j int) bool {
	k := [2]int{i, j}
	ok, done := s.compat[k]
	if !done {
		ok = checkState(s.o.Params[i], s.cands[j].Tensor.Shape) == ""
		s.compat[k] = ok
	}
	return ok
}

func memoKey(j int, pos []int) string {
	var b strings.Builder
	fmt.Fprint(&b, j)
	for _, p := range pos {
		fmt.Fprint(&b, ",", p)
	}
	return b.String()
}

// errTooMany aborts a search whose state space exceeds maxStates.
var errTooMany = fmt.Errorf("too many ways to interleave the parameter groups to decide by shape")

// count returns the number of assignments (capped at 2) completing state (j, pos). It
// follows forced moves (a single option) in a loop, recursing only where the search
// branches, and memoizes every state it passes, so an unambiguous model costs time linear
// in its size.
func (s *solver) count(j int, pos []int) (int, error) {
	var passed []string
	n, err := func() (int, error) {
		for {
			placed, prefix, whole := 0, 0, true
			for g, p := range pos {
				placed += p
				if whole {
					prefix += p
					whole = p == len(s.groups[g])
				}
			}
			if prefix > s.deepest.prefix {
				s.deepest.prefix, s.deepest.j = prefix, j
			}
			if placed == len(s.ids) {
				return 1, nil
			}
			if j == len(s.cands) || s.prune && !s.feasible(j, pos) {
				return 0, nil
			}
			key := memoKey(j, pos)
			if n, ok := s.memo[key]; ok {
				return n, nil
			}
			if len(s.memo)+len(passed) >= s.limit {
				return 0, errTooMany
			}
			passed = append(passed, key)
			opts := s.options(j, pos)
			if len(opts) == 1 {
				j, pos = j+1, opts[0]
				continue
			}
			total := 0
			for _, next := range opts {
				n, err := s.count(j+1, next)
				if err != nil {
					return 0, err
				}
				total = min(2, total+n)
				if total == 2 {
					break
				}
			}
			return total, nil
		}
	}()
	if err != nil {
		return 0, err
	}
	for _, k := range passed {
		s.memo[k] = n
	}
	return n, nil
}

// options lists the states following (j, pos): model parameter j taken by the next
// parameter of a group it fits, or skipped. When pruning, states from which some group
// can no longer be completed (even alone, or for lack of model parameters) are left out.
func (s *solver) options(j int, pos []int) [][]int {
	var out [][]int
	for g, p := range pos {
		if p < len(s.groups[g]) && s.fits(s.groups[g][p], j) {
			next := slices.Clone(pos)
			next[g]++
			out = append(out, next)
		}
	}
	out = append(out, slices.Clone(pos))
	if s.prune {
		out = slices.DeleteFunc(out, func(next []int) bool { return !s.feasible(j+1, next) })
	}
	return out
}

// feasible is a necessary condition for completing state (j, pos): enough model
// parameters remain, and each group's next parameter can still go at j or later.
func (s *solver) feasible(j int, pos []int) bool {
	remaining := len(s.ids)
	for g, p := range pos {
		remaining -= p
		if p < len(s.groups[g]) && j > s.last[g][p] {
			return false
		}
	}
	return len(s.cands)-j >= remaining
}

// walk follows the first assignment in option order from the start state, or with
// diverge the first one that differs from it, and records assign[parameter] = model
// parameter. need is how many completions the current state is known to have: on the
// diverging walk, 2 until it leaves the first assignment's path, which it does at the
// first state whose first live option completes only one way.
func (s *solver) walk(assign []int, diverge bool) {
	j, pos, need := 0, make([]int, len(s.groups)), 1
	if diverge {
		need = 2
	}
	for placed := 0; placed < len(s.ids); j++ {
		opts := s.options(j, pos)
		pick := opts[0]
		if len(opts) > 1 {
			skip := false
			for _, next := range opts {
				n, _ := s.count(j+1, next)
				if n == 0 {
					continue
				}
				if need == 2 && n == 1 && !skip {
					skip = true // the first assignment goes this way; the second does not
					continue
				}
				if skip {
					need = 1
				}
				pick = next
				break
			}
		}
		for g := range pos {
			if pick[g] > pos[g] {
				assign[s.groups[g][pos[g]]] = j
				placed++
			}
		}
		pos = pick
	}
}

// solve returns the model parameter (index into cands) of each parameter of the groups,
// by id (-1 for the ids of no group), when exactly one assignment fits.
func (s *solver) solve() ([]int, error) {
	start := make([]int, len(s.groups))
	total, err := s.count(0, start)
	if err != nil {
		return nil, err
	}
	if total == 0 {
		return nil, s.mismatch()
	}
	first := make([]int, len(s.o.Params))
	for i := range first {
		first[i] = -1
	}
	s.walk(first, false)
	if total > 1 {
		second := slices.Clone(first)
		s.walk(second, true)
		for _, i := range s.ids {
			if first[i] != second[i] {
				return nil, &AmbiguousError{Index: i, ID: s.o.Params[i].IDString(),
					Names: []string{s.cands[first[i]].Name, s.cands[second[i]].Name}}
			}
		}
	}
	return first, nil
}

// byShapes maps o onto cands, the model's parameters in the order it registers them: each
// group lists its parameters in that order.
func byShapes(o *Optimizer, cands []ModelParam) (*Mapping, error) {
	groups := make([][]int, len(o.Groups))
	for i, g := range o.Groups {
		groups[i] = g.Params
	}
	assign, err := newSolver(o, cands, groups, "the optimizer lists %d parameters; the model state dict has %d that can be parameters").solve()
	if err != nil {
		return nil, err
	}
	by := ByShapes
	if len(o.Groups) == 1 && len(o.Params) == len(cands) {
		by = ByOrder
	}
	m := &Mapping{By: by}
	taken := make([]bool, len(cands))
	for _, j := range assign {
		m.Params = append(m.Params, cands[j])
		taken[j] = true
	}
	for j, c := range cands {
		if !taken[j] {
			m.Unused = append(m.Unused, Skipped{c.Name, "not trained by this optimizer"})
		}
	}
	return m, nil
}

// mismatch reports where placement fails. Each group is first placed alone, greedily:
// each parameter at the first model parameter it fits after its predecessor's place; the
// first parameter (in id order) left without a place is reported, with the model
// parameter that stands where it would go. When every group fits alone but not together,
// a search without pruning finds the first parameter that no consistent placement of the
// ones before it leaves a place for (bounded: a search too large to finish reports the
// longest placement it saw).
func (s *solver) mismatch() error {
	for _, ids := range s.groups {
		j := 0
		for _, i := range ids {
			k := j
			for k < len(s.cands) && !s.fits(i, k) {
				k++
			}
			if k == len(s.cands) {
				return s.mismatchAt(i, j)
			}
			j = k + 1
		}
	}
	s.prune, s.memo, s.limit = false, map[string]int{}, maxDiagnosis
	s.count(0, make([]int, len(s.groups)))
	return s.mismatchAt(s.ids[min(s.deepest.prefix, len(s.ids)-1)], s.deepest.j)
}

// mismatchAt describes optimizer parameter i failing where model parameter j stands.
func (s *solver) mismatchAt(i, j int) error {
	counts := " (" + fmt.Sprintf(s.what, len(s.ids), len(s.cands)) + ")"
	e := &MismatchError{Index: i, ID: s.o.Params[i].IDString()}
	if j >= len(s.cands) {
		e.Detail = "no model parameter is left for it" + counts
		return e
	}
	e.Name = s.cands[j].Name
	e.Detail = checkState(s.o.Params[i], s.cands[j].Tensor.Shape)
	if e.Detail == "" {
		e.Detail = "it fits no model parameter left after the ones placed before it"
	}
	e.Detail += counts
	return e
}
