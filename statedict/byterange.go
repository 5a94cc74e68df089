package statedict

import (
	"hash"
	"io"

	"github.com/ckpt-dev/ckpt/storage"
)

// Range is a run of bytes that is both in memory (Data, typically a slice of an mmap'd
// file) and in a file (Path at Off), for a file writer to read without touching the mapping;
// or that is in a reader only (Src, N bytes at Off: a storage not mapped, in a bucket or read
// with pread), for a file writer to read straight into its own buffer instead of through
// the writers in between.
type Range struct {
	Data []byte
	Path string
	Off  int64
	Src  io.ReaderAt
	N    int64
	// Sums are fed the range's bytes, in order, by whoever finally stores them, before
	// WriteRange returns.
	Sums []hash.Hash
}

// RangeWriter is a writer that can take a Range without the bytes passing through it.
type RangeWriter interface {
	WriteRange(r Range) (int64, error)
}

// WriteRange writes r to w, through w's WriteRange when it has one (else r's sums are fed here).
func WriteRange(w io.Writer, r Range) (int64, error) {
	if rw, ok := storage.As[RangeWriter](w); ok {
		return rw.WriteRange(r)
	}
	if r.Src != nil {
		return r.copySrc(w)
	}
	n, err := w.Write(r.Data)
	for _, h := range r.Sums {
		h.Write(r.Data[:n])
	}
	return int64(n), err
}

// Len is how many bytes r holds.
func (r Range) Len() int64 {
	if r.Src != nil {
		return r.N
	}
	return int64(len(r.Data))
}

// Slice is the part [from, to) of r (offsets relative to r's start), with r's sums.
func (r Range) Slice(from, to int64) Range {
	if r.Data != nil {
		r.Data = r.Data[from:to]
	}
	r.Off += from
	if r.Src != nil {
		r.N = to - from
	}
	return r
}

// ReadAt reads the range's bytes at off (relative to the range's start) into p, which must
// lie within the range, from Data or from Src.
func (r Range) ReadAt(p []byte, off int64) error {
	if r.Src == nil {
		copy(p, r.Data[off:])
		return nil
	}
	n, err := r.Src.ReadAt(p, r.Off+off)
	if n == len(p) {
		return nil // io.ReaderAt may report io.EOF with the last bytes
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF // the range promised more
	}
	return err
}

// A Lender is a reader that holds bytes already (a bucket stream's prefetched blocks) and
// can lend them in place instead of copying them out: a writer that writes from borrowed
// memory (internal/fastcopy through the page cache) saves a copy of every byte.
type Lender interface {
	// Lend returns the bytes at off: at least one and at most n of them (fewer where the
	// buffer holding them ends), valid until release is called, once. ok is false when it
	// has nothing to lend there (the caller reads with ReadAt); the error is a read's.
	Lend(off, n int64) (b []byte, release func(), ok bool, err error)
}

// Lend borrows up to n of the range's bytes from off on (relative to the range's start)
// when its Src lends them (Lender); ok is false when it does not, and ReadAt copies them.
func (r Range) Lend(off, n int64) (b []byte, release func(), ok bool, err error) {
	l, can := storage.As[Lender](r.Src)
	if !can {
		return nil, nil, false, nil
	}
	return l.Lend(r.Off+off, min(n, r.N-off))
}

// copySrc writes a reader's range to w through a bounded buffer, feeding its sums.
func (r Range) copySrc(w io.Writer) (int64, error) {
	buf := make([]byte, min(r.N, copyBuf))
	var done int64
	for done < r.N {
		b := buf[:min(r.N-done, int64(len(buf)))]
		if err := r.ReadAt(b, done); err != nil {
			return done, err
		}
		n, err := w.Write(b)
		for _, h := range r.Sums {
			h.Write(b[:n])
		}
		done += int64(n)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// Tee feeds Sum every byte written through it, passing file ranges on with Sum added to
// their sums, so the bytes are hashed where they are finally stored.
type Tee struct {
	W   io.Writer
	Sum hash.Hash
}

// Write passes p on and feeds what was written to the sum.
func (t *Tee) Write(p []byte) (int, error) {
	n, err := t.W.Write(p)
	t.Sum.Write(p[:n])
	return n, err
}

// WriteRange passes r on with the sum added.
func (t *Tee) WriteRange(r Range) (int64, error) {
	r.Sums = append(r.Sums[:len(r.Sums):len(r.Sums)], t.Sum)
	return WriteRange(t.W, r)
}

// Counter counts the bytes written through it, passing file ranges on, so that writers
// can report sizes without hiding ranges from File.
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
	n, err := WriteRange(c.W, r)
	c.N += n
	return n, err
}
