package pickle

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// Opcodes of pickle protocols 0–5, named as in CPython's pickletools.
const (
	opMark           = '('
	opStop           = '.'
	opPop            = '0'
	opPopMark        = '1'
	opDup            = '2'
	opFloat          = 'F'
	opInt            = 'I'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opLong           = 'L'
	opBinInt2        = 'M'
	opNone           = 'N'
	opPersID         = 'P'
	opBinPersID      = 'Q'
	opReduce         = 'R'
	opString         = 'S'
	opBinString      = 'T'
	opShortBinString = 'U'
	opUnicode        = 'V'
	opBinUnicode     = 'X'
	opAppend         = 'a'
	opBuild          = 'b'
	opGlobal         = 'c'
	opDict           = 'd'
	opEmptyDict      = '}'
	opAppends        = 'e'
	opGet            = 'g'
	opBinGet         = 'h'
	opInst           = 'i'
	opLongBinGet     = 'j'
	opList           = 'l'
	opEmptyList      = ']'
	opObj            = 'o'
	opPut            = 'p'
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opSetItem        = 's'
	opTuple          = 't'
	opEmptyTuple     = ')'
	opSetItems       = 'u'
	opBinFloat       = 'G'

	// Protocol 2.
	opProto    = 0x80
	opNewObj   = 0x81
	opExt1     = 0x82
	opExt2     = 0x83
	opExt4     = 0x84
	opTuple1   = 0x85
	opTuple2   = 0x86
	opTuple3   = 0x87
	opNewTrue  = 0x88
	opNewFalse = 0x89
	opLong1    = 0x8a
	opLong4    = 0x8b

	// Protocol 3.
	opBinBytes      = 'B'
	opShortBinBytes = 'C'

	// Protocol 4.
	opShortBinUnicode = 0x8c
	opBinUnicode8     = 0x8d
	opBinBytes8       = 0x8e
	opEmptySet        = 0x8f
	opAddItems        = 0x90
	opFrozenSet       = 0x91
	opNewObjEx        = 0x92
	opStackGlobal     = 0x93
	opMemoize         = 0x94
	opFrame           = 0x95

	// Protocol 5.
	opByteArray8     = 0x96
	opNextBuffer     = 0x97
	opReadOnlyBuffer = 0x98
)

// highestProtocol is the newest pickle protocol this package reads.
const highestProtocol = 5

// argKind describes how an opcode's inline argument is encoded.
type argKind uint8

const (
	argNone    argKind = iota
	argU1              // 1-byte unsigned
	argU2              // 2-byte little-endian unsigned
	argI4              // 4-byte little-endian signed
	argU4              // 4-byte little-endian unsigned
	argU8              // 8-byte little-endian unsigned
	argF8              // 8-byte big-endian float
	argLine            // text up to '\n'
	argLine2           // two '\n'-terminated lines
	argCount1          // 1-byte length, then that many bytes
	argCount4          // 4-byte unsigned length, then bytes
	argCount4s         // 4-byte signed length (BINSTRING, LONG4), then bytes
	argCount8          // 8-byte length, then bytes
)

// opInfo is the static description of one opcode.
type opInfo struct {
	name string
	arg  argKind
}

var opTable = [256]opInfo{
	opMark: {"MARK", argNone}, opStop: {"STOP", argNone}, opPop: {"POP", argNone},
	opPopMark: {"POP_MARK", argNone}, opDup: {"DUP", argNone}, opFloat: {"FLOAT", argLine},
	opInt: {"INT", argLine}, opBinInt: {"BININT", argI4}, opBinInt1: {"BININT1", argU1},
	opLong: {"LONG", argLine}, opBinInt2: {"BININT2", argU2}, opNone: {"NONE", argNone},
	opPersID: {"PERSID", argLine}, opBinPersID: {"BINPERSID", argNone}, opReduce: {"REDUCE", argNone},
	opString: {"STRING", argLine}, opBinString: {"BINSTRING", argCount4s},
	opShortBinString: {"SHORT_BINSTRING", argCount1}, opUnicode: {"UNICODE", argLine},
	opBinUnicode: {"BINUNICODE", argCount4}, opAppend: {"APPEND", argNone}, opBuild: {"BUILD", argNone},
	opGlobal: {"GLOBAL", argLine2}, opDict: {"DICT", argNone}, opEmptyDict: {"EMPTY_DICT", argNone},
	opAppends: {"APPENDS", argNone}, opGet: {"GET", argLine}, opBinGet: {"BINGET", argU1},
	opInst: {"INST", argLine2}, opLongBinGet: {"LONG_BINGET", argU4}, opList: {"LIST", argNone},
	opEmptyList: {"EMPTY_LIST", argNone}, opObj: {"OBJ", argNone}, opPut: {"PUT", argLine},
	opBinPut: {"BINPUT", argU1}, opLongBinPut: {"LONG_BINPUT", argU4}, opSetItem: {"SETITEM", argNone},
	opTuple: {"TUPLE", argNone}, opEmptyTuple: {"EMPTY_TUPLE", argNone}, opSetItems: {"SETITEMS", argNone},
	opBinFloat: {"BINFLOAT", argF8},
	opProto:    {"PROTO", argU1}, opNewObj: {"NEWOBJ", argNone}, opExt1: {"EXT1", argU1},
	opExt2: {"EXT2", argU2}, opExt4: {"EXT4", argI4}, opTuple1: {"TUPLE1", argNone},
	opTuple2: {"TUPLE2", argNone}, opTuple3: {"TUPLE3", argNone}, opNewTrue: {"NEWTRUE", argNone},
	opNewFalse: {"NEWFALSE", argNone}, opLong1: {"LONG1", argCount1}, opLong4: {"LONG4", argCount4s},
	opBinBytes: {"BINBYTES", argCount4}, opShortBinBytes: {"SHORT_BINBYTES", argCount1},
	opShortBinUnicode: {"SHORT_BINUNICODE", argCount1}, opBinUnicode8: {"BINUNICODE8", argCount8},
	opBinBytes8: {"BINBYTES8", argCount8}, opEmptySet: {"EMPTY_SET", argNone},
	opAddItems: {"ADDITEMS", argNone}, opFrozenSet: {"FROZENSET", argNone},
	opNewObjEx: {"NEWOBJ_EX", argNone}, opStackGlobal: {"STACK_GLOBAL", argNone},
	opMemoize: {"MEMOIZE", argNone}, opFrame: {"FRAME", argU8},
	opByteArray8: {"BYTEARRAY8", argCount8}, opNextBuffer: {"NEXT_BUFFER", argNone},
	opReadOnlyBuffer: {"READONLY_BUFFER", argNone},
}

// opName returns the pickletools name of an opcode byte, or "" if the byte
// is not an opcode.
func opName(op byte) string { return opTable[op].name }

// errUnknownOpcode describes a byte that is not a pickle opcode.
func errUnknownOpcode(op byte) error {
	if op >= 0x20 && op < 0x7f {
		return fmt.Errorf("unknown opcode 0x%02x (%q)", op, rune(op))
	}
	return fmt.Errorf("unknown opcode 0x%02x", op)
}

// reader reads opcode arguments from data: the whole input, or (src set) a window of
// it read from src at base. Every slice it returns aliases data and stays valid: a window
// is never overwritten, the next one is a new buffer.
type reader struct {
	data []byte
	pos  int
	// With src, data holds bytes [base, base+len(data)) of src's size bytes.
	src  io.ReaderAt
	base int64
	size int64
	win  int // the size of the reads from src; 0 means window
}

// window is the size of the reads of a reader with a src.
const window = 1 << 20

// offset is the absolute position in the input.
func (r *reader) offset() int64 { return r.base + int64(r.pos) }

// seek moves to the absolute position off: one read before, or one ahead within the input.
func (r *reader) seek(off int64) {
	if off >= r.base && off <= r.base+int64(len(r.data)) {
		r.pos = int(off - r.base)
		return
	}
	r.base, r.data, r.pos = off, nil, 0
}

func (r *reader) remaining() int {
	if r.src == nil {
		return len(r.data) - r.pos
	}
	return int(r.size - r.offset())
}

// fill makes the next n bytes (at most what is left) available in data; the caller
// checked n against remaining. It reads src onwards from where the window ends, so that
// every byte is read once and in order — a remote source (a bucket stream with
// read-ahead) keeps its sequential prefetch: the new window starts with a copy of the
// unread tail of the old one, then the next bytes of src. A position moved past the
// window (seek, skip) starts the next read there.
func (r *reader) fill(n int) error {
	if r.src == nil || len(r.data)-r.pos >= n {
		return nil
	}
	w := r.win
	if w == 0 {
		w = window
	}
	tail := r.data[r.pos:]
	end := r.base + int64(len(r.data)) // where src is read from
	size := min(int64(max(n, w)), r.size-r.offset())
	b := make([]byte, size)
	copy(b, tail)
	if want := size - int64(len(tail)); want > 0 {
		if m, err := r.src.ReadAt(b[len(tail):], end); int64(m) < want {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("reading the pickle at offset %d: %w", end+int64(m), err)
		}
	}
	r.base, r.data, r.pos = r.offset(), b, 0
	return nil
}

func truncated(what string, n uint64, have int) error {
	return fmt.Errorf("%s needs %d bytes, %d left: %w", what, n, have, io.ErrUnexpectedEOF)
}

// take returns the next n bytes.
func (r *reader) take(n uint64, what string) ([]byte, error) {
	if n > uint64(r.remaining()) {
		return nil, truncated(what, n, r.remaining())
	}
	if err := r.fill(int(n)); err != nil {
		return nil, err
	}
	b := r.data[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b, nil
}

// skip moves past the next n bytes without reading them: a pass that only needs to know
// where an argument ends reads nothing of it (and allocates nothing for it).
func (r *reader) skip(n uint64, what string) error {
	if n > uint64(r.remaining()) {
		return truncated(what, n, r.remaining())
	}
	r.seek(r.offset() + int64(n))
	return nil
}

func (r *reader) u1() (byte, error) {
	if r.remaining() < 1 {
		return 0, truncated("argument", 1, r.remaining())
	}
	if err := r.fill(1); err != nil {
		return 0, err
	}
	r.pos++
	return r.data[r.pos-1], nil
}

func (r *reader) u2() (uint16, error) {
	b, err := r.take(2, "argument")
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b), nil
}

func (r *reader) u4() (uint32, error) {
	b, err := r.take(4, "argument")
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *reader) u8() (uint64, error) {
	b, err := r.take(8, "argument")
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// line returns the bytes up to (not including) the next '\n', and consumes
// the newline. Lines longer than max bytes are an error.
func (r *reader) line(max int64) ([]byte, error) {
	i := bytes.IndexByte(r.data[r.pos:], '\n')
	for i < 0 && r.src != nil && len(r.data)-r.pos < r.remaining() && int64(len(r.data)-r.pos) <= max {
		// The line runs past the window: a window twice as long, its unread bytes first.
		if err := r.fill(min(2*(len(r.data)-r.pos)+1, r.remaining())); err != nil {
			return nil, err
		}
		i = bytes.IndexByte(r.data[r.pos:], '\n')
	}
	if i < 0 {
		if int64(r.remaining()) > max {
			return nil, &LimitError{Limit: "MaxStringLen", What: fmt.Sprintf("text line of more than %d bytes", r.remaining()), Max: max}
		}
		return nil, fmt.Errorf("no newline after text argument: %w", io.ErrUnexpectedEOF)
	}
	if int64(i) > max {
		return nil, &LimitError{Limit: "MaxStringLen", What: fmt.Sprintf("text line of %d bytes", i), Max: max}
	}
	b := r.data[r.pos : r.pos+i]
	r.pos += i + 1
	return b, nil
}

// countPrefix reads the length prefix of a counted argument.
func (r *reader) countPrefix(kind argKind) (uint64, error) {
	switch kind {
	case argCount1:
		n, err := r.u1()
		return uint64(n), err
	case argCount4:
		n, err := r.u4()
		return uint64(n), err
	case argCount4s:
		n, err := r.u4()
		if err != nil {
			return 0, err
		}
		if int32(n) < 0 {
			return 0, fmt.Errorf("negative byte count %d", int32(n))
		}
		return uint64(n), nil
	case argCount8:
		return r.u8()
	}
	return 0, fmt.Errorf("internal: argument kind %d has no count", kind)
}
