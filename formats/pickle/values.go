package pickle

import (
	"fmt"
	"math/big"
)

// Value is a decoded Python value. Its dynamic type is one of: [None], bool,
// int64, *big.Int (only for ints outside the int64 range), float64,
// complex128, string, []byte (bytes and bytearray), [Tuple], [*List],
// [*Dict], [*Set], [Global], [*Object], [*NDArray], [*NPDType], or whatever
// [Options.PersistentLoad] returned.
//
// Mutable Python containers decode to pointers, so values shared through the
// pickle memo keep their identity and cycles are representable.
type Value = any

// Opaque is implemented by values an Options.Build hook returns that may be dict keys
// (DCP's MetadataIndex records). Such a key equals no other: it stands for one object
// nothing else in the pickle refers to (Build is offered only those), so a Dict keeps it
// without indexing it.
type Opaque interface{ PickleOpaque() }

// None is Python's None.
type None struct{}

// Tuple is a Python tuple. Tuples are never modified after decoding.
type Tuple []Value

// List is a Python list. It is a pointer type so that shared and
// self-referencing lists keep their identity.
type List struct{ Items []Value }

// Set is a Python set or frozenset. Items are kept in pickle order with
// duplicates (by Python equality, see [Dict.Get]) removed.
type Set struct {
	Items  []Value
	Frozen bool

	index   keyIndex
	indexed int // Items[:indexed] are in index
}

// Global is a reference to a module-level Python name (a class or a
// function), as found in GLOBAL, STACK_GLOBAL and INST opcodes. Module and
// Name are given after Python 2→3 renaming (NAME_MAPPING/IMPORT_MAPPING of
// CPython's _compat_pickle, e.g. __builtin__→builtins, copy_reg→copyreg).
// Name may be dotted (a qualified name, protocol 4).
type Global struct{ Module, Name string }

// String returns "module.name".
func (g Global) String() string { return g.Module + "." + g.Name }

// ObjectKind tells which pickle construct produced an [Object].
type ObjectKind uint8

const (
	// Reduce is callable(*args) from the REDUCE opcode.
	Reduce ObjectKind = iota
	// NewObj is cls.__new__(cls, *args) from NEWOBJ, and the equivalent
	// copyreg._reconstructor(cls, object, None) of protocols 0 and 1.
	NewObj
	// NewObjEx is cls.__new__(cls, *args, **kwargs) from NEWOBJ_EX.
	NewObjEx
	// Inst is class instantiation by the protocol 0/1 INST and OBJ opcodes.
	Inst
	// Build is a BUILD applied directly to a global (no call in between).
	Build
)

// String returns the name of the opcode behind the kind.
func (k ObjectKind) String() string {
	switch k {
	case Reduce:
		return "REDUCE"
	case NewObj:
		return "NEWOBJ"
	case NewObjEx:
		return "NEWOBJ_EX"
	case Inst:
		return "INST"
	case Build:
		return "BUILD"
	}
	return fmt.Sprintf("ObjectKind(%d)", uint8(k))
}

// Object is an inert record of a call the pickle asked for: REDUCE, NEWOBJ,
// NEWOBJ_EX, INST/OBJ, or a BUILD on a bare class. Nothing was called; the
// caller interprets the classes it knows (for example
// torch._utils._rebuild_tensor_v2) and rejects or ignores the rest.
type Object struct {
	Class  Global
	Kind   ObjectKind
	Args   Tuple
	Kwargs *Dict // NEWOBJ_EX only; nil otherwise
	State  Value // argument of the last BUILD on this object; nil if none
	// ListItems holds items added by APPEND/APPENDS, as pickled for
	// instances of list subclasses.
	ListItems []Value
	// DictItems holds items added by SETITEM/SETITEMS, as pickled for
	// instances of dict subclasses; nil if none.
	DictItems *Dict
}

// NDArray is a numpy array or numpy scalar decoded as data, from
// numpy.core.multiarray._reconstruct + BUILD, numpy.core.numeric._frombuffer,
// or numpy.core.multiarray.scalar (module spellings numpy.core and
// numpy._core are both accepted).
type NDArray struct {
	// DType is numpy's dtype.str, e.g. "<f8", "|b1", "<i8", "<U5",
	// "<M8[ns]", "|V16" for structured dtypes, "|O" for object arrays.
	DType string
	// Shape is the array shape; empty for scalars and 0-d arrays.
	Shape []int64
	// Fortran reports that Data is in column-major order.
	Fortran bool
	// Data is the raw element bytes in the byte order given by DType; nil
	// for object arrays.
	Data []byte
	// Scalar reports a numpy scalar (numpy.float64(1.5) and the like)
	// rather than an array.
	Scalar bool
	// Descr is the full decoded dtype (fields, subarray, metadata).
	Descr *NPDType
	// Objects holds the elements of an object array (DType "|O") in
	// storage order; nil otherwise.
	Objects []Value
	// built reports that BUILD (or a complete constructor) filled the array.
	built bool
}

// NPDType is a numpy dtype decoded from numpy.dtype(name, align, copy) and
// its BUILD state.
type NPDType struct {
	// Name is the constructor argument: kind letter and item size, e.g.
	// "f8", "b1", "U5" (characters), "V16", "O8", "M8".
	Name string
	// Endian is '<', '>' or '|' from the BUILD state; 0 before BUILD.
	Endian byte
	// Version is the state version (3, or 4 when metadata is present).
	Version int64
	// Subarray, Names and Fields are kept as pickled; nil (Python None)
	// for plain dtypes.
	Subarray, Names, Fields Value
	// ElSize and Alignment are set for flexible types (V, S, U); -1 otherwise.
	ElSize, Alignment int64
	// Flags are numpy's dtype flags.
	Flags int64
	// Metadata is the version-4 metadata (for datetimes a tuple
	// (dict, (unit, count, ...))); nil otherwise.
	Metadata Value
}

// isNone reports whether v is Python None.
func isNone(v Value) bool {
	_, ok := v.(None)
	return ok
}

// typeName returns the Python type name of v for error messages. It never
// looks inside v.
func typeName(v Value) string {
	switch x := v.(type) {
	case None:
		return "NoneType"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case complex128:
		return "complex"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case Tuple:
		return "tuple"
	case *List:
		return "list"
	case *Dict:
		if x.Class != nil {
			return x.Class.String()
		}
		return "dict"
	case *Set:
		if x.Frozen {
			return "frozenset"
		}
		return "set"
	case Global:
		return "global " + x.String()
	case *Object:
		return x.Class.String() + " object"
	case *NDArray:
		return "numpy.ndarray"
	case *NPDType:
		return "numpy.dtype"
	case nil:
		return "nil"
	}
	return fmt.Sprintf("%T", v)
}
