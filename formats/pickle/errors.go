package pickle

import (
	"errors"
	"fmt"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// Format is the name errors give this format: every failure while decoding or scanning is a
// [*ckpterr.FormatError] with Format "pickle", Offset the byte offset (from the start of the
// data given to [NewDecoder] or [Scan]) and Item the name of the opcode at which decoding
// stopped ("BINUNICODE"; "" if no opcode was read). Its Err is the cause; it may be (or
// wrap) a [*LimitError], a [*DisallowedError], an error from [Options.PersistentLoad],
// io.ErrUnexpectedEOF for truncated input, or io.EOF when Decode is called with no data
// left. errors.Is(err, ckpterr.ErrCorrupt) holds for malformed pickles only: a limit
// exceeded is ckpterr.ErrUnsupported, a refused global ErrUnsupported or ErrDangerous.
const Format = "pickle"

// noOp is errorAt's op for a failure before an opcode was read.
const noOp = -1

// errorAt returns the error for a failure at byte off, in the opcode op (or noOp).
func errorAt(off int64, op int, err error) *ckpterr.FormatError {
	e := &ckpterr.FormatError{Format: Format, Offset: off, Err: err}
	if op != noOp {
		e.Item = opName(byte(op))
	}
	return e
}

// ErrLimit is matched by errors.Is for every [*LimitError].
var ErrLimit = errors.New("pickle: limit exceeded")

// LimitError reports that the input asked for more than a [Limits] field
// allows. It is returned before the allocation it guards.
type LimitError struct {
	Limit string // the Limits field, e.g. "MaxStringLen"
	What  string // what was asked for, e.g. "string of 1099511627776 bytes"
	Max   int64  // the limit in force
}

// Error formats as "string of 1099511627776 bytes exceeds limit MaxStringLen=268435456".
func (e *LimitError) Error() string {
	return fmt.Sprintf("%s exceeds limit %s=%d", e.What, e.Limit, e.Max)
}

// Is makes errors.Is(err, ErrLimit) and errors.Is(err, ckpterr.ErrUnsupported) true:
// the input may be valid, but larger than ckpt is willing to decode.
func (e *LimitError) Is(target error) bool {
	return target == ErrLimit || target == ckpterr.ErrUnsupported
}

// ErrNotAllowed is matched by errors.Is for every [*DisallowedError].
var ErrNotAllowed = errors.New("pickle: global not allowed")

// DisallowedError reports, in [Options.Strict] mode, a global outside
// [Allowed] and [Options.Allow], as torch's weights_only unpickler does.
type DisallowedError struct {
	Opcode string // GLOBAL, STACK_GLOBAL or INST
	Global Global
}

// Error formats as "unsupported global: GLOBAL os.system".
func (e *DisallowedError) Error() string {
	return fmt.Sprintf("unsupported global: %s %s", e.Opcode, e.Global)
}

// Is makes errors.Is(err, ErrNotAllowed) true; errors.Is(err, ckpterr.ErrDangerous) when
// the global is one that runs code (see Dangerous), and ckpterr.ErrUnsupported when it is
// not: a class ckpt does not know, as torch's weights_only unpickler calls it.
func (e *DisallowedError) Is(target error) bool {
	switch target {
	case ckpterr.ErrDangerous, ckpterr.ErrUnsupported:
		_, bad := Dangerous(e.Global)
		return bad == (target == ckpterr.ErrDangerous)
	}
	return target == ErrNotAllowed
}

// errUnderflow is returned when an opcode pops below the current MARK or
// past the bottom of the stack.
var errUnderflow = errors.New("unpickling stack underflow")
