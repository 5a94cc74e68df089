package pickle

import (
	"encoding/binary"
	"io"
	"math"
	"math/big"
)

// Encoder writes protocol-2 pickles using only the opcodes torch's weights_only unpickler
// accepts (PROTO 2, GLOBAL, REDUCE, BUILD, BINPERSID, BININT*, LONG1, BINFLOAT, BINUNICODE,
// NONE, NEWTRUE/NEWFALSE, the tuple/list/dict opcodes, MARK, BINPUT/BINGET), so that what ckpt
// writes loads with torch.load(weights_only=True). Callers emit values opcode by opcode;
// memoisation is explicit (Put/Get), which is how shared tensors stay shared; globals are
// memoised by the encoder itself, as Python's pickler does, so a global repeated for every
// tensor or metadata entry costs two bytes after its first use.
type Encoder struct {
	buf     []byte
	memo    uint32
	globals map[Global]uint32
}

// NewEncoder starts a protocol-2 pickle.
func NewEncoder() *Encoder { return &Encoder{buf: []byte{0x80, 2}} }

// Reset starts a new protocol-2 pickle in the encoder's buffer and memo, so that a caller
// writing many small pickles allocates them once. What Finish returned is overwritten.
func (e *Encoder) Reset() {
	e.buf = append(e.buf[:0], 0x80, 2)
	e.memo = 0
	clear(e.globals)
}

// Len is the number of encoded bytes not yet flushed.
func (e *Encoder) Len() int { return len(e.buf) }

// Flush writes what has been encoded so far to w and empties the buffer; the memo carries
// on, so a long pickle streams out in bounded memory.
func (e *Encoder) Flush(w io.Writer) error {
	_, err := w.Write(e.buf)
	e.buf = e.buf[:0]
	return err
}

// Finish ends the pickle with STOP and returns it.
func (e *Encoder) Finish() []byte { return append(e.buf, '.') }

// Op appends a raw opcode without argument (MARK, TUPLE, REDUCE, BUILD, APPENDS, SETITEMS, ...).
func (e *Encoder) Op(op byte) { e.buf = append(e.buf, op) }

// Opcodes used with Op.
const (
	OpMark       = '('
	OpTuple      = 't'
	OpTuple1     = 0x85
	OpTuple2     = 0x86
	OpTuple3     = 0x87
	OpEmptyTuple = ')'
	OpEmptyList  = ']'
	OpEmptyDict  = '}'
	OpAppend     = 'a'
	OpAppends    = 'e'
	OpSetItem    = 's'
	OpSetItems   = 'u'
	OpReduce     = 'R'
	OpBuild      = 'b'
	OpBinPersID  = 'Q'
	// OpNewObj and OpNewObjEx re-create objects a source pickle made with cls.__new__; torch's
	// weights_only unpickler accepts NEWOBJ for its allowlisted classes only, and Python's
	// unpickler takes NEWOBJ_EX (a protocol-4 opcode) whatever protocol the pickle declares.
	OpNewObj   = 0x81
	OpNewObjEx = 0x92
)

// None appends None.
func (e *Encoder) None() { e.buf = append(e.buf, 'N') }

// Bool appends True or False.
func (e *Encoder) Bool(b bool) {
	if b {
		e.buf = append(e.buf, 0x88)
	} else {
		e.buf = append(e.buf, 0x89)
	}
}

// Int appends an int with the shortest opcode, as Python's pickler does.
func (e *Encoder) Int(v int64) {
	switch {
	case v >= 0 && v <= 0xff:
		e.buf = append(e.buf, 'K', byte(v))
	case v >= 0 && v <= 0xffff:
		e.buf = append(e.buf, 'M', byte(v), byte(v>>8))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		e.buf = append(e.buf, 'J')
		e.buf = binary.LittleEndian.AppendUint32(e.buf, uint32(int32(v)))
	default:
		e.BigInt(big.NewInt(v))
	}
}

// BigInt appends an arbitrary int with LONG1 (two's complement, little-endian, minimal).
func (e *Encoder) BigInt(v *big.Int) {
	if v.IsInt64() && v.Int64() >= math.MinInt32 && v.Int64() <= math.MaxInt32 {
		e.Int(v.Int64())
		return
	}
	// Minimal two's complement length.
	n := (v.BitLen() + 8) / 8
	b := make([]byte, n)
	if v.Sign() >= 0 {
		v.FillBytes(b)
	} else {
		m := new(big.Int).Lsh(big.NewInt(1), uint(8*n))
		m.Add(m, v)
		m.FillBytes(b)
	}
	// big-endian → little-endian
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	// Drop redundant sign bytes as Python's encode_long does.
	for len(b) > 1 {
		last, prev := b[len(b)-1], b[len(b)-2]
		if (last == 0 && prev&0x80 == 0) || (last == 0xff && prev&0x80 != 0) {
			b = b[:len(b)-1]
			continue
		}
		break
	}
	e.buf = append(e.buf, 0x8a, byte(len(b)))
	e.buf = append(e.buf, b...)
}

// Float appends a float (BINFLOAT, big-endian IEEE 754).
func (e *Encoder) Float(f float64) {
	e.buf = append(e.buf, 'G')
	e.buf = binary.BigEndian.AppendUint64(e.buf, math.Float64bits(f))
}

// String appends a str (BINUNICODE, UTF-8).
func (e *Encoder) String(s string) {
	e.buf = append(e.buf, 'X')
	e.buf = binary.LittleEndian.AppendUint32(e.buf, uint32(len(s)))
	e.buf = append(e.buf, s...)
}

// Global pushes the global module.name: GLOBAL and BINPUT the first time, BINGET after.
// Protocol 2 spells builtins as __builtin__ (Python's fix_imports), which every unpickler
// maps back.
func (e *Encoder) Global(g Global) {
	if i, ok := e.globals[g]; ok {
		e.Get(i)
		return
	}
	mod := g.Module
	switch mod {
	case "builtins":
		mod = "__builtin__"
	case "copyreg":
		mod = "copy_reg"
	}
	e.buf = append(e.buf, 'c')
	e.buf = append(e.buf, mod...)
	e.buf = append(e.buf, '\n')
	e.buf = append(e.buf, g.Name...)
	e.buf = append(e.buf, '\n')
	if e.globals == nil {
		e.globals = map[Global]uint32{}
	}
	e.globals[g] = e.Put()
}

// Put memoises the value on top of the stack and returns its memo index.
func (e *Encoder) Put() uint32 {
	i := e.memo
	e.memo++
	if i < 256 {
		e.buf = append(e.buf, 'q', byte(i))
	} else {
		e.buf = append(e.buf, 'r')
		e.buf = binary.LittleEndian.AppendUint32(e.buf, i)
	}
	return i
}

// Get pushes a memoised value.
func (e *Encoder) Get(i uint32) {
	if i < 256 {
		e.buf = append(e.buf, 'h', byte(i))
	} else {
		e.buf = append(e.buf, 'j')
		e.buf = binary.LittleEndian.AppendUint32(e.buf, i)
	}
}

// PyBytes appends a Python bytes object the protocol-2 way: _codecs.encode(latin-1 str,
// "latin1"), which torch's weights_only unpickler allows.
func (e *Encoder) PyBytes(b []byte) {
	e.Global(Global{"_codecs", "encode"})
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	e.String(string(r))
	e.String("latin1")
	e.Op(OpTuple2)
	e.Op(OpReduce)
}
