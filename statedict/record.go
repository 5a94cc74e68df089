package statedict

import (
	"fmt"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// Data returns the plain data an object holds when its pickled form is nothing but data,
// and what it was ("lightning.fabric.utilities.data.AttributeDict → dict"), for the values
// torch.load(weights_only=True) refuses although they are only containers of data:
//
//   - an instance of a dict or list subclass with no attributes of its own (Lightning's
//     AttributeDict, a UserDict-free dict subclass): the dict or list of its items;
//   - an attribute record — an object made with no arguments (cls.__new__(cls), or cls()
//     as types.SimpleNamespace pickles itself) whose state is a mapping of attribute names,
//     or the (dict, slots) pair of a class with __slots__: argparse.Namespace,
//     SimpleNamespace, dataclasses, plain config classes — the dict of its attributes;
//   - a configuration container whose layout is known (omegaconfContainers: omegaconf's
//     DictConfig and ListConfig, read from their _content nodes, values and interpolation
//     strings as stored);
//   - a class or function used as a value (Lightning's hyper_parameters_type): its
//     qualified name, which Lightning itself accepts in its place.
//
// ok is false for any other object; err reports a known container whose state is not as
// its library pickles it. The conversion looks at the pickled structure, never at what
// the class would do, and does not descend into the values it returns.
func (o *Object) Data() (v Value, what string, ok bool, err error) {
	if o.Call == CallRef {
		return o.Class, "class reference " + o.Class + " → its name", true, nil
	}
	if _, known := omegaconfContainers[o.Class]; known {
		v, err := omegaconfContainer(o, 0)
		if err != nil {
			return nil, "", false, fmt.Errorf("%s: %w", o.Class, err)
		}
		kind := "dict"
		if _, isList := v.(*List); isList {
			kind = "list"
		}
		return v, o.Class + " → " + kind + " (values and interpolations as stored)", true, nil
	}
	noArgs := len(o.Args) == 0 && o.Kwargs.lenOrZero() == 0
	switch {
	case !noArgs || o.Call == CallBuild:
		return nil, "", false, nil
	case o.DictItems != nil && o.ListItems == nil && emptyState(o.State):
		d := NewDict("")
		for _, e := range o.DictItems.Entries() {
			d.Set(e.Key, e.Value)
		}
		return d, o.Class + " (a dict subclass) → dict", true, nil
	case o.ListItems != nil && o.DictItems == nil && emptyState(o.State):
		return &List{Items: append([]Value{}, o.ListItems...)}, o.Class + " (a list subclass) → list", true, nil
	case o.ListItems == nil && o.DictItems == nil:
		if attrs, ok := attributes(o.State); ok && (o.Call == CallNew || attrs.Len() > 0) {
			return attrs, o.Class + " → dict of its attributes", true, nil
		}
	}
	return nil, "", false, nil
}

// lenOrZero is the number of entries; 0 for a nil dict.
func (d *Dict) lenOrZero() int {
	if d == nil {
		return 0
	}
	return d.Len()
}

// emptyState reports whether an object's pickled state sets nothing: none, or an empty
// __dict__.
func emptyState(s Value) bool {
	if s == nil {
		return true
	}
	d, ok := s.(*Dict)
	return ok && d.Len() == 0
}

// attributes returns the attributes an object's pickled state sets: a __dict__ mapping
// of names, or the (__dict__ or None, slots mapping) pair of a class with __slots__. ok
// is false for any other state (a custom __setstate__ argument).
func attributes(s Value) (*Dict, bool) {
	out := NewDict("")
	add := func(v Value) bool {
		if v == nil {
			return true
		}
		d, ok := v.(*Dict)
		if !ok || d.Class != "" {
			return false
		}
		for _, e := range d.Entries() {
			if _, isName := e.Key.(string); !isName {
				return false
			}
			out.Set(e.Key, e.Value)
		}
		return true
	}
	switch x := s.(type) {
	case *Dict:
		return out, add(x)
	case Tuple:
		if len(x) == 2 && add(x[0]) && add(x[1]) {
			return out, true
		}
	}
	return nil, false
}

// omegaconfContainers reads omegaconf's containers from their pickled state (their
// __dict__: _metadata, _parent, _flags_cache, _content). _content maps keys (DictConfig)
// or holds items (ListConfig) as nodes: nested containers, or value nodes (AnyNode,
// StringNode, IntegerNode, FloatNode, BooleanNode, EnumNode, BytesNode, PathNode) whose
// _val is the value as stored — an interpolation stays its "${…}" string. A container
// whose _content is None, "???" (missing) or an interpolation string is that value.
var omegaconfContainers = map[string]bool{
	"omegaconf.dictconfig.DictConfig": true,
	"omegaconf.listconfig.ListConfig": false,
}

// omegaconfContainer reads an omegaconf container (o.Class in omegaconfContainers).
func omegaconfContainer(o *Object, depth int) (Value, error) {
	if omegaconfContainers[o.Class] {
		return omegaconfDict(o, depth)
	}
	return omegaconfList(o, depth)
}

// maxConfigDepth bounds nested configuration containers.
const maxConfigDepth = 1000

// omegaconfContent returns the _content of an omegaconf container's state.
func omegaconfContent(o *Object, depth int) (Value, error) {
	if depth > maxConfigDepth {
		return nil, fmt.Errorf("%w: configuration nested deeper than %d levels", ckpterr.ErrUnsupported, maxConfigDepth)
	}
	st, ok := o.State.(*Dict)
	if !ok {
		return nil, fmt.Errorf("%w: pickled state is %T, not the container's __dict__", ckpterr.ErrCorrupt, o.State)
	}
	c, ok := st.Get("_content")
	if !ok {
		return nil, fmt.Errorf("%w: no _content in the pickled state", ckpterr.ErrCorrupt)
	}
	return c, nil
}

func omegaconfDict(o *Object, depth int) (Value, error) {
	c, err := omegaconfContent(o, depth)
	if err != nil {
		return nil, err
	}
	d, ok := c.(*Dict)
	if !ok {
		return omegaconfScalarContent(c)
	}
	out := NewDict("")
	for _, e := range d.Entries() {
		v, err := omegaconfNode(e.Value, depth+1)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", KeyString(e.Key), err)
		}
		out.Set(e.Key, v)
	}
	return out, nil
}

func omegaconfList(o *Object, depth int) (Value, error) {
	c, err := omegaconfContent(o, depth)
	if err != nil {
		return nil, err
	}
	l, ok := c.(*List)
	if !ok {
		return omegaconfScalarContent(c)
	}
	out := &List{Items: make([]Value, len(l.Items))}
	for i, it := range l.Items {
		v, err := omegaconfNode(it, depth+1)
		if err != nil {
			return nil, fmt.Errorf("%d: %w", i, err)
		}
		out.Items[i] = v
	}
	return out, nil
}

// omegaconfScalarContent is the _content of a container that holds no items: None, the
// missing marker "???" or an interpolation string, kept as stored.
func omegaconfScalarContent(c Value) (Value, error) {
	switch c.(type) {
	case nil, string:
		return c, nil
	}
	return nil, fmt.Errorf("%w: _content is %T", ckpterr.ErrCorrupt, c)
}

// omegaconfNode reads one node of a container's _content.
func omegaconfNode(v Value, depth int) (Value, error) {
	o, ok := v.(*Object)
	if !ok {
		return v, nil // a plain value (older omegaconf stores some unwrapped)
	}
	if _, known := omegaconfContainers[o.Class]; known {
		return omegaconfContainer(o, depth)
	}
	if !strings.HasPrefix(o.Class, "omegaconf.nodes.") {
		return v, nil
	}
	st, ok := o.State.(*Dict)
	if !ok {
		return nil, fmt.Errorf("%w: %s state is %T, not its __dict__", ckpterr.ErrCorrupt, o.Class, o.State)
	}
	val, ok := st.Get("_val")
	if !ok {
		return nil, fmt.Errorf("%w: %s has no _val", ckpterr.ErrCorrupt, o.Class)
	}
	return val, nil
}
