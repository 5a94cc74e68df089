package pickle

import (
	"errors"
	"fmt"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// Error is the error returned for any failure while decoding or scanning: it
// names the byte offset (from the start of the data given to [NewDecoder] or
// [Scan]) and the opcode at which decoding stopped. Err is the cause; it may
// be (or wrap) a [*LimitError], a [*DisallowedError], an error from
// [Options.PersistentLoad], io.ErrUnexpectedEOF for truncated input, or
// io.EOF when Decode is called with no data left.
type Error struct {
	Offset int64
	Op     string // opcode name, e.g. "BINUNICODE"; empty if no opcode was read
	Err    error
}

// Error formats as "pickle: offset 1234 (BINUNICODE): cause".
func (e *Error) Error() string {
	if e.Op == "" {
		return fmt.Sprintf("pickle: offset %d: %v", e.Offset, e.Err)
	}
	return fmt.Sprintf("pickle: offset %d (%s): %v", e.Offset, e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ckpterr.ErrCorrupt) true for malformed pickles (not for a
// limit exceeded, a refused global or a failure of the persistent-id callback's own kind).
func (e *Error) Is(target error) bool {
	return target == ckpterr.ErrCorrupt && ckpterr.CorruptCause(e.Err) && !errors.Is(e.Err, ErrLimit) && !errors.Is(e.Err, ErrNotAllowed)
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

// Is makes errors.Is(err, ErrNotAllowed) true, and errors.Is(err, ckpterr.ErrDangerous)
// when the global is one that runs code (see Dangerous).
func (e *DisallowedError) Is(target error) bool {
	if target == ckpterr.ErrDangerous {
		_, bad := Dangerous(e.Global)
		return bad
	}
	return target == ErrNotAllowed
}

// errUnderflow is returned when an opcode pops below the current MARK or
// past the bottom of the stack.
var errUnderflow = errors.New("unpickling stack underflow")
