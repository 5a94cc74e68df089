package optimizerstate

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/internal/regular"
	"github.com/ckpt-dev/ckpt/paramorder"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Found is an optimizer state dict found in a checkpoint tree, with the model state dict
// it belongs to.
type Found struct {
	// Path is the optimizer state dict's flattened name ("" for the root).
	Path string
	Dict *statedict.Dict
	// Optimizer is the parsed state; nil when parsing failed (Err says why).
	Optimizer *Optimizer
	// ModelPath and Model are the model state dict the optimizer was mapped onto, or the
	// one it was compared with when mapping failed; Model is nil when the tree holds none.
	ModelPath string
	Model     *statedict.Dict
	// Mapping ties each optimizer parameter to its model entry; nil when Err is set or
	// there is no model.
	Mapping *Mapping
	// Err is why the optimizer could not be parsed or mapped: a *MismatchError, an
	// *AmbiguousError, or another error.
	Err error
}

type located struct {
	path   string
	parent any
	dict   *statedict.Dict
	// view holds the entries of dict that are a model's, when not all of them are
	// (InlineModel); nil otherwise.
	view *statedict.Dict
}

// entries is the dict an optimizer is mapped onto: the model's entries.
func (l located) entries() *statedict.Dict {
	if l.view != nil {
		return l.view
	}
	return l.dict
}

// Find locates every optimizer state dict in root (at any depth, e.g. Lightning's
// optimizer_states list) and maps each onto a model state dict of the same tree — a dict
// of tensors, or the tensor entries of a dict holding training state beside them
// (InlineModel) — one it fits, preferring its siblings, then the others in tree order. Two models it fits with
// different parameter names (not an EMA copy of the same model) make it ambiguous. names
// lists parameter names in id order (a names file) by optimizer path; the key "" stands
// for the only optimizer of the tree; a names file for a path holding no optimizer state
// is an error.
func Find(root statedict.Value, names map[string][]string) ([]*Found, error) {
	return find(root, names, nil)
}

// find is Find for a checkpoint whose config.json is config (nil: none): the model it
// describes gives the order its parameters register in, for optimizer states saved by
// position (see Map).
func find(root statedict.Value, names map[string][]string, config []byte) ([]*Found, error) {
	var cfg *paramorder.Model
	var cfgErr error
	if config != nil {
		cfg, cfgErr = paramorder.FromConfig(config)
	}
	var optims, models []located
	seen := map[any]bool{}
	var visit func(v statedict.Value, path string, parent any)
	visit = func(v statedict.Value, path string, parent any) {
		switch c := v.(type) {
		case *statedict.Dict:
			if seen[c] {
				return
			}
			seen[c] = true
			switch {
			case IsOptimizerState(c):
				optims = append(optims, located{path: path, parent: parent, dict: c})
				return
			case IsModelStateDict(c):
				models = append(models, located{path: path, parent: parent, dict: c})
				return
			}
			if view := InlineModel(c); view != nil {
				// c's tensor entries are its optimizer's siblings.
				models = append(models, located{path: path, parent: c, dict: c, view: view})
			}
			for _, e := range c.Entries() {
				visit(e.Value, statedict.JoinName(path, statedict.KeyString(e.Key)), c)
			}
		case *statedict.List:
			if seen[c] {
				return
			}
			seen[c] = true
			for i, x := range c.Items {
				visit(x, statedict.JoinName(path, fmt.Sprint(i)), c)
			}
		case statedict.Tuple:
			for i, x := range c {
				visit(x, statedict.JoinName(path, fmt.Sprint(i)), parent)
			}
		}
	}
	visit(root, "", nil)
	if len(optims) > 0 { // models are only candidates for optimizer states to follow
		models = slices.DeleteFunc(models, func(m located) bool {
			ps, _ := ModelParams(m.entries())
			return len(ps) == 0 // RNG dicts and other all-integer tensor dicts
		})
	}
	for path := range names {
		if path != "" && !slices.ContainsFunc(optims, func(l located) bool { return l.path == path }) {
			paths := make([]string, len(optims))
			for i, l := range optims {
				paths[i] = strconv.Quote(l.path)
			}
			return nil, fmt.Errorf("names file for %q: no optimizer state there (optimizer states: %s)", path, strings.Join(paths, ", "))
		}
	}
	var out []*Found
	for _, loc := range optims {
		f := &Found{Path: loc.path, Dict: loc.dict}
		out = append(out, f)
		f.Optimizer, f.Err = Parse(loc.dict)
		if f.Err != nil {
			continue
		}
		nm, ok := names[loc.path]
		if !ok {
			if nm, ok = names[""]; ok && len(optims) > 1 {
				f.Err = fmt.Errorf("the checkpoint holds %d optimizer states: say which one the names file is for (PATH=FILE)", len(optims))
				continue
			}
		}
		cands := slices.Clone(models)
		slices.SortStableFunc(cands, func(a, b located) int {
			return boolRank(a.parent != loc.parent) - boolRank(b.parent != loc.parent)
		})
		f.pair(cands, nm, cfg, cfgErr)
	}
	return out, nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// InlineModel returns the model state dict held in d's own tensor entries, or nil. A model
// state dict flattened into a dict of training state — torchtitan saves its model's
// entries at the checkpoint's top level beside "optimizer", "lr_scheduler", "dataloader"
// and "train_state"; torch.save({**model.state_dict(), "optimizer": …}) does the same —
// is recognized by structure: d holds an optimizer state (either form) and no model state
// dict of its own (a dict of tensors that can be parameters), and string-keyed tensor
// entries that can be parameters. The returned
// dict holds those entries (the same tensors), in d's order.
func InlineModel(d *statedict.Dict) *statedict.Dict {
	optim := false
	var view *statedict.Dict
	for _, e := range d.Entries() {
		switch v := e.Value.(type) {
		case *statedict.Dict:
			if IsModelStateDict(v) {
				if ps, _ := ModelParams(v); len(ps) > 0 {
					return nil
				}
			}
			optim = optim || IsOptimizerState(v)
		case *statedict.Tensor:
			if k, ok := e.Key.(string); ok {
				if view == nil {
					view = statedict.NewDict("")
				}
				view.Append(k, v)
			}
		}
	}
	if !optim || view == nil {
		return nil
	}
	if ps, _ := ModelParams(view); len(ps) == 0 {
		return nil
	}
	return view
}

// TieCounts counts the optimizer's parameters whose state is tied to a model entry (all of
// them when it is mapped onto its model, none otherwise) and those that are not.
func (f *Found) TieCounts() (tied, notTied int) {
	if f.Optimizer == nil {
		return 0, 0
	}
	if f.Mapping != nil {
		tied = len(f.Mapping.Params)
	}
	return tied, len(f.Optimizer.Params) - tied
}

// pair maps f's optimizer onto the first candidate model it fits (cfg: the checkpoint's
// model, nil if unknown; cfgErr why not).
func (f *Found) pair(cands []located, names []string, cfg *paramorder.Model, cfgErr error) {
	var firstErr error
	for _, c := range cands {
		m, err := mapModel(f.Optimizer, c.entries(), names, cfg, cfgErr)
		if err != nil {
			// Remember the first failure to report it, but never let a model the optimizer
			// does not fit replace one it was already mapped onto.
			if firstErr == nil && f.Mapping == nil {
				firstErr, f.ModelPath, f.Model = err, c.path, c.dict
			}
			continue
		}
		if f.Mapping == nil {
			f.ModelPath, f.Model, f.Mapping = c.path, c.dict, m
			continue
		}
		if !slices.EqualFunc(f.Mapping.Params, m.Params, func(a, b ModelParam) bool { return a.Name == b.Name }) {
			f.Mapping, f.Err = nil, fmt.Errorf("the optimizer fits both model state dicts %q and %q, with different parameters: convert them separately, selecting or dropping one", f.ModelPath, c.path)
			return
		}
	}
	if f.Mapping == nil {
		f.Err = firstErr
	}
}

// maxNamesFile bounds a names file: a line per parameter.
const maxNamesFile = 64 << 20

// ReadNames reads a names file: one model state-dict key per line, in optimizer id order
// (group by group, as the groups list them); blank lines and lines starting with # are
// ignored. In Python:
//
//	names = {p: n for n, p in model.named_parameters()}
//	print("\n".join(names[p] for g in optimizer.param_groups for p in g["params"]))
func ReadNames(path string) ([]string, error) {
	b, err := regular.ReadFile(path, maxNamesFile)
	if err != nil {
		return nil, err
	}
	names := []string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxNamesFile)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			names = append(names, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return names, nil
}
