package statedict

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

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

// CorruptCause reports whether a failure to decode a file, with this cause, is the file's
// fault — corrupt input — rather than unsupported or dangerous content or an I/O error. The
// positional error types of the format readers use it so that errors.Is(err, ErrCorrupt)
// holds for exactly the failures that mean a broken file.
func CorruptCause(cause error) bool {
	if cause == nil || errors.Is(cause, ErrUnsupported) || errors.Is(cause, ErrDangerous) {
		return false
	}
	var pe *fs.PathError
	var se *os.SyscallError
	var errno syscall.Errno
	return !errors.As(cause, &pe) && !errors.As(cause, &se) && !errors.As(cause, &errno)
}
