package local

import (
	"fmt"
	"io"
	"os"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/internal/fastcopy"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// writer is one output file being written through fastcopy, its bytes fed to an xxhash64
// as they are stored (a file range's from the chunk fastcopy reads it into). done is told
// the file's size and digest once it is complete.
type writer struct {
	fc        *fastcopy.File
	f         *os.File
	n         int64
	sum       *xxhash.Digest
	done      func(storage.Finished) error
	closeFile bool
	closed    bool
}

func newWriter(f *os.File, closeFile bool, done func(storage.Finished) error) *writer {
	return &writer{fc: fastcopy.NewFile(f), f: f, closeFile: closeFile, sum: xxhash.New(), done: done}
}

// Write implements io.Writer.
func (w *writer) Write(p []byte) (int, error) {
	n, err := w.fc.Write(p)
	w.sum.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// WriteRange implements statedict.RangeWriter: fastcopy reads a file range with pread
// (never through the mapping) and a reader's range into its own buffer, feeding the sums.
func (w *writer) WriteRange(r statedict.Range) (int64, error) {
	r.Sums = append(r.Sums[:len(r.Sums):len(r.Sums)], w.sum)
	n, err := w.fc.WriteRange(r)
	w.n += n
	return n, err
}

// Close finishes the file and reports it to done, then closes it when it is the writer's
// (a folder's file; a file output's own stays open until it commits).
func (w *writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.fc.Close()
	if err == nil {
		err = w.done(storage.Finished{Size: w.n, XXHash64: fmt.Sprintf("%016x", w.sum.Sum64())})
	}
	if w.closeFile {
		if cerr := w.f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

var _ statedict.RangeWriter = (*writer)(nil)

// plain is a small file written as it is (a file output's companion): its size and digest
// are nobody's record.
type plain struct{ w io.Writer }

func (p plain) Write(b []byte) (int, error) { return p.w.Write(b) }
func (plain) Close() error                  { return nil }
