package pickle

import (
	"encoding/binary"
	"fmt"
	"iter"
	"math"
	"math/big"
	"reflect"
	"slices"
)

// Dict is an insertion-ordered Python dict (also OrderedDict, Counter and
// defaultdict, told apart by Class). Keys may be any hashable [Value]; key
// equality follows Python: True == 1 == 1.0, -0.0 == 0, 2**70 ==
// float(2**70), tuples compare item by item, a frozenset equals another
// with the same items, and an [*Object] or [*NPDType] equals only itself.
// NaN never equals anything. The zero value is an empty plain dict.
type Dict struct {
	// Class is nil for a plain dict, else the dict's class, e.g.
	// collections.OrderedDict, collections.Counter, collections.defaultdict.
	Class *Global
	// State is the argument of a BUILD applied to the dict, e.g. the
	// {'_metadata': ...} attribute dict of a torch state_dict OrderedDict;
	// nil if none.
	State Value
	// Default is a defaultdict's default_factory (usually a Global such as
	// builtins.list, or None); nil for other dicts.
	Default Value
	// Claim is where an Options.SetItem hook may keep, in its own form, the items it
	// took from the dict; the decoder never reads it. Held by the dict, they are
	// collected with it once nothing refers to the dict (a table the consumer kept by
	// dict would hold the items of every hooked dict, even those it never reads, to the
	// end of the decode).
	Claim any

	keys, vals []Value
	index      keyIndex
	// taken counts the items an Options.SetItem hook took instead of the dict: they count
	// toward MaxContainerItems as the dict's own do.
	taken int
}

// Len returns the number of entries.
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in insertion order. The slice is the dict's own
// storage: do not modify it; it stays valid until the next Set.
func (d *Dict) Keys() []Value { return slices.Clip(d.keys) }

// Items returns keys and values in insertion order, as parallel slices. They
// are the dict's own storage: do not modify them; they stay valid until the
// next Set.
func (d *Dict) Items() (keys, values []Value) {
	return slices.Clip(d.keys), slices.Clip(d.vals)
}

// All iterates over the entries in insertion order.
func (d *Dict) All() iter.Seq2[Value, Value] {
	return func(yield func(Value, Value) bool) {
		for i, k := range d.keys {
			if !yield(k, d.vals[i]) {
				return
			}
		}
	}
}

// Get returns the value stored under a key equal (in Python's sense) to key.
// It reports false for absent and unhashable keys.
func (d *Dict) Get(key Value) (Value, bool) {
	r, err := d.index.lookup(key, maxKeyBytes, d.keys)
	if err != nil || r.pos < 0 {
		return nil, false
	}
	return d.vals[r.pos], true
}

// Set stores val under key. As in Python, replacing an existing key keeps
// its original position and its original key object. Set panics if key is
// unhashable (a list, dict, set, numpy array...); use TrySet to get an error
// instead.
func (d *Dict) Set(key, val Value) {
	if _, _, err := d.put(key, val, maxKeyBytes); err != nil {
		panic(err)
	}
}

// TrySet is Set returning an error for unhashable keys.
func (d *Dict) TrySet(key, val Value) error {
	_, _, err := d.put(key, val, maxKeyBytes)
	return err
}

// put stores val under key and reports whether a new entry was added and
// how many bytes the key's canonical encoding took (at most budget).
func (d *Dict) put(key, val Value, budget int64) (added bool, cost int, err error) {
	r, err := d.index.lookup(key, budget, d.keys)
	if err != nil {
		return false, 0, err
	}
	if r.pos >= 0 {
		d.vals[r.pos] = val
		return false, len(r.enc), nil
	}
	d.index.add(r, len(d.keys), d.keys)
	d.keys = append(d.keys, key)
	d.vals = append(d.vals, val)
	return true, len(r.enc), nil
}

// add inserts item unless an equal item is present, reporting whether it was
// added and the size of the item's canonical encoding (at most budget).
func (s *Set) add(item Value, budget int64) (added bool, cost int, err error) {
	if err := s.sync(); err != nil {
		return false, 0, err
	}
	r, err := s.index.lookup(item, budget, s.Items[:s.indexed])
	if err != nil {
		return false, 0, err
	}
	if r.pos >= 0 {
		return false, len(r.enc), nil
	}
	s.index.add(r, len(s.Items), s.Items)
	s.Items = append(s.Items, item)
	s.indexed++
	return true, len(r.enc), nil
}

// sync indexes items appended to Items by a caller (a Set built by hand).
func (s *Set) sync() error {
	for ; s.indexed < len(s.Items); s.indexed++ {
		r, err := s.index.lookup(s.Items[s.indexed], maxKeyBytes, s.Items[:s.indexed])
		if err != nil {
			return err
		}
		if r.pos < 0 {
			s.index.add(r, s.indexed, s.Items)
		}
	}
	return nil
}

// Contains reports whether the set holds an item equal (in Python's sense,
// see [Dict.Get]) to v. Items appended to a Set by hand are taken into
// account; items replaced in place are not.
func (s *Set) Contains(v Value) bool {
	if s.sync() != nil {
		return false
	}
	r, err := s.index.lookup(v, maxKeyBytes, s.Items[:s.indexed])
	return err == nil && r.pos >= 0
}

// maxKeyDepth caps the nesting of tuples and frozensets inside a dict key or
// set item. CPython hashes such keys recursively too.
const maxKeyDepth = 100

// maxKeyBytes caps the canonical encoding of one key outside the decoder
// (which uses its remaining allocation budget instead). Tuples sharing
// items through the memo can describe keys exponentially larger than the
// pickle.
const maxKeyBytes = 1 << 30

// keyIndex maps canonical key encodings to positions.
type keyIndex struct {
	strs  map[string]int // plain str keys (the common case), unencoded; nil while few
	nstr  int            // str keys added while strs is nil
	other map[string]int // every other hashable key, by canonical encoding
	ids   map[any]uint64 // identity-hashed values → their id in encodings
}

// keyRef is the result of a lookup: where the key is (-1 if absent) and how
// to insert it.
type keyRef struct {
	pos    int
	isStr  bool
	str    string
	enc    string
	unique bool // equals nothing (contains NaN): never indexed
}

// smallIndex is how many str keys are looked up by scanning before the index builds its
// map: most dicts of a checkpoint pickle are small (dataclass and module states), and a
// map for each would cost several times the dict.
const smallIndex = 8

// lookup finds key among items, the keys (or set items) in position order.
func (ix *keyIndex) lookup(key Value, budget int64, items []Value) (keyRef, error) {
	if s, ok := key.(string); ok {
		if ix.strs == nil {
			// str equals only str: the other keys need not be looked at.
			for i, k := range items {
				if ks, isStr := k.(string); isStr && ks == s {
					return keyRef{pos: i, isStr: true, str: s}, nil
				}
			}
			return keyRef{pos: -1, isStr: true, str: s}, nil
		}
		if p, found := ix.strs[s]; found {
			return keyRef{pos: p, isStr: true, str: s}, nil
		}
		return keyRef{pos: -1, isStr: true, str: s}, nil
	}
	enc := keyEncoder{ix: ix, budget: budget, max: budget}
	buf, unique, err := enc.encode(nil, key, 0)
	if err != nil {
		return keyRef{}, err
	}
	r := keyRef{pos: -1, enc: string(buf), unique: unique}
	if !unique {
		if p, found := ix.other[r.enc]; found {
			r.pos = p
		}
	}
	return r, nil
}

// add records the key of r at pos; items are the keys before it, in position order.
func (ix *keyIndex) add(r keyRef, pos int, items []Value) {
	switch {
	case r.isStr:
		if ix.strs == nil {
			ix.nstr++
			if ix.nstr <= smallIndex {
				return // found by scanning items
			}
			ix.strs = make(map[string]int, ix.nstr)
			for i, k := range items[:pos] {
				if ks, isStr := k.(string); isStr {
					if _, dup := ix.strs[ks]; !dup {
						ix.strs[ks] = i
					}
				}
			}
		}
		ix.strs[r.str] = pos
	case !r.unique:
		if ix.other == nil {
			ix.other = make(map[string]int)
		}
		ix.other[r.enc] = pos
	}
}

// identity returns the id used in encodings of an identity-hashed value.
func (ix *keyIndex) identity(p any) uint64 {
	if id, ok := ix.ids[p]; ok {
		return id
	}
	if ix.ids == nil {
		ix.ids = make(map[any]uint64)
	}
	id := uint64(len(ix.ids))
	ix.ids[p] = id
	return id
}

// keyEncoder builds canonical key encodings within a byte budget.
type keyEncoder struct {
	ix     *keyIndex
	budget int64 // bytes of encoding still allowed
	max    int64 // the initial budget, for errors
}

// spend accounts n more bytes of encoding.
func (e *keyEncoder) spend(n int) error {
	e.budget -= int64(n)
	if e.budget < 0 {
		return &LimitError{Limit: "MaxAlloc", What: fmt.Sprintf("dict key encoding of more than %d bytes", e.max), Max: e.max}
	}
	return nil
}

// encode appends the canonical, prefix-free encoding of key to buf. Equal
// keys (in Python's sense) get equal encodings. unique reports a key that
// contains NaN and so equals nothing.
func (e *keyEncoder) encode(buf []byte, key Value, depth int) (out []byte, unique bool, err error) {
	if err := e.spend(16); err != nil {
		return nil, false, err
	}
	switch k := key.(type) {
	case None:
		return append(buf, 'N'), false, nil
	case bool:
		if k {
			return encInt(buf, 1), false, nil
		}
		return encInt(buf, 0), false, nil
	case int64:
		return encInt(buf, k), false, nil
	case *big.Int:
		return encBig(buf, k), false, nil
	case float64:
		return encFloat(buf, k)
	case complex128:
		re, im := real(k), imag(k)
		if math.IsNaN(re) || math.IsNaN(im) {
			return buf, true, nil
		}
		if im == 0 {
			return encFloat(buf, re)
		}
		buf = append(buf, 'c')
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(re+0))
		return binary.LittleEndian.AppendUint64(buf, math.Float64bits(im)), false, nil
	case string:
		if err := e.spend(len(k)); err != nil {
			return nil, false, err
		}
		buf = append(buf, 's')
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		return append(buf, k...), false, nil
	case []byte:
		if err := e.spend(len(k)); err != nil {
			return nil, false, err
		}
		buf = append(buf, 'b')
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		return append(buf, k...), false, nil
	case Global:
		buf = append(buf, 'g')
		buf = binary.AppendUvarint(buf, uint64(len(k.Module)))
		buf = append(buf, k.Module...)
		buf = binary.AppendUvarint(buf, uint64(len(k.Name)))
		return append(buf, k.Name...), false, nil
	case Opaque:
		return buf, true, nil // a distinct object nothing else refers to
	case *Object, *NPDType:
		buf = append(buf, 'o')
		return binary.AppendUvarint(buf, e.ix.identity(k)), false, nil
	case Tuple:
		if depth >= maxKeyDepth {
			return nil, false, fmt.Errorf("dict key nested deeper than %d", maxKeyDepth)
		}
		buf = append(buf, 't')
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		anyUnique := false
		for _, item := range k {
			var u bool
			if buf, u, err = e.encode(buf, item, depth+1); err != nil {
				return nil, false, err
			}
			anyUnique = anyUnique || u
		}
		return buf, anyUnique, nil
	case *Set:
		if !k.Frozen {
			return nil, false, fmt.Errorf("unhashable type: 'set'")
		}
		if depth >= maxKeyDepth {
			return nil, false, fmt.Errorf("dict key nested deeper than %d", maxKeyDepth)
		}
		// A frozenset equals any frozenset with the same items: encode the
		// items independently of their order.
		parts := make([]string, 0, len(k.Items))
		for _, item := range k.Items {
			b, u, err := e.encode(nil, item, depth+1)
			if err != nil {
				return nil, false, err
			}
			if u {
				return buf, true, nil
			}
			parts = append(parts, string(b))
		}
		slices.Sort(parts)
		buf = append(buf, 'F')
		buf = binary.AppendUvarint(buf, uint64(len(parts)))
		for _, p := range parts {
			buf = append(buf, p...)
		}
		return buf, false, nil
	}
	switch key.(type) {
	case *List, *Dict, *NDArray:
		return nil, false, fmt.Errorf("unhashable type: '%s'", typeName(key))
	}
	if t := reflect.TypeOf(key); t != nil && t.Kind() == reflect.Pointer {
		// A value a hook returned in place of an object (Options.Reduce, Build,
		// PersistentLoad) is a key by identity, as the object would be.
		buf = append(buf, 'o')
		return binary.AppendUvarint(buf, e.ix.identity(key)), false, nil
	}
	return nil, false, fmt.Errorf("unhashable type: '%s'", typeName(key))
}

func encInt(buf []byte, v int64) []byte {
	buf = append(buf, 'i')
	return binary.LittleEndian.AppendUint64(buf, uint64(v))
}

func encBig(buf []byte, v *big.Int) []byte {
	if v.IsInt64() {
		return encInt(buf, v.Int64())
	}
	mag := v.Bytes()
	buf = append(buf, 'I', byte(v.Sign()+1))
	buf = binary.AppendUvarint(buf, uint64(len(mag)))
	return append(buf, mag...)
}

// encFloat encodes integral floats as the equal int, as Python's hash does.
func encFloat(buf []byte, f float64) ([]byte, bool, error) {
	switch {
	case math.IsNaN(f):
		return buf, true, nil
	case math.IsInf(f, 0) || f != math.Trunc(f):
		buf = append(buf, 'f')
		return binary.LittleEndian.AppendUint64(buf, math.Float64bits(f)), false, nil
	case f >= -(1<<63) && f < 1<<63:
		return encInt(buf, int64(f)), false, nil
	}
	i, _ := big.NewFloat(f).Int(nil)
	return encBig(buf, i), false, nil
}
