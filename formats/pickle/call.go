package pickle

import (
	"fmt"
	"math/big"
	"strings"
)

// Calls (REDUCE, NEWOBJ, NEWOBJ_EX, INST, OBJ) and BUILD. Nothing is ever
// called: a few pure-data constructors are decoded natively, every other
// call becomes an inert *Object.

func (d *Decoder) loadReduce() error {
	fa, err := d.popN(2)
	if err != nil {
		return err
	}
	fn, argv := fa[0], fa[1]
	args, ok := argv.(Tuple)
	if !ok {
		return fmt.Errorf("REDUCE arguments are %s, not a tuple", typeName(argv))
	}
	g, ok := fn.(Global)
	if !ok {
		return fmt.Errorf("REDUCE callable is %s, not a global", typeName(fn))
	}
	v, err := d.call(g, args, Reduce)
	if err != nil {
		return err
	}
	return d.push(v)
}

// pushCall evaluates g(*items) for INST and OBJ; items may alias the stack.
func (d *Decoder) pushCall(g Global, items []Value, kind ObjectKind) error {
	if err := d.build(items); err != nil {
		return err
	}
	args, err := d.copyItems(items)
	if err != nil {
		return err
	}
	v, err := d.call(g, args, kind)
	if err != nil {
		return err
	}
	return d.push(v)
}

func (d *Decoder) loadNewObj() error {
	ca, err := d.popN(2)
	if err != nil {
		return err
	}
	c, argv := ca[0], ca[1]
	args, ok := argv.(Tuple)
	if !ok {
		return fmt.Errorf("NEWOBJ arguments are %s, not a tuple", typeName(argv))
	}
	g, ok := c.(Global)
	if !ok {
		return fmt.Errorf("NEWOBJ class is %s, not a global", typeName(c))
	}
	v, err := d.newObj(g, args)
	if err != nil {
		return err
	}
	return d.push(v)
}

func (d *Decoder) loadNewObjEx() error {
	cak, err := d.popN(3)
	if err != nil {
		return err
	}
	c, argv, kwv := cak[0], cak[1], cak[2]
	args, ok := argv.(Tuple)
	if !ok {
		return fmt.Errorf("NEWOBJ_EX arguments are %s, not a tuple", typeName(argv))
	}
	kwargs, ok := kwv.(*Dict)
	if !ok {
		return fmt.Errorf("NEWOBJ_EX keyword arguments are %s, not a dict", typeName(kwv))
	}
	g, ok := c.(Global)
	if !ok {
		return fmt.Errorf("NEWOBJ_EX class is %s, not a global", typeName(c))
	}
	v, err := d.newObjEx(g, args, kwargs)
	if err != nil {
		return err
	}
	return d.push(v)
}

func (d *Decoder) newObjEx(g Global, args Tuple, kwargs *Dict) (Value, error) {
	if kwargs.Len() == 0 {
		if v, ok, err := d.constructNew(g, args); err != nil || ok {
			return v, err
		}
	}
	o, err := d.object(g, NewObjEx, args)
	if err != nil {
		return nil, err
	}
	o.Kwargs = kwargs
	return o, nil
}

func (d *Decoder) loadBuild() error {
	s, err := d.popN(1)
	if err != nil {
		return err
	}
	if err := d.build(s); err != nil {
		return err
	}
	state := s[0]
	target, err := d.top()
	if err != nil {
		return err
	}
	switch t := target.(type) {
	case *Object:
		t.State = state
	case *Dict:
		t.State = state
	case Global:
		o, err := d.object(t, Build, nil)
		if err != nil {
			return err
		}
		o.State = state
		d.stack[len(d.stack)-1] = o
	case *NDArray:
		return d.buildArray(t, state)
	case *NPDType:
		return buildDType(t, state)
	default:
		return fmt.Errorf("BUILD on %s is not supported", typeName(target))
	}
	return nil
}

// object charges and returns an inert call record.
func (d *Decoder) object(g Global, kind ObjectKind, args Tuple) (*Object, error) {
	if err := d.charge(objectCost, "object"); err != nil {
		return nil, err
	}
	return &Object{Class: g, Kind: kind, Args: args}, nil
}

// call evaluates g(*args): natively for the pure-data constructors, through
// Options.Reduce when it takes the call, else as an inert Object of the given
// kind.
func (d *Decoder) call(g Global, args Tuple, kind ObjectKind) (Value, error) {
	if v, ok, err := d.construct(g, args); err != nil || ok {
		return v, err
	}
	if kind == Reduce && d.opts.Reduce != nil {
		v, ok, err := d.opts.Reduce(g, args)
		if err != nil {
			return nil, err
		}
		if ok {
			return v, d.charge(objectCost, "object")
		}
	}
	return d.object(g, kind, args)
}

// newObj evaluates cls.__new__(cls, *args) (NEWOBJ).
func (d *Decoder) newObj(g Global, args Tuple) (Value, error) {
	if v, ok, err := d.constructNew(g, args); err != nil || ok {
		return v, err
	}
	return d.object(g, NewObj, args)
}

// constructNew handles cls.__new__(cls, *args) for the builtin data types.
// The mutable containers' __new__ ignores its arguments (their __init__
// fills them), so those come out empty, as in Python.
func (d *Decoder) constructNew(g Global, args Tuple) (Value, bool, error) {
	switch g {
	case Global{"builtins", "complex"}, Global{"builtins", "frozenset"},
		Global{"builtins", "tuple"}, Global{"builtins", "bytes"}:
		return d.construct(g, args)
	case Global{"builtins", "dict"}, Global{"builtins", "list"}, Global{"builtins", "set"},
		Global{"builtins", "bytearray"}, Global{"collections", "OrderedDict"},
		Global{"collections", "Counter"}, Global{"collections", "defaultdict"}:
		return d.construct(g, nil)
	}
	return nil, false, nil
}

// construct decodes the pure-data constructors natively. ok is false when g
// is not one of them or args do not have the shape Python's pickler emits
// for them; the caller then records an inert Object.
func (d *Decoder) construct(g Global, args Tuple) (v Value, ok bool, err error) {
	switch g.Module {
	case "collections":
		switch g.Name {
		case "OrderedDict":
			return d.dictFrom(&Global{g.Module, g.Name}, args, true)
		case "Counter":
			return d.dictFrom(&Global{g.Module, g.Name}, args, false)
		case "defaultdict":
			factory, rest := Value(None{}), args
			if len(args) > 0 {
				factory, rest = args[0], args[1:]
			}
			v, ok, err := d.dictFrom(&Global{g.Module, g.Name}, rest, true)
			if ok {
				v.(*Dict).Default = factory
			}
			return v, ok, err
		}
	case "builtins":
		switch g.Name {
		case "dict":
			return d.dictFrom(nil, args, true)
		case "set", "frozenset":
			return d.setFrom(args, g.Name == "frozenset")
		case "list":
			return d.listFrom(args)
		case "tuple":
			return d.tupleFrom(args)
		case "bytes", "bytearray":
			return d.bytesFrom(args)
		case "complex":
			return complexFrom(args)
		}
	case "_codecs":
		if g.Name == "encode" {
			return d.codecsEncode(args)
		}
	case "copyreg":
		switch g.Name {
		case "_reconstructor":
			return d.reconstructor(args)
		case "__newobj__":
			if len(args) >= 1 {
				if cls, isG := args[0].(Global); isG {
					v, err := d.newObj(cls, args[1:])
					return v, err == nil, err
				}
			}
		case "__newobj_ex__":
			if len(args) == 3 {
				cls, ok1 := args[0].(Global)
				a, ok2 := args[1].(Tuple)
				kw, ok3 := args[2].(*Dict)
				if ok1 && ok2 && ok3 {
					v, err := d.newObjEx(cls, a, kw)
					return v, err == nil, err
				}
			}
		}
	case "numpy":
		if g.Name == "dtype" {
			return d.numpyDType(args)
		}
	case "numpy.core.multiarray", "numpy._core.multiarray":
		switch g.Name {
		case "_reconstruct":
			return d.numpyReconstruct(args)
		case "scalar":
			return d.numpyScalar(args)
		}
	case "numpy.core.numeric", "numpy._core.numeric":
		if g.Name == "_frombuffer" {
			return d.numpyFromBuffer(args)
		}
	}
	return nil, false, nil
}

// dictFrom builds dict(), dict(mapping) and, if pairs is set,
// dict(iterable of pairs).
func (d *Decoder) dictFrom(class *Global, args Tuple, pairs bool) (Value, bool, error) {
	if len(args) > 1 {
		return nil, false, nil
	}
	dict := &Dict{Class: class}
	if len(args) == 1 {
		switch src := args[0].(type) {
		case *Dict:
			for i, k := range src.keys {
				if err := d.dictPut(dict, k, src.vals[i]); err != nil {
					return nil, false, err
				}
			}
		case *List, Tuple:
			if !pairs {
				return nil, false, nil
			}
			items := seqItems(src)
			for i, it := range items {
				kv := seqItems(it)
				if kv == nil || len(kv) != 2 {
					return nil, false, fmt.Errorf("dictionary update sequence element #%d is %s, not a pair", i, typeName(it))
				}
				if err := d.dictPut(dict, kv[0], kv[1]); err != nil {
					return nil, false, err
				}
			}
		default:
			return nil, false, nil
		}
	}
	if err := d.charge(objectCost, "dict"); err != nil {
		return nil, false, err
	}
	return dict, true, nil
}

// seqItems returns the items of a list or tuple, else nil.
func seqItems(v Value) []Value {
	switch s := v.(type) {
	case *List:
		if s.Items == nil {
			return []Value{}
		}
		return s.Items
	case Tuple:
		if s == nil {
			return Tuple{}
		}
		return s
	}
	return nil
}

func (d *Decoder) setFrom(args Tuple, frozen bool) (Value, bool, error) {
	s := &Set{Frozen: frozen}
	switch len(args) {
	case 0:
	case 1:
		var items []Value
		if src, ok := args[0].(*Set); ok {
			items = src.Items
		} else if items = seqItems(args[0]); items == nil {
			return nil, false, nil
		}
		if err := d.addToSet(s, items); err != nil {
			return nil, false, err
		}
	default:
		return nil, false, nil
	}
	if err := d.charge(objectCost, "set"); err != nil {
		return nil, false, err
	}
	return s, true, nil
}

func (d *Decoder) listFrom(args Tuple) (Value, bool, error) {
	l := &List{}
	if len(args) > 1 {
		return nil, false, nil
	}
	if len(args) == 1 {
		items := seqItems(args[0])
		if items == nil {
			return nil, false, nil
		}
		if err := d.appendTo(l, items); err != nil {
			return nil, false, err
		}
	}
	return l, true, d.charge(objectCost, "list")
}

func (d *Decoder) tupleFrom(args Tuple) (Value, bool, error) {
	switch len(args) {
	case 0:
		return Tuple{}, true, nil
	case 1:
		if items := seqItems(args[0]); items != nil {
			t, err := d.copyItems(items)
			return t, err == nil, err
		}
	}
	return nil, false, nil
}

// bytesFrom builds bytes() / bytearray() from nothing, bytes, or (str, encoding).
func (d *Decoder) bytesFrom(args Tuple) (Value, bool, error) {
	switch len(args) {
	case 0:
		return []byte{}, true, nil
	case 1:
		if b, ok := args[0].([]byte); ok {
			if err := d.charge(int64(len(b)), "bytes"); err != nil {
				return nil, false, err
			}
			return append([]byte{}, b...), true, nil
		}
	case 2:
		s, ok1 := args[0].(string)
		enc, ok2 := args[1].(string)
		if ok1 && ok2 {
			return d.encodeString(s, enc)
		}
	}
	return nil, false, nil
}

// codecsEncode handles _codecs.encode(str[, encoding[, errors]]), which
// protocols 0–2 use to pickle bytes: latin-1, utf-8 and ascii.
func (d *Decoder) codecsEncode(args Tuple) (Value, bool, error) {
	if len(args) < 1 || len(args) > 3 {
		return nil, false, nil
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, false, nil
	}
	enc := "utf-8"
	if len(args) >= 2 {
		if enc, ok = args[1].(string); !ok {
			return nil, false, nil
		}
	}
	if len(args) == 3 {
		if errs, ok := args[2].(string); !ok || errs != "strict" {
			return nil, false, nil
		}
	}
	return d.encodeString(s, enc)
}

func (d *Decoder) encodeString(s, enc string) (Value, bool, error) {
	if err := d.charge(int64(len(s)), "bytes"); err != nil {
		return nil, false, err
	}
	switch strings.ReplaceAll(strings.ToLower(enc), "_", "-") {
	case "latin-1", "latin1", "iso-8859-1", "iso8859-1", "l1", "latin":
		b, err := latin1Bytes(s)
		return b, err == nil, err
	case "utf-8", "utf8":
		return []byte(s), true, nil
	case "ascii", "us-ascii":
		for i := 0; i < len(s); i++ {
			if s[i] >= 0x80 {
				return nil, false, fmt.Errorf("'ascii' codec can't encode byte 0x%02x in position %d", s[i], i)
			}
		}
		return []byte(s), true, nil
	}
	return nil, false, nil
}

func complexFrom(args Tuple) (Value, bool, error) {
	if len(args) < 1 || len(args) > 2 {
		return nil, false, nil
	}
	re, ok := toFloat(args[0])
	if !ok {
		return nil, false, nil
	}
	var im float64
	if len(args) == 2 {
		if im, ok = toFloat(args[1]); !ok {
			return nil, false, nil
		}
	}
	return complex(re, im), true, nil
}

// toFloat converts a Python real number to float64.
func toFloat(v Value) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f, true
	}
	return 0, false
}

// reconstructor handles copyreg._reconstructor(cls, base, state), the way
// protocols 0 and 1 pickle instances of plain classes. With base object it
// is object.__new__(cls) (state ignored, as in Python); with base dict or
// list the state fills the instance's items; other bases give
// base.__new__(cls, state).
func (d *Decoder) reconstructor(args Tuple) (Value, bool, error) {
	if len(args) != 3 {
		return nil, false, nil
	}
	cls, ok1 := args[0].(Global)
	base, ok2 := args[1].(Global)
	if !ok1 || !ok2 {
		return nil, false, nil
	}
	state := args[2]
	switch base {
	case Global{"builtins", "object"}:
		o, err := d.object(cls, NewObj, Tuple{})
		return o, err == nil, err
	case Global{"builtins", "dict"}:
		src, ok := state.(*Dict)
		if !ok {
			return nil, false, nil
		}
		o, err := d.object(cls, NewObj, Tuple{})
		if err != nil {
			return nil, false, err
		}
		o.DictItems = &Dict{}
		for i, k := range src.keys {
			if err := d.dictPut(o.DictItems, k, src.vals[i]); err != nil {
				return nil, false, err
			}
		}
		return o, true, nil
	case Global{"builtins", "list"}:
		items := seqItems(state)
		if items == nil {
			return nil, false, nil
		}
		o, err := d.object(cls, NewObj, Tuple{})
		if err != nil {
			return nil, false, err
		}
		return o, true, d.appendTo(o, items)
	}
	o, err := d.object(cls, NewObj, Tuple{state})
	return o, err == nil, err
}
