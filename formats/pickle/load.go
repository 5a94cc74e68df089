package pickle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// step executes one opcode (other than STOP) whose byte has been consumed.
func (d *Decoder) step(op byte) error {
	switch op {
	case opMark:
		return d.pushMark()
	case opPop:
		// As in CPython, POP with a MARK on top of the stack discards the MARK.
		if n := len(d.marks); n > 0 && d.marks[n-1] == len(d.stack) {
			d.marks = d.marks[:n-1]
			return nil
		}
		_, err := d.pop()
		return err
	case opPopMark:
		_, err := d.popMark()
		return err
	case opDup:
		v, err := d.top()
		if err != nil {
			return err
		}
		d.pending = d.depths[len(d.depths)-1]
		d.share(v)
		return d.push(v)

	case opNone:
		return d.push(None{})
	case opNewTrue:
		return d.push(true)
	case opNewFalse:
		return d.push(false)
	case opInt:
		return d.loadTextInt(false)
	case opLong:
		return d.loadTextInt(true)
	case opBinInt:
		v, err := d.r.u4()
		if err != nil {
			return err
		}
		return d.push(int64(int32(v)))
	case opBinInt1:
		v, err := d.r.u1()
		if err != nil {
			return err
		}
		return d.push(int64(v))
	case opBinInt2:
		v, err := d.r.u2()
		if err != nil {
			return err
		}
		return d.push(int64(v))
	case opLong1, opLong4:
		return d.loadBinLong(op)
	case opFloat:
		line, err := d.r.line(d.lim.MaxStringLen)
		if err != nil {
			return err
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(string(line)), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return fmt.Errorf("invalid float literal %q", truncateForError(string(line)))
		}
		return d.push(f)
	case opBinFloat:
		b, err := d.r.take(8, "BINFLOAT")
		if err != nil {
			return err
		}
		return d.push(math.Float64frombits(binary.BigEndian.Uint64(b)))

	case opString:
		return d.loadString()
	case opBinString, opShortBinString:
		b, err := d.counted(op, d.lim.MaxStringLen, "MaxStringLen", "string")
		if err != nil {
			return err
		}
		// A latin-1 fallback may double the size.
		if err := d.charge(int64(len(b)), "string"); err != nil {
			return err
		}
		return d.push(d.py2Str(b))
	case opUnicode:
		line, err := d.r.line(d.lim.MaxStringLen)
		if err != nil {
			return err
		}
		// Decoding at most doubles the size (latin-1 bytes ≥ 0x80).
		if err := d.charge(2*int64(len(line)), "string"); err != nil {
			return err
		}
		s, err := rawUnicodeEscapeDecode(line)
		if err != nil {
			return err
		}
		return d.push(s)
	case opBinUnicode, opShortBinUnicode, opBinUnicode8:
		b, err := d.counted(op, d.lim.MaxStringLen, "MaxStringLen", "string")
		if err != nil {
			return err
		}
		s, err := decodeUTF8(b)
		if err != nil {
			return err
		}
		return d.push(s)
	case opBinBytes, opShortBinBytes, opBinBytes8, opByteArray8:
		b, err := d.counted(op, d.lim.MaxBytesLen, "MaxBytesLen", "bytes")
		if err != nil {
			return err
		}
		return d.push(append([]byte{}, b...))

	case opEmptyTuple:
		return d.push(Tuple{})
	case opTuple:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		return d.pushTuple(items)
	case opTuple1, opTuple2, opTuple3:
		items, err := d.popN(int(op-opTuple1) + 1)
		if err != nil {
			return err
		}
		return d.pushTuple(items)
	case opEmptyList:
		return d.pushNew(&List{}, "list")
	case opList:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		l := &List{}
		if err := d.appendTo(l, items); err != nil {
			return err
		}
		return d.pushNew(l, "list")
	case opAppend:
		items, err := d.popN(1)
		if err != nil {
			return err
		}
		return d.appendTop(items)
	case opAppends:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		return d.appendTop(items)
	case opEmptyDict:
		return d.pushNew(&Dict{}, "dict")
	case opDict:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		dict := &Dict{}
		if err := d.setItems(dict, items); err != nil {
			return err
		}
		return d.pushNew(dict, "dict")
	case opSetItem:
		kv, err := d.popN(2)
		if err != nil {
			return err
		}
		return d.setItemsTop(kv)
	case opSetItems:
		kv, err := d.popMark()
		if err != nil {
			return err
		}
		return d.setItemsTop(kv)
	case opEmptySet:
		return d.pushNew(&Set{}, "set")
	case opAddItems:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		t, err := d.top()
		if err != nil {
			return err
		}
		s, ok := t.(*Set)
		if !ok || s.Frozen {
			return fmt.Errorf("ADDITEMS on %s, not a set", typeName(t))
		}
		return d.addToSet(s, items)
	case opFrozenSet:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		s := &Set{Frozen: true}
		if err := d.addToSet(s, items); err != nil {
			return err
		}
		return d.pushNew(s, "set")

	case opGet, opBinGet, opLongBinGet:
		i, err := d.memoIndex(op)
		if err != nil {
			return err
		}
		v, depth, ok := d.memoGet(i)
		if !ok {
			return fmt.Errorf("memo value not found at index %d", i)
		}
		d.pending = depth
		return d.push(v)
	case opPut, opBinPut, opLongBinPut:
		i, err := d.memoIndex(op)
		if err != nil {
			return err
		}
		v, err := d.top()
		if err != nil {
			return err
		}
		return d.memoPut(i, v, d.depths[len(d.depths)-1])
	case opMemoize:
		v, err := d.top()
		if err != nil {
			return err
		}
		return d.memoPut(uint64(d.memoLen()), v, d.depths[len(d.depths)-1])

	case opProto:
		p, err := d.r.u1()
		if err != nil {
			return err
		}
		if p > highestProtocol {
			return fmt.Errorf("unsupported pickle protocol: %d", p)
		}
		d.proto = int(p)
		return nil
	case opFrame:
		n, err := d.r.u8()
		if err != nil {
			return err
		}
		if n > uint64(d.r.remaining()) {
			return truncated("frame", n, d.r.remaining())
		}
		return nil

	case opPersID:
		line, err := d.r.line(d.lim.MaxStringLen)
		if err != nil {
			return err
		}
		for _, c := range line {
			if c >= 0x80 {
				return errors.New("persistent IDs in protocol 0 must be ASCII strings")
			}
		}
		if err := d.charge(int64(len(line)), "persistent id"); err != nil {
			return err
		}
		return d.persistent(string(line))
	case opBinPersID:
		pid, err := d.pop()
		if err != nil {
			return err
		}
		return d.persistent(pid)

	case opGlobal:
		g, err := d.readGlobalLines()
		if err != nil {
			return err
		}
		return d.pushGlobal(g, op)
	case opStackGlobal:
		mn, err := d.popN(2)
		if err != nil {
			return err
		}
		module, ok1 := mn[0].(string)
		name, ok2 := mn[1].(string)
		if !ok1 || !ok2 {
			return fmt.Errorf("STACK_GLOBAL requires str, got %s and %s", typeName(mn[0]), typeName(mn[1]))
		}
		g := Global{module, name}
		if d.proto < 3 {
			g = mapGlobal(g)
		}
		return d.pushGlobal(g, op)
	case opInst:
		g, err := d.readGlobalLines()
		if err != nil {
			return err
		}
		if d.opts.Strict && !d.allowed(g) {
			return &DisallowedError{Opcode: opName(op), Global: g}
		}
		items, err := d.popMark()
		if err != nil {
			return err
		}
		return d.pushCall(g, items, Inst)
	case opObj:
		items, err := d.popMark()
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return errUnderflow
		}
		g, ok := items[0].(Global)
		if !ok {
			return fmt.Errorf("OBJ class is %s, not a global", typeName(items[0]))
		}
		return d.pushCall(g, items[1:], Inst)
	case opReduce:
		return d.loadReduce()
	case opNewObj:
		return d.loadNewObj()
	case opNewObjEx:
		return d.loadNewObjEx()
	case opBuild:
		return d.loadBuild()

	case opExt1, opExt2, opExt4:
		return errors.New("extension codes (copyreg extension registry) are not supported")
	case opNextBuffer, opReadOnlyBuffer:
		return errors.New("out-of-band buffers are not supported")
	}
	return errUnknownOpcode(op)
}

// counted reads the length-prefixed payload of op, enforcing a per-value
// limit before the bytes are looked at, and charges it.
func (d *Decoder) counted(op byte, max int64, limit, what string) ([]byte, error) {
	n, err := d.r.countPrefix(opTable[op].arg)
	if err != nil {
		return nil, err
	}
	if n > uint64(max) {
		return nil, &LimitError{Limit: limit, What: fmt.Sprintf("%s of %d bytes", what, n), Max: max}
	}
	if n > uint64(d.r.remaining()) {
		return nil, truncated(what, n, d.r.remaining())
	}
	if err := d.charge(int64(n), what); err != nil {
		return nil, err
	}
	return d.r.take(n, what)
}

// py2Str decodes a Python 2 str (see decodePy2Str) and remembers latin-1
// fallbacks for numpy raw data.
func (d *Decoder) py2Str(b []byte) string {
	s, latin1 := decodePy2Str(b)
	if latin1 {
		if d.latin1 == nil {
			d.latin1 = make(map[string]struct{})
		}
		d.latin1[s] = struct{}{}
	}
	return s
}

// loadString decodes the quoted, escaped argument of STRING.
func (d *Decoder) loadString() error {
	line, err := d.r.line(d.lim.MaxStringLen)
	if err != nil {
		return err
	}
	if len(line) < 2 || line[0] != line[len(line)-1] || (line[0] != '\'' && line[0] != '"') {
		return errors.New("the STRING opcode argument must be quoted")
	}
	if err := d.charge(2*int64(len(line)), "string"); err != nil {
		return err
	}
	b, err := escapeDecode(line[1 : len(line)-1])
	if err != nil {
		return err
	}
	return d.push(d.py2Str(b))
}

// loadTextInt decodes INT (with the protocol-0 booleans "00" and "01") and LONG.
func (d *Decoder) loadTextInt(long bool) error {
	line, err := d.r.line(d.lim.MaxStringLen)
	if err != nil {
		return err
	}
	if !long {
		switch string(line) {
		case "00":
			return d.push(false)
		case "01":
			return d.push(true)
		}
	} else if n := len(line); n > 0 && line[n-1] == 'L' {
		line = line[:n-1]
	}
	if maxDigits := int64(d.lim.MaxLongBytes)*5/2 + 2; int64(len(line)) > maxDigits {
		return &LimitError{Limit: "MaxLongBytes", What: fmt.Sprintf("integer literal of %d digits", len(line)), Max: int64(d.lim.MaxLongBytes)}
	}
	v, err := parseDecimal(string(line))
	if err != nil {
		return err
	}
	if err := d.charge(int64(len(line)), "integer"); err != nil {
		return err
	}
	return d.push(v)
}

// loadBinLong decodes LONG1 and LONG4: little-endian two's complement.
func (d *Decoder) loadBinLong(op byte) error {
	n, err := d.r.countPrefix(opTable[op].arg)
	if err != nil {
		return err
	}
	if n > uint64(d.lim.MaxLongBytes) {
		return &LimitError{Limit: "MaxLongBytes", What: fmt.Sprintf("integer of %d bytes", n), Max: int64(d.lim.MaxLongBytes)}
	}
	b, err := d.r.take(n, "integer")
	if err != nil {
		return err
	}
	if err := d.charge(int64(n), "integer"); err != nil {
		return err
	}
	return d.push(decodeLong(b))
}

// decodeLong decodes little-endian two's complement bytes as int64 when the
// value fits, else as *big.Int.
func decodeLong(b []byte) Value {
	n := len(b)
	if n == 0 {
		return int64(0)
	}
	if n <= 8 {
		var u uint64
		for i := n - 1; i >= 0; i-- {
			u = u<<8 | uint64(b[i])
		}
		shift := uint(64 - 8*n)
		return int64(u<<shift) >> shift
	}
	be := make([]byte, n)
	for i, c := range b {
		be[n-1-i] = c
	}
	v := new(big.Int).SetBytes(be)
	if b[n-1]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	if v.IsInt64() {
		return v.Int64()
	}
	return v
}

// memoIndex reads the memo index argument of GET/PUT and their binary forms.
func (d *Decoder) memoIndex(op byte) (uint64, error) {
	switch op {
	case opBinGet, opBinPut:
		i, err := d.r.u1()
		return uint64(i), err
	case opLongBinGet, opLongBinPut:
		i, err := d.r.u4()
		return uint64(i), err
	}
	line, err := d.r.line(d.lim.MaxStringLen)
	if err != nil {
		return 0, err
	}
	i, err := strconv.ParseInt(strings.TrimSpace(string(line)), 10, 64)
	if err != nil || i < 0 {
		return 0, fmt.Errorf("invalid memo index %q", truncateForError(string(line)))
	}
	return uint64(i), nil
}

// readGlobalLines reads the "module\nname\n" argument of GLOBAL and INST and
// applies the Python 2→3 renaming (always, as torch's weights_only
// unpickler does for these text forms).
func (d *Decoder) readGlobalLines() (Global, error) {
	module, err := d.r.line(d.lim.MaxStringLen)
	if err != nil {
		return Global{}, err
	}
	name, err := d.r.line(d.lim.MaxStringLen)
	if err != nil {
		return Global{}, err
	}
	if !utf8.Valid(module) || !utf8.Valid(name) {
		return Global{}, errors.New("global name is not valid UTF-8")
	}
	if err := d.charge(int64(len(module)+len(name)), "global name"); err != nil {
		return Global{}, err
	}
	return mapGlobal(Global{string(module), string(name)}), nil
}

func (d *Decoder) pushGlobal(g Global, op byte) error {
	if d.opts.Strict && !d.allowed(g) {
		return &DisallowedError{Opcode: opName(op), Global: g}
	}
	return d.push(g)
}

func (d *Decoder) persistent(pid Value) error {
	if d.opts.PersistentLoad == nil {
		return errors.New("persistent id found but Options.PersistentLoad is nil")
	}
	v, err := d.opts.PersistentLoad(pid)
	if err != nil {
		return fmt.Errorf("persistent_load: %w", err)
	}
	return d.push(v)
}

// pushNew charges a new container or object and pushes it.
func (d *Decoder) pushNew(v Value, what string) error {
	if err := d.charge(objectCost, what); err != nil {
		return err
	}
	return d.push(v)
}

// pushTuple copies items (which may alias the stack) into a new tuple.
func (d *Decoder) pushTuple(items []Value) error {
	if len(items) == 0 {
		return d.push(Tuple{})
	}
	if err := d.chargeItems(len(items), len(items), "tuple"); err != nil {
		return err
	}
	if err := d.build(items); err != nil {
		return err
	}
	return d.push(append(Tuple(nil), items...))
}

// copyItems copies items (which may alias the stack) into a new tuple.
func (d *Decoder) copyItems(items []Value) (Tuple, error) {
	if err := d.chargeItems(len(items), len(items), "tuple"); err != nil {
		return nil, err
	}
	return append(Tuple{}, items...), nil
}

func (d *Decoder) appendTop(items []Value) error {
	t, err := d.top()
	if err != nil {
		return err
	}
	return d.appendTo(t, items)
}

// appendTo implements APPEND(S): onto a list, or onto an object (a list
// subclass instance).
func (d *Decoder) appendTo(target Value, items []Value) error {
	if err := d.build(items); err != nil {
		return err
	}
	switch t := target.(type) {
	case *List:
		if err := d.chargeItems(len(t.Items)+len(items), len(items), "list"); err != nil {
			return err
		}
		t.Items = append(t.Items, items...)
		return nil
	case *Object:
		if err := d.chargeItems(len(t.ListItems)+len(items), len(items), "list"); err != nil {
			return err
		}
		t.ListItems = append(t.ListItems, items...)
		return nil
	}
	return fmt.Errorf("cannot append to %s", typeName(target))
}

func (d *Decoder) setItemsTop(kv []Value) error {
	t, err := d.top()
	if err != nil {
		return err
	}
	switch t := t.(type) {
	case *Dict:
		return d.setItems(t, kv)
	case *Object:
		if t.DictItems == nil {
			if err := d.charge(objectCost, "dict"); err != nil {
				return err
			}
			t.DictItems = &Dict{}
		}
		return d.setItems(t.DictItems, kv)
	}
	return fmt.Errorf("cannot set items on %s", typeName(t))
}

// setItems stores alternating keys and values into dict.
func (d *Decoder) setItems(dict *Dict, kv []Value) error {
	if len(kv)%2 != 0 {
		return fmt.Errorf("odd number of items (%d) for a dict", len(kv))
	}
	if err := d.build(kv); err != nil {
		return err
	}
	for i := 0; i < len(kv); i += 2 {
		if err := d.dictPut(dict, kv[i], kv[i+1]); err != nil {
			return err
		}
	}
	return nil
}

func (d *Decoder) dictPut(dict *Dict, k, v Value) error {
	// A dict holds what it was given back by the hook or what the hook took, not both:
	// the hook takes from a dict's first item or never, and gives back all it took.
	if err := d.chargeItems(max(dict.Len(), dict.taken)+1, 2, "dict"); err != nil {
		return err
	}
	if d.opts.SetItem != nil {
		took, err := d.opts.SetItem(dict, k, v)
		if err != nil {
			return err
		}
		if took {
			dict.taken++
			return d.charge(takenCost, "dict item")
		}
	}
	_, cost, err := dict.put(k, v, d.lim.MaxAlloc-d.alloc)
	if err != nil {
		return err
	}
	return d.charge(int64(cost), "dict key")
}

func (d *Decoder) addToSet(s *Set, items []Value) error {
	if err := d.build(items); err != nil {
		return err
	}
	for _, it := range items {
		if err := d.chargeItems(len(s.Items)+1, 1, "set"); err != nil {
			return err
		}
		_, cost, err := s.add(it, d.lim.MaxAlloc-d.alloc)
		if err != nil {
			return err
		}
		if err := d.charge(int64(cost), "set item"); err != nil {
			return err
		}
	}
	return nil
}
