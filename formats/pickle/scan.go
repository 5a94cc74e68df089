package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ckpt-dev/ckpt/ckpterr"
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

// ScannedGlobal is one global reference found by [Scan], or a finding that stands for the
// globals the scanner cannot see (Global empty): a STACK_GLOBAL whose operands are not
// string literals, a pickle the CPython versions torch runs on read differently (FRAME),
// a pickle beyond the scanner's limits.
type ScannedGlobal struct {
	// Global is the referenced name after Python 2→3 renaming; empty for a finding that
	// names no global.
	Global Global
	Offset int64  // offset of the GLOBAL, STACK_GLOBAL or INST opcode (or the finding's)
	Opcode string // "GLOBAL", "STACK_GLOBAL" or "INST" (or the finding's opcode)
	Class  Safety
	Why    string // for Unsafe: the reason from Dangerous; for a finding: what is unseen
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
// [*ckpterr.FormatError]. Scan uses DefaultLimits for stack, mark and memo sizes; a pickle
// beyond them, or one the supported CPythons read differently (see [ScanOne]),
// gets an Unknown finding.
func Scan(data []byte) (ScanReport, error) {
	s := newScanner(data)
	if len(data) == 0 {
		return s.rep, errorAt(0, noOp, io.EOF)
	}
	for s.r.remaining() > 0 {
		if err := s.scanReadings(); err != nil {
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
//
// Every reading a supported CPython (3.10 and later) takes is scanned. They differ on
// FRAMEs: CPython before 3.14.7 / 3.13.15, reading a file object without peek() (a zip
// record's BytesIO, a tar member) or a frame of 8 KiB or more, fetches a frame's bytes
// and nothing more, and an argument that does not fit the rest of them is read from
// after the frame, the rest dropped; reading bytes, or a small frame through peek(), it
// reads on; later CPythons refuse the pickle there. A pickle with such an argument (or a
// frame that runs past its STOP, which moves where the next load starts) gets an Unknown
// finding, and the globals of both readings are listed.
func ScanOne(data []byte) (ScanReport, error) {
	s := newScanner(data)
	if len(data) == 0 {
		return s.rep, errorAt(0, noOp, io.EOF)
	}
	if err := s.scanReadings(); err != nil {
		return s.rep, err
	}
	s.rep.Pickles = 1
	s.rep.End = int64(s.r.pos)
	return s.rep, nil
}

func newScanner(data []byte) *scanner {
	return &scanner{r: reader{data: data}, lim: DefaultLimits(), win: -1, straddle: -1}
}

// scanReadings scans one pickle as it is read by CPython with frames taken as whatever
// follows them (contiguously), watching where the other reading (frames as the only bytes
// fetched, see ScanOne) would differ; when it would, that reading's globals are added.
// A pickle beyond the scanner's limits gets an Unknown finding too: Python reads on.
func (s *scanner) scanReadings() error {
	start := s.r.pos
	s.straddle, s.why = -1, ""
	err := s.scanOne()
	var le *LimitError
	if errors.As(err, &le) {
		var off int64
		var op string
		if fe := (*ckpterr.FormatError)(nil); errors.As(err, &fe) {
			off, op = fe.Offset, fe.Item
		}
		s.rep.Globals = append(s.rep.Globals, ScannedGlobal{Offset: off, Opcode: op, Class: Unknown,
			Why: fmt.Sprintf("the pickle goes beyond the scanner's limits (%v): Python reads on, and what it would import and call from byte %d of the pickle on is unknown", le, off)})
	}
	if s.straddle < 0 {
		return err
	}
	s.rep.Globals = append(s.rep.Globals, ScannedGlobal{Offset: int64(s.straddle), Opcode: "FRAME", Class: Unknown, Why: s.why})
	// The other reading: a fresh unpickler from the same start, dropping the rest of a
	// frame a read does not fit.
	other := newScanner(s.r.data)
	other.r.pos, other.discard = start, true
	other.scanOne() // its own error ends it where Python would stop
	seen := map[ScannedGlobal]bool{}
	for _, g := range s.rep.Globals {
		seen[g] = true
	}
	for _, g := range other.rep.Globals {
		if !seen[g] {
			s.rep.Globals = append(s.rep.Globals, g)
		}
	}
	s.rep.Opcodes += other.rep.Opcodes
	return err
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
	// win is the end of the bytes CPython's C unpickler last fetched from a file object
	// without peek() while they are not all read: a frame's end (or past it, when the
	// frame was within bytes already fetched); -1 when every fetched byte was read.
	win int
	// discard takes the reading of CPythons before 3.14.7 / 3.13.15 on such a file: a
	// read that does not fit the rest of the fetched bytes drops them and reads from
	// after them. Otherwise the scanner reads on contiguously.
	discard bool
	// straddle is the offset of the first read the two readings take differently (-1:
	// none), why says how.
	straddle int
	why      string
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
	s.stack, s.marks, s.proto, s.win = s.stack[:0], s.marks[:0], 0, -1
	s.memo.reset()
	start := s.r.pos
	for {
		off := s.r.pos
		if s.r.remaining() == 0 {
			return errorAt(int64(off), noOp, fmt.Errorf("pickle starting at offset %d has no STOP: %w", start, io.ErrUnexpectedEOF))
		}
		op := s.r.data[off]
		s.r.pos++
		s.rep.Opcodes++
		done, err := s.step(op, off)
		if err != nil {
			s.r.pos = off
			return errorAt(int64(off), int(op), err)
		}
		if done {
			return nil
		}
	}
}

// args reads the inline argument of op: num for integer kinds, a and b for
// lines and counted payloads (aliasing data), each read as CPython's C unpickler reads
// it (see fit).
func (s *scanner) args(op byte) (num uint64, a, b []byte, err error) {
	switch k := opTable[op].arg; k {
	case argNone:
	case argU1:
		var v []byte
		v, err = s.read(1)
		if err == nil {
			num = uint64(v[0])
		}
	case argU2:
		var v []byte
		if v, err = s.read(2); err == nil {
			num = uint64(binary.LittleEndian.Uint16(v))
		}
	case argI4, argU4:
		var v []byte
		if v, err = s.read(4); err == nil {
			num = uint64(binary.LittleEndian.Uint32(v))
		}
	case argU8:
		var v []byte
		if v, err = s.read(8); err == nil {
			num = binary.LittleEndian.Uint64(v)
		}
	case argF8:
		_, err = s.read(8)
	case argLine:
		a, err = s.readline()
	case argLine2:
		if a, err = s.readline(); err == nil {
			b, err = s.readline()
		}
	default:
		var p []byte
		if p, err = s.read(countLen(k)); err != nil {
			return
		}
		var n uint64
		switch len(p) {
		case 1:
			n = uint64(p[0])
		case 4:
			n = uint64(binary.LittleEndian.Uint32(p))
		default:
			n = binary.LittleEndian.Uint64(p)
		}
		if k == argCount4s && int32(n) < 0 {
			return 0, nil, nil, fmt.Errorf("negative byte count %d", int32(n))
		}
		switch op {
		case opShortBinBytes, opBinBytes, opBinBytes8, opByteArray8:
			// Read with _Unpickler_ReadInto: what the fetched bytes lack comes from
			// the file right after them, in every version.
			a, err = s.r.take(n, "argument")
			if s.win <= s.r.pos {
				s.win = -1
			}
		default:
			a, err = s.read(n)
		}
	}
	return num, a, b, err
}

// countLen is the length of a counted argument's length prefix.
func countLen(k argKind) uint64 {
	switch k {
	case argCount1:
		return 1
	case argCount8:
		return 8
	}
	return 4
}

// read reads n bytes as _Unpickler_Read does.
func (s *scanner) read(n uint64) ([]byte, error) {
	s.fit(n, "an argument")
	return s.r.take(n, "argument")
}

// readline reads a text argument as _Unpickler_Readline does.
func (s *scanner) readline() ([]byte, error) {
	if s.win > s.r.pos && bytes.IndexByte(s.r.data[s.r.pos:s.win], '\n') < 0 {
		s.fit(uint64(s.win-s.r.pos)+1, "a text argument")
	}
	return s.r.line(s.lim.MaxStringLen)
}

// fit accounts for a read of n bytes at the current position: one that does not fit the
// rest of the fetched bytes is where the readings differ (CPython before 3.14.7 / 3.13.15
// reading a file without peek() drops that rest and reads from after it; reading bytes it
// reads on; later versions refuse the pickle). After it, every fetched byte is read.
func (s *scanner) fit(n uint64, what string) {
	pos := s.r.pos
	if s.win <= pos {
		s.win = -1
		return
	}
	if uint64(s.win-pos) >= n {
		return
	}
	s.diverge(pos, fmt.Sprintf("%s at byte %d of the pickle runs past the end of its FRAME at byte %d: CPython 3.14.7 / 3.13.15 and later refuse the pickle there, earlier ones reading a file take the argument from after the frame, reading bytes they read on", what, pos, s.win))
	if s.discard {
		s.r.pos = s.win
	}
	s.win = -1
}

// diverge records the first place the readings differ.
func (s *scanner) diverge(off int, why string) {
	if s.straddle < 0 {
		s.straddle, s.why = off, why
	}
}

// frame reads a FRAME of n bytes as load_frame does: the n bytes are fetched (unless
// already fetched) and read from their start.
func (s *scanner) frame(n uint64) error {
	pos := s.r.pos
	if s.win > pos && uint64(s.win-pos) < n {
		s.diverge(pos, fmt.Sprintf("a FRAME of %d bytes at byte %d of the pickle starts inside the previous one, which ends at byte %d: CPython 3.14.7 / 3.13.15 and later refuse the pickle there, earlier ones reading a file drop the rest of the previous frame", n, pos, s.win))
		if s.discard {
			s.r.pos = s.win
		}
		s.win = -1
	}
	if n > uint64(s.r.remaining()) {
		return truncated("frame", n, s.r.remaining())
	}
	if s.win <= s.r.pos {
		s.win = s.r.pos + int(n)
	}
	return nil
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
		if _, err = s.popN(1); err != nil {
			return false, err
		}
		if s.win > s.r.pos {
			s.diverge(off, fmt.Sprintf("the FRAME ends at byte %d of the pickle, past its STOP: where the next pickle.load starts differs between CPython's readers (after the STOP, or after the frame)", s.win))
		}
		return true, nil
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
		if err = s.frame(num); err != nil {
			return false, err
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
