package verify

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/statedict"
)

// origin marks a tensor of the expected tree with what it was made from: a source tensor
// (its flattened name and the tensor as read) or a quantized group it dequantizes. It rides
// in the tensor's Attrs, which remapping copies along and nothing else reads.
type origin struct {
	name  string
	src   *statedict.Tensor
	group *quant.Group
}

// originOf returns the marker of an expected tensor (nil for tensors the remap made, such as
// numpy arrays turned into tensors).
func originOf(t *statedict.Tensor) *origin {
	o, _ := t.Attrs.(*origin)
	return o
}

// expected is the source as the conversion should have written it: the tree remapped with
// the conversion's rules, tensors cast and quantized groups dequantized lazily by the same
// codecs torch's casts and the reference dequantizers are checked against. No byte is read
// to build it.
type expected struct {
	root statedict.Value
	// unpacked is set when the source's quantized groups were replaced by their logical
	// tensors; kept when they pass through as stored.
	unpacked, kept bool
	// droppable are the flattened names of entries the conversion may have left out
	// (CUDA RNG states, dropped unless --keep-cuda-rng) when its options are not known.
	droppable []string
	warnings  []string
}

// expect applies c to the source checkpoint. dstHas reports whether the destination holds
// a tensor under a name with a dtype, to infer whether quantized groups were kept when the
// conversion's options were not recorded.
func expect(src *statedict.Checkpoint, c *Conversion, dstHas func(name string, d statedict.DType) bool) (*expected, error) {
	cl := &cloner{dicts: map[*statedict.Dict]*statedict.Dict{}, lists: map[*statedict.List]*statedict.List{},
		objects: map[*statedict.Object]*statedict.Object{}}
	root := cl.value(src.Root, "")
	ex := &expected{}
	pol := statedict.Policies{}
	_, plan, err := quant.DetectCheckpoint(src)
	switch {
	case err != nil && c.Recorded && (c.Dequantize != "" || c.DType != statedict.Invalid):
		return nil, fmt.Errorf("%s: %w", src.Path, err)
	case err != nil:
		ex.warnings = append(ex.warnings, fmt.Sprintf("quantization not understood, tensors compared as stored: %v", err))
	case plan != nil:
		if root, err = ex.quantized(src, root, plan, c, cl, pol, dstHas); err != nil {
			return nil, err
		}
	}
	if !c.Recorded {
		// Without the conversion's options, CUDA RNG states are expected where the
		// destination has them and allowed to be missing.
		if d, err := optimizerstate.Decide(root, optimizerstate.Options{}); err == nil {
			for n := range d.Drop {
				ex.droppable = append(ex.droppable, n)
			}
		}
	}
	out, _, err := remap.Apply(root, c.remapOptions(pol))
	if err != nil {
		return nil, fmt.Errorf("%s: applying the conversion's rules (%s): %w", src.Path, c, err)
	}
	ex.root = out
	return ex, nil
}

// quantized applies the conversion's quantization mode to the cloned flat root: groups
// unpacked to their logical tensors (scales and runtime-only tensors dropped), or kept with
// every member shielded from the cast, as convert does.
func (ex *expected) quantized(src *statedict.Checkpoint, root statedict.Value, plan *quant.Plan, c *Conversion,
	cl *cloner, pol statedict.Policies, dstHas func(string, statedict.DType) bool) (statedict.Value, error) {
	unpack := false
	switch {
	case c.Recorded && c.Dequantize == "all":
		unpack = true
	case c.Recorded && c.Dequantize == "auto":
		for _, g := range plan.Groups {
			unpack = unpack || !g.NativeOn(c.Generation)
		}
	case c.Recorded:
	default:
		g := plan.Groups[0]
		unpack = !dstHas(g.Weight, g.CodeDType())
	}
	role := map[string]*quant.Group{}
	for _, g := range plan.Groups {
		for _, m := range g.Members() {
			role[m] = g
		}
	}
	aux := map[string]bool{}
	for _, a := range plan.Aux {
		aux[a] = true
	}
	d, ok := root.(*statedict.Dict)
	if !ok {
		return nil, fmt.Errorf("%s: a quantized checkpoint must be a flat state dict, not a %T", src.Path, root)
	}
	if !unpack {
		ex.kept = true
		for _, e := range d.Entries() {
			name := statedict.KeyString(e.Key)
			if t, ok := e.Value.(*statedict.Tensor); ok && (role[name] != nil || aux[name]) {
				pol[t] = statedict.Policy{NoCast: true, Why: "member of a quantized layer kept as stored"}
			}
		}
		return root, nil
	}
	ex.unpacked = true
	out := statedict.BFloat16
	if c.Recorded && c.DType != statedict.Invalid {
		out = c.DType
	}
	nd := statedict.NewDict(d.Class)
	nd.Attrs = d.Attrs
	for _, e := range d.Entries() {
		name := statedict.KeyString(e.Key)
		g := role[name]
		switch {
		case g != nil && name == g.Weight:
			t, err := g.Dequantize(out)
			if err != nil {
				return nil, err
			}
			t.Attrs = &origin{name: g.Weight, group: g}
			nd.Set(g.Name, t)
		case g != nil || aux[name]:
		default:
			nd.Set(e.Key, e.Value)
		}
	}
	return nd, nil
}

// cloner copies a checkpoint tree, keeping shared containers shared, and marks every
// tensor with its origin (storages are not copied: tied tensors still view one storage).
type cloner struct {
	dicts   map[*statedict.Dict]*statedict.Dict
	lists   map[*statedict.List]*statedict.List
	objects map[*statedict.Object]*statedict.Object
}

func (c *cloner) value(v statedict.Value, name string) statedict.Value {
	switch x := v.(type) {
	case *statedict.Tensor:
		// Every occurrence gets its own copy, so that each knows its name; copies of one
		// tensor still view one storage, as tied tensors do.
		t := *x
		t.Attrs = &origin{name: name, src: x}
		return &t
	case *statedict.Dict:
		if d, ok := c.dicts[x]; ok {
			return d
		}
		d := statedict.NewDict(x.Class)
		d.Attrs = x.Attrs
		c.dicts[x] = d
		for _, e := range x.Entries() {
			d.Set(e.Key, c.value(e.Value, statedict.JoinName(name, statedict.KeyString(e.Key))))
		}
		return d
	case *statedict.List:
		if l, ok := c.lists[x]; ok {
			return l
		}
		l := &statedict.List{Items: make([]statedict.Value, len(x.Items))}
		c.lists[x] = l
		for i, it := range x.Items {
			l.Items[i] = c.value(it, statedict.JoinName(name, fmt.Sprint(i)))
		}
		return l
	case statedict.Tuple:
		t := make(statedict.Tuple, len(x))
		for i, it := range x {
			t[i] = c.value(it, statedict.JoinName(name, fmt.Sprint(i)))
		}
		return t
	case *statedict.Object:
		if o, ok := c.objects[x]; ok {
			return o
		}
		o := &statedict.Object{Class: x.Class, Args: make([]statedict.Value, len(x.Args))}
		c.objects[x] = o
		for i, a := range x.Args {
			o.Args[i] = c.value(a, name)
		}
		o.State = c.value(x.State, name)
		return o
	}
	return v
}
