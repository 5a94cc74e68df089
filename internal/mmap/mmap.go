// Package mmap maps files read-only into memory, so checkpoint readers can hand out tensor
// bytes as slices of the file without copying them and without holding the checkpoint in
// the Go heap: pages come from the page cache on demand and are dropped under pressure.
package mmap

import (
	"fmt"
	"io"

	"github.com/ckpt-dev/ckpt/internal/regular"
)

// File is a read-only memory mapping of a whole file.
type File struct {
	name string
	data []byte
}

// Open maps the named file read-only: a regular file only, opened without waiting (see
// package regular). An empty file maps to an empty slice.
func Open(name string) (*File, error) {
	f, st, err := regular.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := st.Size()
	if size == 0 {
		return &File{name: name, data: []byte{}}, nil
	}
	if size != int64(int(size)) {
		return nil, fmt.Errorf("%s: file of %d bytes is too large to map", name, size)
	}
	data, err := mapFile(f, int(size))
	if err != nil {
		return nil, fmt.Errorf("%s: mmap: %w", name, err)
	}
	return &File{name: name, data: data}, nil
}

// Name is the path the file was opened with.
func (f *File) Name() string { return f.name }

// Bytes is the mapped content. It must not be used after Close.
func (f *File) Bytes() []byte { return f.data }

// Size is the file length in bytes.
func (f *File) Size() int64 { return int64(len(f.data)) }

// ReadAt implements io.ReaderAt over the mapping.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%s: negative offset %d", f.name, off)
	}
	if off >= int64(len(f.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Advise tells the kernel the mapping will be read sequentially, which doubles readahead
// for streaming conversions. Errors are ignored: it is only a hint.
func (f *File) Advise() {
	if len(f.data) > 0 {
		adviseSequential(f.data)
	}
}

// DontNeed drops the mapping's resident pages from this process. The file stays mapped and
// its pages stay in the page cache; touching them again faults them back in. Streaming
// readers call it after consuming data so that the process's resident memory stays
// independent of the checkpoint's size.
func (f *File) DontNeed() {
	if len(f.data) > 0 {
		dontNeed(f.data)
	}
}

// Close unmaps the file.
func (f *File) Close() error {
	if len(f.data) == 0 {
		return nil
	}
	err := unmap(f.data)
	f.data = nil
	return err
}
