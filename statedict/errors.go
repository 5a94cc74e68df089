package statedict

import "errors"

// The error family shared by every reader, writer and converter, so a caller can tell what
// kind of failure it has whatever the format: errors.Is(err, ErrCorrupt) for a malformed or
// truncated input, ErrUnsupported for valid input ckpt does not handle, ErrDangerous for
// content that would execute code if loaded the way its producer loads it. The errors that
// carry them still name the file, the tensor or record and the byte offset.
var (
	// ErrCorrupt: the input breaks its format's rules (truncated, inconsistent, out of bounds).
	ErrCorrupt = errors.New("corrupt checkpoint")
	// ErrUnsupported: well-formed input that ckpt does not read or write.
	ErrUnsupported = errors.New("unsupported")
	// ErrDangerous: the input references code that Python's pickle would run.
	ErrDangerous = errors.New("dangerous content")
)
