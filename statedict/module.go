package statedict

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// ModuleStateDict returns what module.state_dict() gives when o is a pickled nn.Module
// (torch.save of a model object, or a model object inside a checkpoint dict, as YOLO-style
// checkpoints hold), read from the module's pickled __dict__ without importing or running its
// class: its parameters, then its persistent buffers (None entries skipped), then each
// submodule's entries under "name.", as Module._save_to_state_dict and state_dict do. Tensors come out
// detached (plain tensors, no requires_grad), sharing storage with the module's. ok is false
// when o is not a module. Custom get_extra_state and state_dict hooks are code, which
// ckpt never runs: what they would add is not there.
//
// A compiled module (torch.compile's OptimizedModule, pickled as a call of its class on the
// module it wraps and its compiler context) reads as the module it wraps, whose entries
// state_dict() lists under "_orig_mod."; the compiler context is code, never read.
func (o *Object) ModuleStateDict() (sd *Dict, ok bool, err error) {
	prefix := ""
	if w, isWrapper := moduleWrappers[o.Class]; isWrapper && o.Call == CallReduce && len(o.Args) > w.arg {
		if inner, isObj := o.Args[w.arg].(*Object); isObj {
			o, prefix = inner, w.name+"."
		}
	}
	if _, ok := moduleDict(o); !ok {
		return nil, false, nil
	}
	sd = NewDict("collections.OrderedDict")
	err = addModule(sd, o, prefix, map[*Object]bool{})
	return sd, true, err
}

// moduleWrappers are the module classes that pickle themselves as a call on the module they
// wrap: the argument holding it, and the attribute name it has in the wrapper.
var moduleWrappers = map[string]struct {
	arg  int
	name string
}{
	"torch._dynamo.eval_frame.OptimizedModule": {0, "_orig_mod"},
}

// moduleDict returns the pickled __dict__ of an nn.Module: a dict holding _parameters,
// _buffers and _modules.
func moduleDict(o *Object) (*Dict, bool) {
	d, ok := o.State.(*Dict)
	if !ok {
		return nil, false
	}
	for _, k := range []string{"_parameters", "_buffers", "_modules"} {
		if _, ok := field(d, k).(*Dict); !ok {
			return nil, false
		}
	}
	return d, true
}

// addModule adds the state of module o under prefix; open holds the modules being added,
// so that a module containing itself is an error instead of endless recursion.
func addModule(sd *Dict, o *Object, prefix string, open map[*Object]bool) error {
	if open[o] {
		return fmt.Errorf("%s: module %s contains itself", prefix, o.Class)
	}
	if len(open) >= maxValueDepth {
		return fmt.Errorf("%s: %w: modules nested deeper than %d levels", prefix, ckpterr.ErrUnsupported, maxValueDepth)
	}
	open[o] = true
	defer delete(open, o)
	d, ok := moduleDict(o)
	if !ok {
		return fmt.Errorf("%s: %s in _modules is not an nn.Module", prefix, o.Class)
	}
	nonPersistent := map[string]bool{}
	if set, ok := field(d, "_non_persistent_buffers_set").(*Object); ok && len(set.Args) == 1 {
		if l, ok := set.Args[0].(*List); ok {
			for _, it := range l.Items {
				if s, ok := it.(string); ok {
					nonPersistent[s] = true
				}
			}
		}
	}
	for _, part := range []string{"_parameters", "_buffers"} {
		for _, e := range field(d, part).(*Dict).Entries() {
			name, _ := e.Key.(string)
			if e.Value == nil || part == "_buffers" && nonPersistent[name] {
				continue
			}
			t, ok := e.Value.(*Tensor)
			if !ok {
				return fmt.Errorf("%s%s: %s entry is %T, not a tensor", prefix, name, part, e.Value)
			}
			c := *t // detached: a plain tensor sharing the storage
			c.Parameter, c.RequiresGrad, c.Attrs = false, false, nil
			sd.Set(prefix+name, &c)
		}
	}
	for _, e := range field(d, "_modules").(*Dict).Entries() {
		if e.Value == nil {
			continue
		}
		name, _ := e.Key.(string)
		sub, ok := e.Value.(*Object)
		if !ok {
			return fmt.Errorf("%s%s: _modules entry is %T, not a module", prefix, name, e.Value)
		}
		if err := addModule(sd, sub, prefix+name+".", open); err != nil {
			return err
		}
	}
	return nil
}

// field is d[key], nil when absent.
func field(d *Dict, key string) Value {
	v, _ := d.Get(key)
	return v
}
