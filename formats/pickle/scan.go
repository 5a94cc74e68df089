package pickle

import (
	"errors"
	"fmt"
	"io"
)

// ScanReport is the result of [Scan].
type ScanReport struct {
	// Globals lists every GLOBAL, STACK_GLOBAL and INST reference in
	// opcode order, classified.
	Globals []ScannedGlobal
	// Opcodes counts the opcodes walked.
	Opcodes int
	// Pickles counts the complete pickles (ending in STOP).
	Pickles int
	// Protocol is the highest PROTO seen (0 if none).
	Protocol int
	// End is the offset just past the STOP of the last complete pickle.
	End int64
}

// Worst returns the most severe class among the globals (SafeAllowed when
// there are none).
func (r *ScanReport) Worst() Safety {
	w := SafeAllowed
	for _, g := range r.Globals {
		w = max(w, g.Class)
	}
	return w
}

// ScannedGlobal is one global reference found by [Scan].
type ScannedGlobal struct {
	// Global is the referenced name after Python 2→3 renaming; empty when
	// STACK_GLOBAL's operands are not string literals the scanner can see.
	Global Global
	Offset int64  // offset of the GLOBAL, STACK_GLOBAL or INST opcode
	Opcode string // "GLOBAL", "STACK_GLOBAL" or "INST"
	Class  Safety
	Why    string // for Unsafe: the reason from Dangerous
}

// scanStrMax is the longest string the scanner keeps as a possible
// STACK_GLOBAL operand.
const scanStrMax = 1024

// Scan lists every global referenced by the pickle(s) in data without
// building any value, the way a Python unpickler would resolve them
// (STACK_GLOBAL operands are tracked through the stack and memo). Pickles
// may follow each other; scanning continues until data is exhausted, so
// pass only the pickle bytes of a legacy torch file (Decoder.Offset tells
// where they end). On a malformed pickle Scan returns what it found up to
// the failing opcode (which Python would not get past either) and an
// [*Error]. Scan uses DefaultLimits for stack, mark and memo sizes.
func Scan(data []byte) (ScanReport, error) {
	s := scanner{r: reader{data: data}, lim: DefaultLimits()}
	if len(data) == 0 {
		return s.rep, &Error{Err: io.EOF}
	}
	for s.r.remaining() > 0 {
		if err := s.scanOne(); err != nil {
			return s.rep, err
		}
		s.rep.Pickles++
		s.rep.End = int64(s.r.pos)
	}
	return s.rep, nil
}

// ScanOne scans the one pickle at the start of data, as one pickle.load call reads it, and
// stops after its STOP: End is where it ends and the bytes after it are not looked at. A
// torch.save legacy stream or a DCP item is a sequence of such loads, each of which may
// stop the reader; callers that know the layout scan it one pickle at a time.
func ScanOne(data []byte) (ScanReport, error) {
	s := scanner{r: reader{data: data}, lim: DefaultLimits()}
	if len(data) == 0 {
		return s.rep, &Error{Err: io.EOF}
	}
	if err := s.scanOne(); err != nil {
		return s.rep, err
	}
	s.rep.Pickles = 1
	s.rep.End = int64(s.r.pos)
	return s.rep, nil
}

// sym is the scanner's abstraction of a stack value: a str it knows, or
// anything else.
type sym struct {
	s     string
	isStr bool
}

type scanner struct {
	r     reader
	lim   Limits
	rep   ScanReport
	stack []sym
	marks []int
	memo  memo[sym]
	proto int
}

func (s *scanner) fence() int {
	if n := len(s.marks); n > 0 {
		return s.marks[n-1]
	}
	return 0
}

func (s *scanner) push(v sym) error {
	if len(s.stack) >= s.lim.MaxStack {
		return &LimitError{Limit: "MaxStack", What: fmt.Sprintf("stack of %d values", len(s.stack)+1), Max: int64(s.lim.MaxStack)}
	}
	s.stack = append(s.stack, v)
	return nil
}

// popN pops n values; the slice is valid until the next push.
func (s *scanner) popN(n int) ([]sym, error) {
	l := len(s.stack)
	if l-n < s.fence() {
		return nil, errUnderflow
	}
	s.stack = s.stack[:l-n]
	return s.stack[l-n : l], nil
}

func (s *scanner) popMark() error {
	n := len(s.marks)
	if n == 0 {
		return errors.New("could not find MARK")
	}
	s.stack = s.stack[:s.marks[n-1]]
	s.marks = s.marks[:n-1]
	return nil
}

func (s *scanner) top() (sym, error) {
	if len(s.stack) <= s.fence() {
		return sym{}, errUnderflow
	}
	return s.stack[len(s.stack)-1], nil
}

func (s *scanner) record(g Global, off int, op byte) {
	class, why := Classify(g)
	s.rep.Globals = append(s.rep.Globals, ScannedGlobal{Global: g, Offset: int64(off), Opcode: opName(op), Class: class, Why: why})
}

func (s *scanner) scanOne() error {
	s.stack, s.marks, s.proto = s.stack[:0], s.marks[:0], 0
	s.memo.reset()
	start := s.r.pos
	for {
		off := s.r.pos
		if s.r.remaining() == 0 {
			return &Error{Offset: int64(off), Err: fmt.Errorf("pickle starting at offset %d has no STOP: %w", start, io.ErrUnexpectedEOF)}
		}
		op := s.r.data[off]
		s.r.pos++
		s.rep.Opcodes++
		done, err := s.step(op, off)
		if err != nil {
			s.r.pos = off
			return &Error{Offset: int64(off), Op: opName(op), Err: err}
		}
		if done {
			return nil
		}
	}
}

// args reads the inline argument of op: num for integer kinds, a and b for
// lines and counted payloads (aliasing data).
func (s *scanner) args(op byte) (num uint64, a, b []byte, err error) {
	switch k := opTable[op].arg; k {
	case argNone:
	case argU1:
		var v byte
		v, err = s.r.u1()
		num = uint64(v)
	case argU2:
		var v uint16
		v, err = s.r.u2()
		num = uint64(v)
	case argI4, argU4:
		var v uint32
		v, err = s.r.u4()
		num = uint64(v)
	case argU8:
		num, err = s.r.u8()
	case argF8:
		_, err = s.r.take(8, "argument")
	case argLine:
		a, err = s.r.line(s.lim.MaxStringLen)
	case argLine2:
		if a, err = s.r.line(s.lim.MaxStringLen); err == nil {
			b, err = s.r.line(s.lim.MaxStringLen)
		}
	default:
		var n uint64
		if n, err = s.r.countPrefix(k); err == nil {
			a, err = s.r.take(n, "argument")
		}
	}
	return num, a, b, err
}

// strSym makes a sym for a string opcode's decoded text.
func strSym(text string, err error) sym {
	if err != nil {
		return sym{}
	}
	return sym{s: text, isStr: true}
}

func (s *scanner) step(op byte, off int) (done bool, err error) {
	if opTable[op].name == "" {
		return false, errUnknownOpcode(op)
	}
	num, a, b, err := s.args(op)
	if err != nil {
		return false, err
	}
	switch op {
	case opStop:
		_, err = s.popN(1)
		return err == nil, err
	case opMark:
		if len(s.marks) >= s.lim.MaxMarkDepth {
			return false, &LimitError{Limit: "MaxMarkDepth", What: fmt.Sprintf("%d nested marks", len(s.marks)+1), Max: int64(s.lim.MaxMarkDepth)}
		}
		s.marks = append(s.marks, len(s.stack))
	case opPop:
		if n := len(s.marks); n > 0 && s.marks[n-1] == len(s.stack) {
			s.marks = s.marks[:n-1]
		} else {
			_, err = s.popN(1)
		}
	case opPopMark:
		err = s.popMark()
	case opDup:
		var v sym
		if v, err = s.top(); err == nil {
			err = s.push(v)
		}
	case opProto:
		if num > highestProtocol {
			return false, fmt.Errorf("unsupported pickle protocol: %d", num)
		}
		s.proto = int(num)
		s.rep.Protocol = max(s.rep.Protocol, s.proto)
	case opFrame:
		if num > uint64(s.r.remaining()) {
			return false, truncated("frame", num, s.r.remaining())
		}

	case opString, opBinString, opShortBinString, opUnicode, opBinUnicode, opShortBinUnicode, opBinUnicode8:
		v := sym{}
		if len(a) <= scanStrMax {
			switch op {
			case opString:
				if len(a) >= 2 && a[0] == a[len(a)-1] && (a[0] == '\'' || a[0] == '"') {
					raw, err := escapeDecode(a[1 : len(a)-1])
					if err == nil {
						text, _ := decodePy2Str(raw)
						v = sym{s: text, isStr: true}
					}
				}
			case opBinString, opShortBinString:
				text, _ := decodePy2Str(a)
				v = sym{s: text, isStr: true}
			case opUnicode:
				v = strSym(rawUnicodeEscapeDecode(a))
			default:
				v = strSym(decodeUTF8(a))
			}
		}
		err = s.push(v)

	case opGlobal, opInst:
		g := mapGlobal(Global{string(a), string(b)})
		s.record(g, off, op)
		if op == opInst {
			if err = s.popMark(); err != nil {
				return false, err
			}
		}
		err = s.push(sym{})
	case opStackGlobal:
		var mn []sym
		if mn, err = s.popN(2); err != nil {
			return false, err
		}
		if mn[0].isStr && mn[1].isStr {
			g := Global{mn[0].s, mn[1].s}
			if s.proto < 3 {
				g = mapGlobal(g)
			}
			s.record(g, off, op)
		} else {
			s.rep.Globals = append(s.rep.Globals, ScannedGlobal{Offset: int64(off), Opcode: opName(op), Class: Unsafe,
				Why: "STACK_GLOBAL operands are not string literals (dynamic global lookup)"})
		}
		err = s.push(sym{})

	case opGet, opBinGet, opLongBinGet, opPut, opBinPut, opLongBinPut, opMemoize:
		err = s.memoOp(op, num, a)

	case opBinPersID, opReadOnlyBuffer:
		if _, err = s.popN(1); err == nil {
			err = s.push(sym{})
		}
	case opReduce, opNewObj:
		if _, err = s.popN(2); err == nil {
			err = s.push(sym{})
		}
	case opNewObjEx:
		if _, err = s.popN(3); err == nil {
			err = s.push(sym{})
		}
	case opTuple1, opTuple2, opTuple3:
		if _, err = s.popN(int(op-opTuple1) + 1); err == nil {
			err = s.push(sym{})
		}
	case opBuild, opAppend:
		if _, err = s.popN(1); err == nil {
			_, err = s.top()
		}
	case opSetItem:
		if _, err = s.popN(2); err == nil {
			_, err = s.top()
		}
	case opAppends, opSetItems, opAddItems:
		if err = s.popMark(); err == nil {
			_, err = s.top()
		}
	case opTuple, opList, opDict, opFrozenSet:
		if err = s.popMark(); err == nil {
			err = s.push(sym{})
		}
	case opObj:
		n := len(s.marks)
		if n > 0 && s.marks[n-1] == len(s.stack) {
			return false, errUnderflow
		}
		if err = s.popMark(); err == nil {
			err = s.push(sym{})
		}
	default:
		// Every remaining opcode pushes one value that is not a str:
		// numbers, bytes, empty containers, PERSID, EXT*, NEXT_BUFFER.
		err = s.push(sym{})
	}
	return false, err
}

func (s *scanner) memoOp(op byte, num uint64, line []byte) error {
	idx := num
	switch op {
	case opGet, opPut:
		v, err := parseDecimal(string(line))
		i, ok := v.(int64)
		if err != nil || !ok || i < 0 {
			return fmt.Errorf("invalid memo index %q", truncateForError(string(line)))
		}
		idx = uint64(i)
	case opMemoize:
		idx = uint64(s.memo.len())
	}
	switch op {
	case opGet, opBinGet, opLongBinGet:
		v, ok := s.memo.get(idx)
		if !ok {
			return fmt.Errorf("memo value not found at index %d", idx)
		}
		return s.push(v)
	}
	v, err := s.top()
	if err != nil {
		return err
	}
	if !s.memo.has(idx) && s.memo.len() >= s.lim.MaxMemo {
		return &LimitError{Limit: "MaxMemo", What: fmt.Sprintf("memo of %d entries", s.memo.len()+1), Max: int64(s.lim.MaxMemo)}
	}
	s.memo.put(idx, v)
	return nil
}
