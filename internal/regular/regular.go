// Package regular opens the files ckpt reads, regular files only: a FIFO, a device
// (/dev/zero, /dev/urandom), a socket or a folder put where a file is expected — directly
// or through a link — is refused by name and kind, and never waited on, since the open
// does not block (O_NONBLOCK) and the kind is read from the open descriptor (fstat) before
// a byte is. ReadFile reads a small control file (a tracker, a config, a manifest's
// sidecar, a names list) whole, bounded: every such read in ckpt goes through it.
package regular

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is returned for a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned for a file larger than its reader's bound.
var ErrTooLarge = errors.New("larger than such a file may be")

// Open opens path for reading, refusing anything but a regular file without waiting on
// it.
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, nil, err
	}
	return check(f, path)
}

// OpenIn opens name inside root (os.Root: never outside it) as Open does.
func OpenIn(root *os.Root, name string) (*os.File, fs.FileInfo, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, nil, err
	}
	return check(f, name)
}

// check keeps f (opened as path) only if it is a regular file (whose reads never wait,
// O_NONBLOCK or not).
func check(f *os.File, path string) (*os.File, fs.FileInfo, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: it is %s", ErrNotRegular, Kind(st.Mode()))}
	}
	return f, st, nil
}

// Kind names what a file of mode m is, for messages.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a file"
	case m.IsDir():
		return "a folder"
	case m&fs.ModeSymlink != 0:
		return "a link"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a file"
}

// ReadFile reads the whole of the regular file path, refusing one larger than limit bytes
// (checked before reading, and again as it is read: a file that grows meanwhile is cut at
// limit+1 and refused). Errors name the path and the reason, never the content.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return read(f, st, path, limit)
}

func read(f *os.File, st fs.FileInfo, path string, limit int64) ([]byte, error) {
	if limit < 0 {
		return nil, fmt.Errorf("regular: %s: a read needs a bound", path)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, more than %d", path, ErrTooLarge, st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", path, ErrTooLarge, limit)
	}
	return b, nil
}
