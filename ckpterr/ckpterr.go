package ckpterr

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

var (
	// ErrCorrupt: the input breaks its format's rules (truncated, inconsistent, out of bounds).
	ErrCorrupt = errors.New("corrupt checkpoint")
	// ErrUnsupported: well-formed input, or a requested output, that ckpt does not handle.
	ErrUnsupported = errors.New("unsupported")
	// ErrDangerous: the input references code that Python's pickle would run.
	ErrDangerous = errors.New("dangerous content")
)

// CorruptCause reports whether a failure to decode a file, with this cause, is the file's
// fault — corrupt input — rather than unsupported or dangerous content, an I/O error or a
// cancelled context. [FormatError] uses it so that errors.Is(err, ErrCorrupt) holds for
// exactly the failures that mean a broken file.
//
// I/O errors are the operating system's (*fs.PathError, *os.SyscallError, syscall.Errno),
// the network's (any error with a Timeout() bool method, as net.Error has) and an object
// store's answer (any error with an HTTPStatusCode() int method, as the bucket clients'
// errors have).
func CorruptCause(cause error) bool {
	if cause == nil || errors.Is(cause, ErrUnsupported) || errors.Is(cause, ErrDangerous) ||
		errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
		return false
	}
	var (
		pe      *fs.PathError
		se      *os.SyscallError
		errno   syscall.Errno
		network interface{ Timeout() bool }
		http    interface{ HTTPStatusCode() int }
	)
	return !errors.As(cause, &pe) && !errors.As(cause, &se) && !errors.As(cause, &errno) &&
		!errors.As(cause, &network) && !errors.As(cause, &http)
}

// FormatError is a failure at a place in a file: the one positional error of every reader.
type FormatError struct {
	// Format is the format being read, as ckpt names it: "safetensors", "torch-zip",
	// "torch-legacy", "dcp", "pickle", "npy", "tar", ...
	Format string
	// File is the file (or object URL) at fault; "" when the reader was handed bytes
	// without a name.
	File string
	// Item names the part of the file at fault: a tensor's key, a DCP item's flattened
	// name, a zip record's or tar member's name, a legacy storage's key, the pickle opcode
	// being decoded; "" for a problem of the file as a whole.
	Item string
	// Offset is the byte offset of the problem, from the start of File (from the start of
	// the bytes the reader was handed when File is ""); -1 when it has no position.
	Offset int64
	// Err is the cause. It carries ErrUnsupported or ErrDangerous where they hold, and may
	// be another reader's FormatError (a pickle inside a zip record).
	Err error
}

// Error formats as "FILE: FORMAT: "ITEM": byte N: cause", leaving out the parts that are
// unknown. A cause that is (or ends in) a FormatError of the same file (a pickle in a zip
// record, a zip in a DCP item) leaves the file out rather than naming it twice.
func (e *FormatError) Error() string {
	var b strings.Builder
	e.format(&b, "")
	return b.String()
}

// format writes the error, leaving out File when it is the enclosing error's, named.
func (e *FormatError) format(b *strings.Builder, named string) {
	file := e.File
	if file == named {
		file = ""
	} else if file != "" {
		named = file
	}
	for _, s := range []string{file, e.Format} {
		if s != "" {
			b.WriteString(s)
			b.WriteString(": ")
		}
	}
	if e.Item != "" {
		b.WriteString(strconv.Quote(e.Item))
		b.WriteString(": ")
	}
	if e.Offset >= 0 {
		b.WriteString("byte ")
		b.WriteString(strconv.FormatInt(e.Offset, 10))
		b.WriteString(": ")
	}
	switch cause := e.Err.(type) {
	case nil:
		b.WriteString("malformed")
	case *FormatError:
		cause.format(b, named)
	default:
		// A cause that words a FormatError of the same file ("chunk at [0 4]: " + its
		// text) keeps its words and leaves out the inner error's file.
		text := cause.Error()
		var inner *FormatError
		if errors.As(cause, &inner) && inner.File != "" && inner.File == named {
			if in := inner.Error(); strings.HasSuffix(text, in) {
				b.WriteString(text[:len(text)-len(in)])
				inner.format(b, named)
				return
			}
		}
		b.WriteString(text)
	}
}

// Unwrap returns the cause, so errors.Is finds ErrUnsupported, ErrDangerous,
// io.ErrUnexpectedEOF, fs.ErrNotExist and the like, and errors.As a cause's own type.
func (e *FormatError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true when the cause means a broken file (see
// [CorruptCause]).
func (e *FormatError) Is(target error) bool {
	return target == ErrCorrupt && CorruptCause(e.Err)
}
