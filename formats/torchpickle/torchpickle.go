// Package torchpickle interprets the pickle inside a torch.save checkpoint: it turns the
// inert records the restricted unpickler produces (formats/pickle) into statedict values,
// building tensors for torch's rebuild functions (_rebuild_tensor_v2, _rebuild_tensor_v3,
// _rebuild_parameter, _rebuild_qtensor, ...) and resolving persistent ids to storages through
// the container format (zip records, legacy stream, DCP slices). It never executes anything:
// each allowlisted torch function has a Go interpretation here, and every other object stays
// an inert statedict.Object.
package torchpickle

import (
	"fmt"
	"math/big"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/statedict"
)

// StorageRequest is what a persistent id asks the container for.
type StorageRequest struct {
	Key      string          // record key ("0", or a pointer string in old files)
	Location string          // device tag it was saved with
	DType    statedict.DType // storage element type (Uint8 for UntypedStorage)
	NumEl    int64           // elements of DType (bytes for UntypedStorage)
	// Legacy 6-tuple ids may carry a view (root key, offset, numel) into another storage.
	View *StorageView
}

// StorageView is the optional view metadata of legacy persistent ids.
type StorageView struct {
	Key    string
	Offset int64
	NumEl  int64
}

// Resolver returns the storage a persistent id names. It is called once per distinct key;
// later references to the same key reuse the result (shared storages stay shared).
type Resolver func(req StorageRequest) (*statedict.Storage, error)

// storageRef is what a persistent id decodes to inside the pickle.
type storageRef struct {
	st    *statedict.Storage
	dtype statedict.DType
}

// Options tune Load.
type Options struct {
	// Limits for the unpickler; zero fields take pickle.DefaultLimits.
	Limits pickle.Limits
	// Allow adds globals to the unpickler's allowlist (used by DCP).
	Allow []pickle.Global
}

// Load decodes one torch.save pickle at the start of data and converts it to statedict values.
// It returns the value and the number of bytes the pickle occupied.
func Load(data []byte, resolve Resolver, opts Options) (statedict.Value, int64, error) {
	storages := map[string]*statedict.Storage{}
	c := converter{seen: map[any]statedict.Value{}}
	dec := pickle.NewDecoder(data, pickle.Options{
		Limits: opts.Limits,
		Allow:  opts.Allow,
		// Plain tensors are built when their rebuild call is decoded, as torch.load does:
		// their argument tuples, size and stride tuples and hook dicts are garbage at once,
		// which halves the memory a pickle of many tensors needs while it is decoded.
		Reduce: func(g pickle.Global, args pickle.Tuple) (pickle.Value, bool, error) {
			if n, v3, ok := tensorRebuild(g); ok {
				t, err := c.rebuildTensor(args, n, v3)
				if err != nil {
					return nil, false, fmt.Errorf("%s: %w", g, err)
				}
				return t, true, nil
			}
			return nil, false, nil
		},
		PersistentLoad: func(pid pickle.Value) (pickle.Value, error) {
			if cls, ok := ModuleClass(pid); ok {
				return cls, nil
			}
			req, err := ParsePID(pid)
			if err != nil {
				return nil, err
			}
			st, ok := storages[req.Key]
			if !ok {
				if st, err = resolve(req); err != nil {
					return nil, err
				}
				storages[req.Key] = st
			}
			return storageRef{st, req.DType}, nil
		},
	})
	v, err := dec.Decode()
	end := dec.Offset()
	if err != nil {
		return nil, end, knownSubclass(data[:min(end+1, int64(len(data)))], err)
	}
	// From here the decoder and its memo are garbage: converting does not keep them alive.
	out, err := c.value(v)
	if err != nil {
		return nil, end, err
	}
	// The tree keeps the pickle's sharing; refuse one whose expansion listing or flattening
	// would produce is out of proportion (a shared-structure bomb).
	if err := statedict.CheckExpansion(out); err != nil {
		return nil, end, err
	}
	return out, end, nil
}

// ModuleClass recognizes the persistent id the legacy torch.save writes for an nn.Module
// class, ('module', class, source file, source code), and returns the class, as torch's
// legacy loader does (it compares the saved source with the class's, a warning at most).
// Nothing of the source code is read or run.
func ModuleClass(pid pickle.Value) (pickle.Global, bool) {
	t, ok := pid.(pickle.Tuple)
	if !ok || len(t) != 4 {
		return pickle.Global{}, false
	}
	if s, _ := t[0].(string); s != "module" {
		return pickle.Global{}, false
	}
	g, ok := t[1].(pickle.Global)
	return g, ok
}

// ParsePID validates a storage persistent id ('storage', storage_type, key, location, numel[, view_metadata]).
func ParsePID(pid pickle.Value) (StorageRequest, error) {
	t, ok := pid.(pickle.Tuple)
	if !ok || len(t) < 5 || len(t) > 6 {
		return StorageRequest{}, fmt.Errorf("persistent id is %s, want a ('storage', type, key, location, numel) tuple", describe(pid))
	}
	if s, _ := t[0].(string); s != "storage" {
		return StorageRequest{}, fmt.Errorf("persistent id of kind %s: only 'storage' ids are accepted", describe(t[0]))
	}
	g, ok := t[1].(pickle.Global)
	if !ok {
		return StorageRequest{}, fmt.Errorf("persistent id storage type is %s, want a storage class", describe(t[1]))
	}
	dt, err := storageDType(g)
	if err != nil {
		return StorageRequest{}, err
	}
	key, ok := asString(t[2])
	if !ok {
		return StorageRequest{}, fmt.Errorf("persistent id key is %s, want a string", describe(t[2]))
	}
	loc, ok := asString(t[3])
	if !ok {
		return StorageRequest{}, fmt.Errorf("persistent id location is %s, want a string", describe(t[3]))
	}
	n, ok := t[4].(int64)
	if !ok || n < 0 {
		return StorageRequest{}, fmt.Errorf("persistent id numel is %s, want a non-negative int", describe(t[4]))
	}
	req := StorageRequest{Key: key, Location: loc, DType: dt, NumEl: n}
	if len(t) == 6 {
		if vm, ok := t[5].(pickle.Tuple); ok {
			if len(vm) != 3 {
				return req, fmt.Errorf("legacy view metadata has %d items, want 3", len(vm))
			}
			vk, ok1 := asString(vm[0])
			off, ok2 := vm[1].(int64)
			vn, ok3 := vm[2].(int64)
			if !ok1 || !ok2 || !ok3 || off < 0 || vn < 0 {
				return req, fmt.Errorf("malformed legacy view metadata")
			}
			req.View = &StorageView{Key: vk, Offset: off, NumEl: vn}
		} else if _, none := t[5].(pickle.None); !none && t[5] != nil {
			return req, fmt.Errorf("legacy view metadata is %s", describe(t[5]))
		}
	}
	return req, nil
}

// asString accepts str, or the bytes Python 2 files hold (decoded as ASCII, as torch does).
func asString(v pickle.Value) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// storageDType maps a storage class GLOBAL to its element type. As in torch's loader only the
// class name matters (torch.cuda.FloatStorage is float32); UntypedStorage holds bytes.
func storageDType(g pickle.Global) (statedict.DType, error) {
	switch g.Name {
	case "UntypedStorage":
		return statedict.Uint8, nil
	case "TypedStorage":
		return 0, fmt.Errorf("persistent id names %s without a dtype", g)
	}
	if d, ok := statedict.DTypeForStorage(g.Name); ok && (g.Module == "torch" || g.Module == "torch.cuda") {
		return d, nil
	}
	return 0, fmt.Errorf("persistent id names %s, which is not a torch storage class", g)
}

func describe(v pickle.Value) string {
	switch v := v.(type) {
	case nil, pickle.None:
		return "None"
	case string:
		return fmt.Sprintf("str %q", v)
	case int64:
		return fmt.Sprintf("int %d", v)
	case pickle.Global:
		return "global " + v.String()
	case *pickle.Object:
		return "object " + v.Class.String()
	case *statedict.Tensor:
		return "a tensor"
	case *statedict.DTensor:
		return "a DTensor"
	}
	return fmt.Sprintf("%T", v)
}

// converter turns pickle values into statedict values, keeping shared objects shared
// (tuples too, by backing array: a pickle's memo shares them like any object).
type converter struct {
	seen  map[any]statedict.Value // pickle pointer (or tupleID) → converted value
	depth int
}

// tupleID identifies a decoded tuple by its backing array.
type tupleID struct {
	first *pickle.Value
	n     int
}

// maxDepth bounds nesting on every recursive path (containers, objects, rebuild calls
// nested in rebuild calls) so hostile input cannot exhaust the goroutine stack.
const maxDepth = 10000

// enter counts one level of recursion; leave undoes it.
func (c *converter) enter() error {
	c.depth++
	if c.depth > maxDepth {
		return fmt.Errorf("%w: values nested deeper than %d levels", ckpterr.ErrUnsupported, maxDepth)
	}
	return nil
}

func (c *converter) leave() { c.depth-- }

func (c *converter) value(v pickle.Value) (statedict.Value, error) {
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.leave()
	switch x := v.(type) {
	case nil, pickle.None:
		return nil, nil
	case bool, int64, float64, complex128, string:
		return x, nil
	case *big.Int:
		return x, nil
	case []byte:
		return x, nil
	case *statedict.Tensor: // built while decoding
		return x, nil
	case pickle.Tuple:
		if len(x) == 0 {
			return statedict.Tuple{}, nil
		}
		id := tupleID{&x[0], len(x)}
		if done, ok := c.seen[id]; ok {
			return done, nil
		}
		out := make(statedict.Tuple, len(x))
		for i, it := range x {
			cv, err := c.value(it)
			if err != nil {
				return nil, err
			}
			out[i] = cv
		}
		c.seen[id] = out
		return out, nil
	case *pickle.List:
		if done, ok := c.seen[x]; ok {
			return done, nil
		}
		out := &statedict.List{Items: make([]statedict.Value, len(x.Items))}
		c.seen[x] = out
		for i, it := range x.Items {
			cv, err := c.value(it)
			if err != nil {
				return nil, err
			}
			out.Items[i] = cv
		}
		return out, nil
	case *pickle.Dict:
		if done, ok := c.seen[x]; ok {
			return done, nil
		}
		out := statedict.NewDict("")
		if x.Class != nil {
			out.Class = x.Class.String()
		}
		c.seen[x] = out
		keys, vals := x.Items()
		for i := range keys {
			k, err := c.value(keys[i])
			if err != nil {
				return nil, err
			}
			val, err := c.value(vals[i])
			if err != nil {
				return nil, fmt.Errorf("[%s]: %w", statedict.KeyString(k), err)
			}
			out.Set(k, val)
		}
		if x.State != nil {
			a, err := c.value(x.State)
			if err != nil {
				return nil, err
			}
			out.Attrs = a
		}
		return out, nil
	case *pickle.Set:
		items := make([]statedict.Value, len(x.Items))
		for i, it := range x.Items {
			cv, err := c.value(it)
			if err != nil {
				return nil, err
			}
			items[i] = cv
		}
		class := "builtins.set"
		if x.Frozen {
			class = "builtins.frozenset"
		}
		return &statedict.Object{Class: class, Args: []statedict.Value{&statedict.List{Items: items}}}, nil
	case *pickle.NDArray:
		return &statedict.NDArray{DType: x.DType, Shape: x.Shape, Fortran: x.Fortran, Scalar: x.Scalar, Data: x.Data}, nil
	case pickle.Global:
		if d, ok := dtypeGlobal(x); ok {
			return d, nil
		}
		return &statedict.Object{Class: x.String(), Module: x.Module, Call: statedict.CallRef}, nil
	case storageRef:
		return &statedict.Object{Class: "torch.storage.TypedStorage", State: x.st.Key}, nil
	case *pickle.Object:
		if done, ok := c.seen[x]; ok {
			return done, nil
		}
		out, err := c.object(x)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", x.Class, err)
		}
		c.seen[x] = out
		return out, nil
	}
	return nil, fmt.Errorf("unexpected pickle value %T", v)
}

// dtypeGlobal recognizes dtype globals such as torch.bfloat16.
func dtypeGlobal(g pickle.Global) (statedict.DType, bool) {
	if g.Module != "torch" {
		return 0, false
	}
	return statedict.ParseDType(g.Name)
}

// calls maps the pickle's ways of making an object to statedict's.
var calls = map[pickle.ObjectKind]statedict.Call{
	pickle.Reduce: statedict.CallReduce, pickle.Inst: statedict.CallReduce,
	pickle.NewObj: statedict.CallNew, pickle.NewObjEx: statedict.CallNewEx, pickle.Build: statedict.CallBuild,
}

// inert converts an object that ckpt does not interpret into a statedict.Object record
// holding everything the pickle gave it: how it was made, its arguments, state and items.
func (c *converter) inert(o *pickle.Object) (statedict.Value, error) {
	out := &statedict.Object{Class: o.Class.String(), Module: o.Class.Module, Call: calls[o.Kind], Args: []statedict.Value{}}
	if o.Kind == pickle.Build {
		out.Args = nil
	}
	for _, a := range o.Args {
		cv, err := c.value(a)
		if err != nil {
			return nil, err
		}
		out.Args = append(out.Args, cv)
	}
	if o.Kwargs != nil {
		kw, err := c.value(o.Kwargs)
		if err != nil {
			return nil, err
		}
		out.Kwargs = kw.(*statedict.Dict)
	}
	if o.State != nil {
		st, err := c.value(o.State)
		if err != nil {
			return nil, err
		}
		out.State = st
	}
	for _, it := range o.ListItems {
		cv, err := c.value(it)
		if err != nil {
			return nil, err
		}
		out.ListItems = append(out.ListItems, cv)
	}
	if o.DictItems != nil {
		d, err := c.value(o.DictItems)
		if err != nil {
			return nil, err
		}
		out.DictItems = d.(*statedict.Dict)
	}
	return out, nil
}
