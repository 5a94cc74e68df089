// Package fastcopy moves tensor bytes from a source checkpoint file to an output file inside
// the kernel (copy_file_range), the way cp does, instead of faulting the mapped source into
// the process and writing it back out. That halves the time of a plain conversion and keeps
// the process's resident memory flat. Writers that sit in between (counters, checksums,
// buffers) pass ranges along by implementing RangeWriter.
package fastcopy

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Range is a run of bytes that is both in memory (Data, typically a slice of an mmap'd
// file, for writers that must look at the bytes, e.g. to checksum them) and in a file
// (Path at Off), for the kernel to copy.
type Range struct {
	Data []byte
	Path string
	Off  int64
}

// RangeWriter is a writer that can take a Range without the bytes passing through it.
type RangeWriter interface {
	WriteRange(r Range) (int64, error)
}

// Write writes r to w, through w's WriteRange when it has one.
func Write(w io.Writer, r Range) (int64, error) {
	if rw, ok := w.(RangeWriter); ok {
		return rw.WriteRange(r)
	}
	n, err := w.Write(r.Data)
	return int64(n), err
}

// bufSize is the buffer for small writes (headers, pickles, small tensors).
const bufSize = 1 << 20

// File is a buffered writer over an output file that copies ranges in the kernel.
type File struct {
	f    *os.File
	buf  []byte
	srcs map[string]*os.File
	// kernel is cleared once copy_file_range is known not to work here (other
	// filesystem, old kernel); ranges are then written from memory.
	kernel bool
	// written is the output offset reached; flushed the offset up to which writeback to
	// disk has been started.
	written, flushed int64
}

// writebackEvery is how much output may accumulate before its writeback to disk is started
// (sync_file_range, asynchronous): the disk writes while the copy goes on, so the final
// fsync has little left to do.
const writebackEvery = 32 << 20

// advance records n more bytes written and starts writeback of what accumulated.
func (f *File) advance(n int64) {
	f.written += n
	if f.written-f.flushed >= writebackEvery {
		_ = unix.SyncFileRange(int(f.f.Fd()), f.flushed, f.written-f.flushed, unix.SYNC_FILE_RANGE_WRITE)
		f.flushed = f.written
	}
}

// NewFile wraps f, which must be positioned where writing continues.
func NewFile(f *os.File) *File {
	return &File{f: f, buf: make([]byte, 0, bufSize), srcs: map[string]*os.File{}, kernel: true}
}

// Write buffers p (large writes go straight through).
func (f *File) Write(p []byte) (int, error) {
	if len(f.buf)+len(p) > cap(f.buf) {
		if err := f.Flush(); err != nil {
			return 0, err
		}
		if len(p) >= cap(f.buf) {
			n, err := f.f.Write(p)
			f.advance(int64(n))
			return n, err
		}
	}
	f.buf = append(f.buf, p...)
	return len(p), nil
}

// Flush writes the buffered bytes to the file.
func (f *File) Flush() error {
	if len(f.buf) == 0 {
		return nil
	}
	n, err := f.f.Write(f.buf)
	f.advance(int64(n))
	f.buf = f.buf[:0]
	return err
}

// WriteRange copies r from its file in the kernel, falling back to writing r.Data.
func (f *File) WriteRange(r Range) (int64, error) {
	if len(r.Data) < 64<<10 || r.Path == "" || !f.kernel {
		n, err := f.Write(r.Data)
		return int64(n), err
	}
	if err := f.Flush(); err != nil {
		return 0, err
	}
	src, err := f.source(r.Path)
	if err != nil {
		return 0, err
	}
	off := r.Off
	var done int64
	for done < int64(len(r.Data)) {
		// Pieces of at most writebackEvery, so writeback of the output starts early.
		n, err := unix.CopyFileRange(int(src.Fd()), &off, int(f.f.Fd()), nil, int(min(int64(len(r.Data))-done, writebackEvery)), 0)
		if err != nil || n == 0 {
			if done == 0 && (errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) ||
				errors.Is(err, unix.EOPNOTSUPP) || n == 0 && err == nil) {
				f.kernel = false
				m, werr := f.f.Write(r.Data)
				f.advance(int64(m))
				return int64(m), werr
			}
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return done, err
		}
		done += int64(n)
		f.advance(int64(n))
	}
	return done, nil
}

func (f *File) source(path string) (*os.File, error) {
	if s, ok := f.srcs[path]; ok {
		return s, nil
	}
	s, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	f.srcs[path] = s
	return s, nil
}

// Close flushes the buffer and closes the source files it opened; the output file stays
// open for its owner to sync and close.
func (f *File) Close() error {
	err := f.Flush()
	for _, s := range f.srcs {
		s.Close()
	}
	f.srcs = nil
	return err
}

// Counter counts the bytes written through it, passing file ranges on, so that writers
// can report sizes without hiding ranges from the kernel copy.
type Counter struct {
	W io.Writer
	N int64
}

// Write passes p on, counting it.
func (c *Counter) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}

// WriteRange passes r on, counting it.
func (c *Counter) WriteRange(r Range) (int64, error) {
	n, err := Write(c.W, r)
	c.N += n
	return n, err
}
