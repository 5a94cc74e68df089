package statedict

import "sort"

// Hidden counts the tensors of a tree that Walk does not reach: those inside objects
// (Walk stops at an object) that are not pickled nn.Modules, whose state_dict readers list.
// A checkpoint whose tensors are all hidden — a torch.save of an object ckpt does not read
// as data — has weights a listing or a conversion would silently leave out; Classes names
// the objects holding them.
type Hidden struct {
	Tensors int
	Classes []string
}

// HiddenTensors returns the tensors of v only reachable through objects.
func HiddenTensors(v Value) Hidden {
	h := hider{seen: map[any]bool{}, classes: map[string]bool{}}
	h.visit(v, "")
	var out Hidden
	out.Tensors = h.n
	for c := range h.classes {
		out.Classes = append(out.Classes, c)
	}
	sort.Strings(out.Classes)
	return out
}

type hider struct {
	seen    map[any]bool
	classes map[string]bool
	n       int
	depth   int
}

// visit walks v; inside names the class of the outermost object v lies in ("" outside).
func (h *hider) visit(v Value, inside string) {
	if h.depth > maxValueDepth {
		return
	}
	h.depth++
	defer func() { h.depth-- }()
	if k := key(v); k != nil {
		if h.seen[k] {
			return
		}
		h.seen[k] = true
	}
	switch c := v.(type) {
	case *Dict:
		for _, e := range c.entries {
			h.visit(e.Value, inside)
		}
	case *List:
		for _, x := range c.Items {
			h.visit(x, inside)
		}
	case Tuple:
		for _, x := range c {
			h.visit(x, inside)
		}
	case *Tensor:
		if inside != "" {
			h.n++
			h.classes[inside] = true
		}
	case *Object:
		if _, isModule, _ := c.ModuleStateDict(); isModule && inside == "" {
			return // listed as its state_dict
		}
		if inside == "" {
			inside = c.Class
		}
		for _, x := range c.Args {
			h.visit(x, inside)
		}
		h.visit(c.State, inside)
		for _, x := range c.ListItems {
			h.visit(x, inside)
		}
		if c.Kwargs != nil {
			h.visit(c.Kwargs, inside)
		}
		if c.DictItems != nil {
			h.visit(c.DictItems, inside)
		}
	}
}
