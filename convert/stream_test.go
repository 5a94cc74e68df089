package convert

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/fastcopy"
	"github.com/ckpt-dev/ckpt/statedict"
)

// releases counts the releases of a checkpoint's mapped pages (a statedict closer with
// DontNeed), and records, at each read of a reader range, how many there were.
type releases struct {
	n     int
	atEnd int
}

func (r *releases) Close() error { return nil }
func (r *releases) DontNeed()    { r.n++ }

type zeroReader struct {
	size int64
	rel  *releases
}

func (c *zeroReader) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	if off+int64(len(p)) == c.size {
		c.rel.atEnd = c.rel.n
	}
	return len(p), nil
}

// TestReaderRangeReleasesAsItGoes: a reader range (a cast of a mapped source reads through
// the mapping) goes to the file in pieces, with the source's pages released every
// releaseEvery bytes while it is written, not once it is done: passed whole, a 262 MB
// tensor's pages all stayed resident (--dtype bfloat16 peaked at 322 MiB, 137 with pieces).
func TestReaderRangeReleasesAsItGoes(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rel := &releases{}
	o := &output{ctx: context.Background(), src: &statedict.Checkpoint{Closers: []io.Closer{rel}}}
	s := &stream{fc: fastcopy.NewFile(f), f: f, o: o}
	size := int64(3*releaseEvery + 5)
	n, err := s.WriteRange(statedict.Range{Src: &zeroReader{size: size, rel: rel}, N: size})
	if cerr := s.fc.Close(); err == nil {
		err = cerr
	}
	if err != nil || n != size {
		t.Fatalf("wrote %d of %d: %v", n, size, err)
	}
	if rel.atEnd < 2 {
		t.Errorf("%d releases before the range's last piece was read, want 3 (one per %d bytes)", rel.atEnd, releaseEvery)
	}
}
