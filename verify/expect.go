package verify

import (
	"fmt"
	"strings"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/runtime"
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

// expected is the source as the conversion should have written it: the conversion's
// plan made again from the source, with tensors cast and quantized groups dequantized
// lazily by the same codecs torch's casts and the reference dequantizers are checked
// against. No byte is read to build it.
type expected struct {
	root statedict.Value
	// droppable are the flattened names of entries the conversion may have left out
	// (CUDA RNG states, dropped unless --keep-cuda-rng) when its options are not known.
	droppable []string
	warnings  []string
}

// expect plans the conversion c of the source checkpoint, on a copy of its tree whose
// tensors know their source names. dstHas reports whether the destination holds a tensor
// under a name with a dtype, to infer whether quantized groups were kept when the
// conversion's options were not recorded.
func expect(src *statedict.Checkpoint, c *Conversion, dstHas func(name string, d statedict.DType) bool) (*expected, error) {
	cl := &cloner{dicts: map[*statedict.Dict]*statedict.Dict{}, lists: map[*statedict.List]*statedict.List{},
		objects: map[*statedict.Object]*statedict.Object{}}
	ck := *src
	ck.Root = cl.value(src.Root, "")
	ck.Closers = nil
	opts := c.Options
	if !opts.Layout.Valid() {
		opts.Layout = formats.TorchFile // a tree: nothing is left out for the layout's sake
	}
	if !c.Recorded {
		// Casts are inferred pair by pair; quantized groups were unpacked when the
		// destination does not hold them as stored.
		opts.DType, opts.OptimizerDType, opts.Dequantize = statedict.Invalid, statedict.Invalid, quant.DequantizeNone
		if _, qp, err := quant.DetectCheckpoint(&ck); err == nil && qp != nil {
			if g := qp.Groups[0]; !dstHas(g.Weight, g.CodeDType()) {
				opts.Dequantize = quant.DequantizeAll
			}
		}
	}
	// The values are checked; where the tensors sit on the ranks is not (the
	// destination is read back whole). The mesh stays for a layout written per device:
	// what the plan carries of the training state depends on the ranks it is for.
	var t *runtime.Target
	if c.Target != nil {
		tc := *c.Target
		if !opts.Layout.PerRank() {
			tc.Mesh, tc.Plan = nil, nil
		}
		t = &tc
	}
	pl, err := plan.Make(&ck, opts, t)
	if err != nil {
		return nil, fmt.Errorf("%s: planning the conversion (%s): %w", src.Path, c, err)
	}
	ex := &expected{root: pl.Output.Root}
	for _, w := range pl.Warnings {
		if w.Kind == "quantization_not_understood" {
			ex.warnings = append(ex.warnings, strings.Replace(w.Message, "passed through unchanged", "compared as stored", 1))
		}
	}
	if !c.Recorded {
		// Without the conversion's options, CUDA RNG states are expected where the
		// destination has them and allowed to be missing.
		ex.droppable = pl.CUDARNG
	}
	err = pl.Each(func(e plan.Entry) error {
		if e.Group != nil {
			e.Tensor.Attrs = &origin{name: e.Group.Weight, group: e.Group}
		}
		return nil
	})
	return ex, err
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
