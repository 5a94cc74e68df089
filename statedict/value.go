package statedict

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"sync"
)

// Value is one node of a checkpoint tree. Its dynamic type is one of:
// nil (Python None), bool, int64, *big.Int (ints beyond int64), float64, complex128, string,
// []byte, *Dict, *List, Tuple, *Tensor, *Object (an inert record of a Python object ckpt does
// not model, e.g. torch.Size, torch.device, argparse.Namespace), *NDArray (numpy data),
// DType (a torch dtype used as a value, e.g. in DCP metadata or optimizer options) or
// *DTensor (one rank's shard of a DTensor, in a rank file's tree only).
type Value = any

// Entry is one key/value pair of a Dict.
type Entry struct {
	Key   Value
	Value Value
}

// Dict is an insertion-ordered mapping, like Python's dict and OrderedDict. Keys are usually
// strings (state_dict names) or ints (optimizer parameter ids).
type Dict struct {
	// Class is "" for a plain dict, or the Python class it was ("collections.OrderedDict").
	Class string
	// Attrs holds instance attributes set on the mapping, such as the `_metadata` dict
	// nn.Module.state_dict() attaches to its OrderedDict; nil if none.
	Attrs Value
	// NameOrder is set by the readers of formats that do not keep the order the saving
	// program inserted the entries in (a safetensors header lists its tensors by dtype and
	// name): the entries' order then says nothing of a model's parameter order.
	NameOrder bool
	entries   []Entry
	// index maps the hashable keys (string, int64, bool) of the first indexed entries to
	// their positions; the entries Append added after them are indexed by the next
	// lookup (under mu, as lookups may run at once).
	mu      sync.Mutex
	index   map[any]int
	indexed int
	scans   int // lookups answered by scanning the unindexed entries
}

// maxScans is how many lookups scan the entries Append added before one indexes them: a
// few probes of a large dict (is this a DeepSpeed file? a scheduler?) cost no index.
const maxScans = 8

// NewDict returns an empty dict of the given Python class ("" for dict).
func NewDict(class string) *Dict { return &Dict{Class: class} }

// NewDictSize is NewDict with room for n entries: a reader that knows how many it will set
// allocates them once, not twice over as the dict grows (a checkpoint may hold hundreds of
// thousands of tensors).
func NewDictSize(class string, n int) *Dict {
	if n <= 0 {
		return NewDict(class)
	}
	return &Dict{Class: class, entries: make([]Entry, 0, n)}
}

// Append adds an entry whose key d does not hold — as a reader knows that has checked
// its format's keys are unique, or a copy of a dict's entries — without looking it up:
// a dict filled by Append and only walked, as a conversion walks hundreds of thousands of
// tensors, never builds its index (about 40 bytes an entry); the first lookup does. A key
// d already holds must be given to Set instead.
func (d *Dict) Append(key, value Value) {
	d.entries = append(d.entries, Entry{key, value})
}

// find returns the position of the entry under the hashable key ik. d.mu must be held.
func (d *Dict) find(ik any) (int, bool) {
	if d.indexed < len(d.entries) && d.scans < maxScans {
		d.scans++
		if i, ok := d.index[ik]; ok {
			return i, true
		}
		for i := d.indexed; i < len(d.entries); i++ {
			if k, ok := indexKey(d.entries[i].Key); ok && k == ik {
				return i, true
			}
		}
		return 0, false
	}
	d.catchUp()
	i, ok := d.index[ik]
	return i, ok
}

// catchUp indexes the entries Append added since the last lookup. d.mu must be held.
func (d *Dict) catchUp() {
	if d.indexed == len(d.entries) {
		return
	}
	if d.index == nil {
		d.index = make(map[any]int, len(d.entries))
	}
	for i := d.indexed; i < len(d.entries); i++ {
		if ik, ok := indexKey(d.entries[i].Key); ok {
			if _, dup := d.index[ik]; !dup {
				d.index[ik] = i
			}
		}
	}
	d.indexed = len(d.entries)
}

// Len is the number of entries.
func (d *Dict) Len() int { return len(d.entries) }

// Entries returns the entries in insertion order. The slice must not be modified.
func (d *Dict) Entries() []Entry { return d.entries }

func indexKey(k Value) (any, bool) {
	switch b := k.(type) {
	case string, int64:
		return k, true // as boxed already: no second allocation per key
	case bool: // Python: True == 1
		if b {
			return int64(1), true
		}
		return int64(0), true
	}
	return nil, false
}

// Get returns the value stored under key.
func (d *Dict) Get(key Value) (Value, bool) {
	if ik, ok := indexKey(key); ok {
		d.mu.Lock()
		i, ok := d.find(ik)
		d.mu.Unlock()
		if ok {
			return d.entries[i].Value, true
		}
		return nil, false
	}
	for _, e := range d.entries {
		if KeyString(e.Key) == KeyString(key) {
			return e.Value, true
		}
	}
	return nil, false
}

// Set stores value under key. Replacing a key keeps its position, as in Python.
func (d *Dict) Set(key, value Value) {
	if ik, ok := indexKey(key); ok {
		d.mu.Lock()
		defer d.mu.Unlock()
		if i, ok := d.find(ik); ok {
			d.entries[i].Value = value
			return
		}
		if d.indexed == len(d.entries) {
			if d.index == nil {
				d.index = make(map[any]int)
			}
			d.index[ik] = len(d.entries)
			d.indexed++
		}
	}
	d.entries = append(d.entries, Entry{key, value})
}

// Delete removes key, keeping the order of the rest.
func (d *Dict) Delete(key Value) bool {
	pos := -1
	for i, e := range d.entries {
		if KeyString(e.Key) == KeyString(key) {
			pos = i
			break
		}
	}
	if pos < 0 {
		return false
	}
	d.entries = append(d.entries[:pos], d.entries[pos+1:]...)
	d.mu.Lock()
	d.index, d.indexed = nil, 0
	d.catchUp()
	d.mu.Unlock()
	return true
}

// Clear removes every entry, keeping the class and attributes: for a rewrite that fills
// the same dict (referenced from its parent) with other entries.
func (d *Dict) Clear() {
	d.mu.Lock()
	d.entries, d.index, d.indexed, d.scans = nil, nil, 0, 0
	d.mu.Unlock()
}

// List is a Python list. It is a pointer type so that a list referenced twice stays one list.
type List struct{ Items []Value }

// Tuple is a Python tuple.
type Tuple []Value

// Object is an inert record of a Python object that ckpt does not model as data: the class
// (or callable) the pickle named, how it would have been made from it (Call), the arguments,
// the state it would have been given and the items added to it. Nothing was ever called to
// produce it; the record holds what a writer needs to pickle the object again as the
// source had it.
type Object struct {
	Class string // "module.qualname", e.g. "torch.Size", "argparse.Namespace"
	// Module is the module part of Class as the pickle named it ("" when Class was not read
	// from a pickle: then the module is all of Class before its last dot).
	Module string
	Call   Call
	Args   []Value
	// Kwargs are the keyword arguments of a NewEx call; nil otherwise.
	Kwargs *Dict
	State  Value
	// ListItems and DictItems are the items appended or set on an instance of a list or
	// dict subclass after it was made (pickle's APPENDS and SETITEMS on the object).
	ListItems []Value
	DictItems *Dict
}

// Call is how a pickle makes an object from its class or callable.
type Call uint8

// The ways a pickle makes an object.
const (
	// CallReduce is callable(*Args) (REDUCE, and the INST/OBJ opcodes of protocols 0 and 1).
	CallReduce Call = iota
	// CallNew is cls.__new__(cls, *Args) (NEWOBJ, copyreg.__newobj__ and
	// copyreg._reconstructor(cls, object, None)).
	CallNew
	// CallNewEx is cls.__new__(cls, *Args, **Kwargs) (NEWOBJ_EX).
	CallNewEx
	// CallBuild is the class itself given State (a BUILD applied to a bare global).
	CallBuild
	// CallRef is no call: the class or function itself, used as a value
	// (hyper_parameters_type = DictConfig).
	CallRef
)

// NDArray is a numpy array or scalar stored as data: dtype string as numpy spells it
// ("<f8"), shape, and the raw bytes in C (or Fortran, if set) order.
type NDArray struct {
	DType   string
	Shape   []int64
	Fortran bool
	Scalar  bool
	Data    []byte
}

// KeyString renders a dict key as Python's str() does for the key types found in
// checkpoints; it is how flattened names are joined.
func KeyString(k Value) string {
	switch k := k.(type) {
	case string:
		return k
	case int64:
		return strconv.FormatInt(k, 10)
	case *big.Int:
		return k.String()
	case bool:
		if k {
			return "True"
		}
		return "False"
	case nil:
		return "None"
	case float64:
		return PyFloat(k)
	case Tuple:
		parts := make([]string, len(k))
		for i, v := range k {
			parts[i] = KeyString(v)
		}
		if len(parts) == 1 {
			return "(" + parts[0] + ",)"
		}
		return "(" + strings.Join(parts, ", ") + ")"
	case DType:
		return "torch." + k.String()
	}
	return fmt.Sprintf("%v", k)
}

// PyFloat formats f as Python's repr(float) does ("1.0", "1e-05", "1e+16", "inf", "nan"):
// the shortest round-tripping digits, positional for decimal exponents in [-4, 16).
func PyFloat(f float64) string {
	switch {
	case f != f:
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	i := strings.IndexByte(e, 'e')
	exp, _ := strconv.Atoi(e[i+1:])
	if f != 0 && (exp < -4 || exp >= 16) {
		mant, x := e[:i], e[i+1:]
		sign := x[:1]
		x = strings.TrimLeft(x[1:], "0")
		if len(x) < 2 {
			x = strings.Repeat("0", 2-len(x)) + x
		}
		return mant + "e" + sign + x
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
