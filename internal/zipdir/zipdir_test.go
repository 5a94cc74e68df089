package zipdir

import (
	"archive/zip"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzZipDir checks Read against archive/zip on arbitrary bytes, read both from
// memory and through an io.ReaderAt: the same records (name, method, sizes, data offset or
// its error) or an error where archive/zip has one.
func FuzzZipDir(f *testing.F) {
	seeds, _ := filepath.Glob("../../testdata/torch/*.pt")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil && bytes.HasPrefix(b, []byte("PK\x03\x04")) && len(b) < 64<<10 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if errors.Is(werr, zip.ErrInsecurePath) {
			werr = nil // torchzip reads such archives (and refuses records outside the folder)
		}
		for _, mem := range []bool{true, false} {
			var in []byte
			if mem {
				in = data
			}
			got, gerr := Read(bytes.NewReader(data), in, int64(len(data)))
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("in memory %v: archive/zip: %v; Read: %v", mem, werr, gerr)
			}
			if werr != nil {
				if werr.Error() != gerr.Error() {
					t.Fatalf("in memory %v: archive/zip: %v; Read: %v", mem, werr, gerr)
				}
				continue
			}
			if len(got.Files) != len(want.File) {
				t.Fatalf("in memory %v: %d records, archive/zip %d", mem, len(got.Files), len(want.File))
			}
			for i, w := range want.File {
				g := &got.Files[i]
				if string(g.Name) != w.Name || g.Method != w.Method || g.CompressedSize64 != w.CompressedSize64 || g.UncompressedSize64 != w.UncompressedSize64 {
					t.Fatalf("record %d: %q %d %d %d, archive/zip %q %d %d %d", i, g.Name, g.Method, g.CompressedSize64, g.UncompressedSize64, w.Name, w.Method, w.CompressedSize64, w.UncompressedSize64)
				}
				goff, gerr := g.DataOffset()
				woff, werr := w.DataOffset()
				if goff != woff || (gerr == nil) != (werr == nil) {
					t.Fatalf("record %q: data offset %d, %v; archive/zip %d, %v", w.Name, goff, gerr, woff, werr)
				}
				if got.Find(w.Name) == nil {
					t.Fatalf("record %q not found by name", w.Name)
				}
			}
			got.Release()
		}
	})
}

// TestZipDirAllocs: reading an embedded archive's directory allocates nothing per archive
// once its buffers are recycled (what a DCP data file of 300 000 archives needs).
func TestZipDirAllocs(t *testing.T) {
	b, err := os.ReadFile("../../testdata/torch/protocol4.pt")
	if err != nil {
		t.Skip(err)
	}
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops recycled buffers")
	}
	r := bytes.NewReader(b)
	for _, mem := range []bool{true, false} {
		var in []byte
		if mem {
			in = b
		}
		n := testing.AllocsPerRun(100, func() {
			z, err := Read(r, in, int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			z.Release()
		})
		if n > 0 {
			t.Errorf("in memory %v: %.1f allocations per archive", mem, n)
		}
	}
}

// readLog records the lengths of the reads made through it.
type readLog struct {
	r    *bytes.Reader
	lens []int
}

func (l *readLog) ReadAt(p []byte, off int64) (int, error) {
	l.lens = append(l.lens, len(p))
	return l.r.ReadAt(p, off)
}

// TestZip64LayoutFromTail: the zip64 locator and end record torch writes before the end
// record are reported in the Layout without a read of their own — they lie in the block
// read to find the end record — so an archive inside a remote file costs no extra round
// trip for them.
func TestZip64LayoutFromTail(t *testing.T) {
	b, err := os.ReadFile("../../testdata/torch/protocol4.pt")
	if err != nil {
		t.Fatal(err)
	}
	log := &readLog{r: bytes.NewReader(b)}
	z, err := Read(log, nil, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Release()
	if z.Layout.Zip64Loc < 0 || z.Layout.Zip64Len == 0 || z.Layout.Zip64Records != uint64(len(z.Files)) {
		t.Fatalf("zip64 records of a torch archive not found: %+v", z.Layout)
	}
	for _, n := range log.lens {
		if n == directory64LocLen || n == directory64EndLen {
			t.Errorf("reads %v: a read of a zip64 record's %d bytes", log.lens, n)
		}
	}
}
