package torchpickle

import (
	"fmt"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/statedict"
)

// object interprets one call record. Allowlisted torch rebuild functions become tensors;
// everything else stays inert.
func (c *converter) object(o *pickle.Object) (statedict.Value, error) {
	// Rebuild calls nest in rebuild calls (_rebuild_from_type_v2's argument tuple) without
	// passing through value: count them here too.
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.leave()
	g := o.Class
	if n, v3, ok := tensorRebuild(g); ok {
		return c.rebuildTensor(o.Args, n, v3)
	}
	if g.Module == "torch._utils" {
		switch g.Name {
		case "_rebuild_parameter", "_rebuild_parameter_with_state":
			return c.rebuildParameter(g.Name, o.Args)
		case "_rebuild_qtensor":
			return c.rebuildQTensor(o.Args)
		case "_rebuild_device_tensor_from_cpu_tensor":
			return c.rebuildDeviceTensor(o.Args)
		}
	}
	if (g.Module == "torch._tensor" || g.Module == "torch.tensor") &&
		(g.Name == "_rebuild_from_type_v2" || g.Name == "_rebuild_from_type") {
		return c.rebuildFromType(o.Args)
	}
	if dt, ok := legacyTensorClass(g); ok && o.State != nil {
		return c.legacyTensor(dt, o.State)
	}
	return c.inert(o)
}

// tensorRebuild recognizes torch's plain tensor rebuild functions, returning their argument
// count without the optional metadata dict and whether it is _rebuild_tensor_v3.
func tensorRebuild(g pickle.Global) (n int, v3, ok bool) {
	if g.Module != "torch._utils" {
		return 0, false, false
	}
	switch g.Name {
	case "_rebuild_tensor":
		return 4, false, true
	case "_rebuild_tensor_v2":
		return 6, false, true
	case "_rebuild_tensor_v3":
		return 7, true, true
	}
	return 0, false, false
}

// legacyTensorClass recognizes torch.FloatTensor, torch.cuda.HalfTensor, ... used by very old
// pickles (class + BUILD with (storage, offset, size, stride)).
func legacyTensorClass(g pickle.Global) (statedict.DType, bool) {
	if (g.Module != "torch" && g.Module != "torch.cuda") || !strings.HasSuffix(g.Name, "Tensor") {
		return 0, false
	}
	return statedict.DTypeForStorage(strings.TrimSuffix(g.Name, "Tensor") + "Storage")
}

func argError(fn string, i int, want string, got pickle.Value) error {
	return fmt.Errorf("%s argument %d is %s, want %s", fn, i, describe(got), want)
}

// ints reads a tuple of ints (a size or stride); torch.Size records are accepted too.
func ints(v pickle.Value) ([]int64, bool) {
	if o, ok := v.(*pickle.Object); ok && o.Class == (pickle.Global{Module: "torch", Name: "Size"}) && len(o.Args) == 1 {
		v = o.Args[0]
	}
	t, ok := v.(pickle.Tuple)
	if !ok {
		if l, isList := v.(*pickle.List); isList {
			t, ok = pickle.Tuple(l.Items), true
		}
	}
	if !ok {
		return nil, false
	}
	out := make([]int64, len(t))
	for i, x := range t {
		n, ok := x.(int64)
		if !ok {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

// rebuildTensor handles _rebuild_tensor (storage, offset, size, stride),
// _rebuild_tensor_v2 (…, requires_grad, backward_hooks[, metadata]) and
// _rebuild_tensor_v3 (…, requires_grad, backward_hooks, dtype[, metadata]).
func (c *converter) rebuildTensor(args pickle.Tuple, n int, v3 bool) (statedict.Value, error) {
	fn := "_rebuild_tensor"
	if n > 4 {
		fn += map[bool]string{false: "_v2", true: "_v3"}[v3]
	}
	if len(args) != n && len(args) != n+1 {
		return nil, fmt.Errorf("%s takes %d or %d arguments, got %d", fn, n, n+1, len(args))
	}
	ref, ok := args[0].(storageRef)
	if !ok {
		return nil, argError(fn, 0, "a storage", args[0])
	}
	t := &statedict.Tensor{DType: ref.dtype, Storage: ref.st}
	if v3 {
		g, ok := args[6].(pickle.Global)
		d, isDT := dtypeGlobal(g)
		if !ok || !isDT {
			return nil, argError(fn, 6, "a torch dtype", args[6])
		}
		t.DType = d
	}
	if err := c.view(fn, t, args[1], args[2], args[3]); err != nil {
		return nil, err
	}
	if n > 4 {
		rg, ok := args[4].(bool)
		if !ok {
			return nil, argError(fn, 4, "a bool", args[4])
		}
		t.RequiresGrad = rg
	}
	if len(args) == n+1 && n > 4 {
		md, ok := args[n].(*pickle.Dict)
		if !ok {
			return nil, argError(fn, n, "a metadata dict", args[n])
		}
		keys, vals := md.Items()
		for i, k := range keys {
			b, _ := vals[i].(bool)
			switch k {
			case "conj":
				t.Conj = b
			case "neg":
				t.Neg = b
			default:
				return nil, fmt.Errorf("%s: unknown tensor metadata %s", fn, describe(k))
			}
		}
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%s: storage %q: %w", fn, ref.st.Key, err)
	}
	return t, nil
}

// view fills offset, shape and strides from rebuild arguments 1..3.
func (c *converter) view(fn string, t *statedict.Tensor, off, size, stride pickle.Value) error {
	o, ok := off.(int64)
	if !ok {
		return argError(fn, 1, "an int storage offset", off)
	}
	sh, ok := ints(size)
	if !ok {
		return argError(fn, 2, "a tuple of ints", size)
	}
	st, ok := ints(stride)
	if !ok {
		return argError(fn, 3, "a tuple of ints", stride)
	}
	t.Offset, t.Shape, t.Strides = o, sh, st
	return nil
}

// rebuildParameter handles _rebuild_parameter(data, requires_grad, hooks) and
// _rebuild_parameter_with_state(data, requires_grad, hooks, state).
func (c *converter) rebuildParameter(fn string, args pickle.Tuple) (statedict.Value, error) {
	want := 3
	if fn == "_rebuild_parameter_with_state" {
		want = 4
	}
	if len(args) != want {
		return nil, fmt.Errorf("%s takes %d arguments, got %d", fn, want, len(args))
	}
	inner, err := c.value(args[0])
	if err != nil {
		return nil, err
	}
	t, ok := inner.(*statedict.Tensor)
	if !ok {
		return nil, argError(fn, 0, "a tensor", args[0])
	}
	rg, ok := args[1].(bool)
	if !ok {
		return nil, argError(fn, 1, "a bool", args[1])
	}
	p := *t
	p.Parameter, p.RequiresGrad = true, rg
	if want == 4 {
		st, err := c.value(args[3])
		if err != nil {
			return nil, err
		}
		p.Attrs = st
	}
	return &p, nil
}

// rebuildFromType handles torch._tensor._rebuild_from_type_v2(func, new_type, args, state),
// used for tensor subclasses and tensors carrying Python attributes.
func (c *converter) rebuildFromType(args pickle.Tuple) (statedict.Value, error) {
	const fn = "_rebuild_from_type_v2"
	if len(args) != 4 {
		return nil, fmt.Errorf("%s takes 4 arguments, got %d", fn, len(args))
	}
	f, ok := args[0].(pickle.Global)
	if !ok {
		return nil, argError(fn, 0, "a rebuild function", args[0])
	}
	cls, ok := args[1].(pickle.Global)
	if !ok {
		return nil, argError(fn, 1, "a tensor class", args[1])
	}
	inner, ok := args[2].(pickle.Tuple)
	if !ok {
		return nil, argError(fn, 2, "an argument tuple", args[2])
	}
	if f == (pickle.Global{Module: "torch._utils", Name: "_rebuild_wrapper_subclass"}) {
		return c.rebuildWrapperSubclass(cls, inner, args[3])
	}
	v, err := c.object(&pickle.Object{Class: f, Kind: pickle.Reduce, Args: inner})
	if err != nil {
		return nil, err
	}
	t, ok := v.(*statedict.Tensor)
	if !ok {
		return nil, fmt.Errorf("%s: %s did not build a tensor", fn, f)
	}
	out := *t
	switch cls.String() {
	case "torch.Tensor":
	case "torch.nn.parameter.Parameter":
		out.Parameter = true
	default:
		out.Class = cls.String()
	}
	if args[3] != nil {
		if _, none := args[3].(pickle.None); !none {
			st, err := c.value(args[3])
			if err != nil {
				return nil, err
			}
			if d, ok := st.(*statedict.Dict); !ok || d.Len() > 0 {
				out.Attrs = st
			}
		}
	}
	return &out, nil
}

// rebuildQTensor handles _rebuild_qtensor(storage, offset, size, stride, quantizer_params,
// requires_grad, backward_hooks).
func (c *converter) rebuildQTensor(args pickle.Tuple) (statedict.Value, error) {
	const fn = "_rebuild_qtensor"
	if len(args) != 7 {
		return nil, fmt.Errorf("%s takes 7 arguments, got %d", fn, len(args))
	}
	ref, ok := args[0].(storageRef)
	if !ok {
		return nil, argError(fn, 0, "a storage", args[0])
	}
	t := &statedict.Tensor{DType: ref.dtype, Storage: ref.st}
	if err := c.view(fn, t, args[1], args[2], args[3]); err != nil {
		return nil, err
	}
	qp, ok := args[4].(pickle.Tuple)
	if !ok || len(qp) < 1 {
		return nil, argError(fn, 4, "quantizer parameters", args[4])
	}
	scheme, ok := qp[0].(pickle.Global)
	if !ok || scheme.Module != "torch" {
		return nil, argError(fn, 4, "a torch qscheme", qp[0])
	}
	q := &statedict.Quantizer{Scheme: scheme.Name}
	switch scheme.Name {
	case "per_tensor_affine", "per_tensor_symmetric":
		if len(qp) != 3 {
			return nil, fmt.Errorf("%s: %s takes (scale, zero_point)", fn, scheme.Name)
		}
		s, ok1 := qp[1].(float64)
		z, ok2 := qp[2].(int64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%s: malformed %s parameters", fn, scheme.Name)
		}
		q.Scale, q.ZeroPoint = s, z
	case "per_channel_affine", "per_channel_symmetric", "per_channel_affine_float_qparams":
		if len(qp) != 4 {
			return nil, fmt.Errorf("%s: %s takes (scales, zero_points, axis)", fn, scheme.Name)
		}
		sv, err := c.value(qp[1])
		if err != nil {
			return nil, err
		}
		zv, err := c.value(qp[2])
		if err != nil {
			return nil, err
		}
		s, ok1 := sv.(*statedict.Tensor)
		z, ok2 := zv.(*statedict.Tensor)
		axis, ok3 := qp[3].(int64)
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("%s: malformed %s parameters", fn, scheme.Name)
		}
		q.Scales, q.ZeroPoints, q.Axis = s, z, axis
		if z.DType.IsFloatingPoint() {
			// torch pickles float_qparams tensors as per_channel_affine and recognizes
			// them on load by their floating-point zero points.
			q.Scheme = "per_channel_affine_float_qparams"
		}
	default:
		return nil, fmt.Errorf("%s: unknown qscheme torch.%s", fn, scheme.Name)
	}
	t.Quantizer = q
	rg, ok := args[5].(bool)
	if !ok {
		return nil, argError(fn, 5, "a bool", args[5])
	}
	t.RequiresGrad = rg
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%s: storage %q: %w", fn, ref.st.Key, err)
	}
	return t, nil
}

// rebuildDeviceTensor handles _rebuild_device_tensor_from_cpu_tensor(cpu_tensor, dtype,
// device, requires_grad), which XLA and storage-less privateuse1 tensors use: the device is
// an argument instead of the storage location.
func (c *converter) rebuildDeviceTensor(args pickle.Tuple) (statedict.Value, error) {
	const fn = "_rebuild_device_tensor_from_cpu_tensor"
	if len(args) != 4 {
		return nil, fmt.Errorf("%s takes 4 arguments, got %d", fn, len(args))
	}
	v, err := c.value(args[0])
	if err != nil {
		return nil, err
	}
	t, ok := v.(*statedict.Tensor)
	if !ok {
		return nil, argError(fn, 0, "a tensor", args[0])
	}
	dev, ok := asString(args[2])
	if !ok {
		return nil, argError(fn, 2, "a device string", args[2])
	}
	rg, _ := args[3].(bool)
	out := *t
	st := *t.Storage
	st.Location = dev
	out.Storage, out.RequiresGrad = &st, rg
	return &out, nil
}

// legacyTensor handles the pre-1.0 pickling of tensors as torch.FloatTensor instances whose
// BUILD state is (storage, offset, size, stride).
func (c *converter) legacyTensor(dt statedict.DType, state pickle.Value) (statedict.Value, error) {
	st, ok := state.(pickle.Tuple)
	if !ok || len(st) != 4 {
		return nil, fmt.Errorf("legacy tensor state is %s, want (storage, offset, size, stride)", describe(state))
	}
	ref, ok := st[0].(storageRef)
	if !ok {
		return nil, argError("legacy tensor", 0, "a storage", st[0])
	}
	t := &statedict.Tensor{DType: dt, Storage: ref.st}
	if err := c.view("legacy tensor", t, st[1], st[2], st[3]); err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("legacy tensor: storage %q: %w", ref.st.Key, err)
	}
	return t, nil
}
