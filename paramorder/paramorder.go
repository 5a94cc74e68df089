// Package paramorder knows in which order a PyTorch model lists its parameters —
// model.named_parameters(), the order an optimizer built from them numbers its parameters
// in (Optimizer.state_dict() keys their state by that position) — for the state-dict keys
// of a model whose file does not keep that order (a safetensors file lists its tensors by
// name).
//
// named_parameters() walks the modules depth first: each module's own parameters in the
// order it registered them, then its children in the order it registered them; a layer
// list's children are numbered in order. What the names alone say of that order is
// [Structure]: numbered children by number, a module's own parameters before its
// submodules, weight before bias (torch.nn's modules register them so). Which of two named
// submodules comes first is the model's code; for the transformers model types it lists
// (Families), that code's order is kept here as data, written by transformers itself
// (testdata/gen_families.py) from models with every optional piece switched on, and
// checked against model.named_parameters() for other configurations (the oracle test). A
// key whose place neither says is an error, and so are two children of one module that no
// model built held together (their order was never seen): the order is never guessed.
package paramorder

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

//go:embed families.json
var familiesJSON []byte

// family is how the models of one model_type register their parameters; every path is a
// module path with layer numbers written "*".
type family struct {
	// Children lists, per module, its parameters and submodules in the order
	// named_parameters() lists them; modules not listed follow Structure.
	Children map[string][]string `json:"children"`
	// NeverTogether lists, per module, the pairs of its children no model built held both
	// of (a dense MLP's projections and a MoE block's experts): Children does not say their
	// order, so keys holding both are refused.
	NeverTogether map[string][][2]string `json:"never_together"`
	// LayerNorm are the modules that are torch.nn.LayerNorm.
	LayerNorm []string `json:"layer_norm"`
	// Buffers are the state-dict entries that are persistent buffers, not parameters.
	Buffers []string `json:"buffers"`
	// Stored are state-dict entries save_pretrained writes that are no parameter of the
	// model, each with the parameters transformers loads them into (experts it fuses).
	Stored map[string][]string `json:"stored"`
}

var families = func() map[string]*family {
	var doc struct {
		Families map[string]*family `json:"families"`
	}
	if err := json.Unmarshal(familiesJSON, &doc); err != nil {
		panic("paramorder: families.json: " + err.Error())
	}
	return doc.Families
}()

// Families lists the model_type values whose registration order is known, sorted.
func Families() []string {
	out := make([]string, 0, len(families))
	for k := range families {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Model is what is known of how one model registers its parameters.
type Model struct {
	// Type is the model_type of a transformers family, "" for Structure.
	Type string
	fam  *family
}

// Structure orders by what the names say of any PyTorch model (see the package comment).
var Structure = &Model{}

// UnknownTypeError is a config.json whose model_type paramorder does not describe.
type UnknownTypeError struct{ Type string }

func (e *UnknownTypeError) Error() string {
	if e.Type == "" {
		return "config.json names no model_type"
	}
	return fmt.Sprintf("model_type %q: the order its parameters register in is not known (known: %s)", e.Type, strings.Join(Families(), ", "))
}

// maxConfig bounds the config.json read: real ones are a few KiB.
const maxConfig = 1 << 20

// FromConfig is the model a Hugging Face config.json describes (its model_type); an
// *UnknownTypeError when its family is not described.
func FromConfig(config []byte) (*Model, error) {
	if len(config) > maxConfig {
		return nil, fmt.Errorf("config.json: %d bytes, more than a model configuration holds (%d)", len(config), maxConfig)
	}
	var c struct {
		ModelType any `json:"model_type"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	mt, ok := c.ModelType.(string)
	if !ok && c.ModelType != nil {
		return nil, fmt.Errorf("config.json: model_type is a %T, not a string", c.ModelType)
	}
	f, ok := families[mt]
	if !ok {
		return nil, &UnknownTypeError{Type: mt}
	}
	return &Model{Type: mt, fam: f}, nil
}

// Order is a model state dict's keys in the order the model registers them.
type Order struct {
	// Params are the keys that can be parameters, in the order
	// model.named_parameters(remove_duplicate=False) lists them (a tied alias at its own
	// place).
	Params []string
	// Buffers are the keys the model's description says are buffers.
	Buffers []string
}

// UnorderedError is a key whose place in the registration order is not known: Parent is
// the module holding it and Siblings the names under Parent whose order is not known (or
// the one name the description does not list).
type UnorderedError struct {
	Key, Parent string
	Siblings    []string
	// Type is the model_type whose description was used ("" for Structure).
	Type string
}

func (e *UnorderedError) Error() string {
	where := "the top level"
	if e.Parent != "" {
		where = e.Parent
	}
	q := make([]string, len(e.Siblings))
	for i, s := range e.Siblings {
		q[i] = fmt.Sprintf("%q", s)
	}
	if e.Type != "" && len(e.Siblings) == 1 {
		return fmt.Sprintf("%s: model_type %s has no %s under %s", e.Key, e.Type, q[0], where)
	}
	what := "the names do not say"
	if e.Type != "" {
		what = "model_type " + e.Type + " does not say"
	}
	return fmt.Sprintf("%s: %s in which order the model registers %s under %s", e.Key, what, strings.Join(q, ", "), where)
}

// StoredApartError is a key that is no parameter of the model: transformers loads it into
// other parameters (experts of a layer fused into one tensor), so the order of the model's
// parameters is not an order of the stored keys.
type StoredApartError struct {
	Key, Type string
	// Into are the parameters (paths with "*" for numbers) it is loaded into.
	Into []string
}

func (e *StoredApartError) Error() string {
	return fmt.Sprintf("%s is no parameter of a %s model: transformers loads it into %s", e.Key, e.Type, strings.Join(e.Into, " and "))
}

// NestedError is a key that names a tensor and also the module holding other keys ("a"
// and "a.b"): a PyTorch module has one attribute under a name, so no model registers both,
// and where it would list them is not known.
type NestedError struct{ Key, Under string }

func (e *NestedError) Error() string {
	return fmt.Sprintf("%s names a tensor and also the module holding %s: no model registers both under one name", e.Key, e.Under)
}

// node is a module path of the keys (or a key, leaf).
type node struct {
	leaf  bool
	key   string
	kids  map[string]*node
	order []string // kids' names, as met
}

// Order sorts keys, the entries of a model state dict, in the model's registration order.
// It fails with an *UnorderedError naming the first module whose children it cannot order,
// a *NestedError, or a *StoredApartError.
func (m *Model) Order(keys []string) (*Order, error) {
	out := &Order{}
	root := &node{kids: map[string]*node{}}
	for _, k := range keys {
		parts := strings.Split(k, ".")
		pat := pattern(parts)
		if m.fam != nil {
			if slices.Contains(m.fam.Buffers, pat) {
				out.Buffers = append(out.Buffers, k)
				continue
			}
			if into, ok := m.fam.Stored[pat]; ok {
				return nil, &StoredApartError{Key: k, Type: m.Type, Into: into}
			}
		}
		n := root
		for _, p := range parts {
			c, ok := n.kids[p]
			if !ok {
				c = &node{kids: map[string]*node{}}
				n.kids[p] = c
				n.order = append(n.order, p)
			}
			n = c
		}
		n.leaf, n.key = true, k
	}
	var walk func(n *node, path []string) error
	walk = func(n *node, path []string) error {
		kids, err := m.sortKids(n, path)
		if err != nil {
			return err
		}
		for _, name := range kids {
			c := n.kids[name]
			if c.leaf && len(c.kids) > 0 {
				return &NestedError{Key: c.key, Under: firstKey(c.kids[c.order[0]])}
			}
			if c.leaf {
				out.Params = append(out.Params, c.key)
			}
			if err := walk(c, append(path, name)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// firstKey is the first key met at or under n.
func firstKey(n *node) string {
	for !n.leaf {
		n = n.kids[n.order[0]]
	}
	return n.key
}

// sortKids orders the children of the module n at path.
func (m *Model) sortKids(n *node, path []string) ([]string, error) {
	kids := slices.Clone(n.order)
	if len(kids) < 2 {
		return kids, nil
	}
	parent := strings.Join(path, ".")
	fail := func(sib []string) error {
		return &UnorderedError{Key: firstKey(n.kids[sib[0]]), Parent: parent, Siblings: sib, Type: m.Type}
	}
	if m.fam != nil {
		if pairs := m.fam.NeverTogether[pattern(path)]; len(pairs) > 0 {
			held := map[string]string{} // name in the description → child
			for _, k := range kids {
				name := k
				if isNumber(k) {
					name = "*"
				}
				if _, ok := held[name]; !ok {
					held[name] = k
				}
			}
			for _, p := range pairs {
				a, okA := held[p[0]]
				b, okB := held[p[1]]
				if okA && okB {
					return nil, fail([]string{a, b})
				}
			}
		}
		if desc, ok := m.fam.Children[pattern(path)]; ok {
			rank := map[string]int{}
			for _, k := range kids {
				name := k
				if isNumber(k) {
					name = "*"
				}
				i := slices.Index(desc, name)
				if i < 0 {
					return nil, fail([]string{k})
				}
				rank[k] = i
			}
			slices.SortStableFunc(kids, func(a, b string) int {
				if d := rank[a] - rank[b]; d != 0 {
					return d
				}
				return compareNumbers(a, b)
			})
			return kids, nil
		}
	}
	// Structure: own parameters (leaves) before submodules; weight before bias; numbered
	// submodules by number.
	var leaves, mods []string
	for _, k := range kids {
		if len(n.kids[k].kids) == 0 {
			leaves = append(leaves, k)
		} else {
			mods = append(mods, k)
		}
	}
	switch {
	case len(leaves) < 2:
	case len(leaves) == 2 && slices.Contains(leaves, "weight") && slices.Contains(leaves, "bias"):
		leaves = []string{"weight", "bias"}
	default:
		return nil, fail(leaves)
	}
	switch {
	case len(mods) < 2:
	case !slices.ContainsFunc(mods, func(s string) bool { return !isNumber(s) }):
		slices.SortFunc(mods, compareNumbers)
	default:
		return nil, fail(mods)
	}
	return append(leaves, mods...), nil
}

// InLayerNorm reports whether key is a parameter of a torch.nn.LayerNorm module.
func (m *Model) InLayerNorm(key string) bool {
	if m.fam == nil {
		return false
	}
	parts := strings.Split(key, ".")
	for i := len(parts) - 1; i > 0; i-- {
		if slices.Contains(m.fam.LayerNorm, pattern(parts[:i])) {
			return true
		}
	}
	return false
}

// pattern is a path with its numbers written "*".
func pattern(parts []string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('.')
		}
		if isNumber(p) {
			b.WriteByte('*')
		} else {
			b.WriteString(p)
		}
	}
	return b.String()
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// compareNumbers orders digit strings by value (of any length), others after them as
// strings.
func compareNumbers(a, b string) int {
	na, nb := isNumber(a), isNumber(b)
	switch {
	case na && nb:
		ta, tb := strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
		if len(ta) != len(tb) {
			return len(ta) - len(tb)
		}
		return strings.Compare(ta, tb)
	case na:
		return -1
	case nb:
		return 1
	}
	return strings.Compare(a, b)
}
