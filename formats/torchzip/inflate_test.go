package torchzip

import (
	"archive/zip"
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/internal/zipdir"
	"github.com/ckpt-dev/ckpt/statedict"
)

// rezip copies a torch zip record by record, deflating the records whose name contains
// deflate, and replacing the bytes of records for which repl returns some.
func rezip(t *testing.T, src []byte, deflate string, repl func(name string) []byte) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(src), int64(len(src)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	for _, f := range zr.File {
		rc, _ := f.Open()
		var b bytes.Buffer
		b.ReadFrom(rc)
		rc.Close()
		data := b.Bytes()
		if r := repl(f.Name); r != nil {
			data = r
		}
		m := zip.Store
		if strings.Contains(f.Name, deflate) {
			m = zip.Deflate
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f.Name, Method: m})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	zw.Close()
	return out.Bytes()
}

// tensorBytes returns every tensor's contiguous bytes by name.
func tensorBytes(t *testing.T, root statedict.Value) map[string][]byte {
	t.Helper()
	ts, err := (&statedict.Checkpoint{Root: root}).Tensors()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, nt := range ts {
		var b bytes.Buffer
		if _, err := nt.Tensor.WriteTo(&b); err != nil {
			t.Fatalf("%s: %v", nt.Name, err)
		}
		out[nt.Name] = b.Bytes()
	}
	return out
}

// TestDeflatedStorages: a torch.save archive whose records were re-zipped deflated reads the
// same tensors (views of every kind, strided gathers included) as the stored original,
// inflating lazily; a record claiming more than deflate's data holds fails when read; one
// inflating beyond the ratio cap is refused when opened.
func TestDeflatedStorages(t *testing.T) {
	src, err := os.ReadFile("../../testdata/torch/views.pt")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Decode(src, "views.pt", 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(rezip(t, src, "/", func(string) []byte { return nil }), "deflated.pt", 0)
	if err != nil {
		t.Fatal(err)
	}
	w, g := tensorBytes(t, want), tensorBytes(t, got)
	if len(w) == 0 || len(w) != len(g) {
		t.Fatalf("%d tensors, want %d", len(g), len(w))
	}
	for name := range w {
		if !bytes.Equal(w[name], g[name]) {
			t.Errorf("%s differs when deflated", name)
		}
	}

	// A storage larger than the whole-inflation threshold streams, forward and backward.
	small, _ := os.ReadFile("../../testdata/torch/nocrc.pt")
	zr, _ := zip.NewReader(bytes.NewReader(small), int64(len(small)))
	var key string
	for _, f := range zr.File {
		if i := strings.Index(f.Name, "/data/"); i >= 0 && key == "" {
			key = f.Name
		}
	}
	big := make([]byte, inflateWhole+4096)
	rand.Read(big)
	arch := rezip(t, small, key, func(n string) []byte {
		if n == key {
			return big
		}
		return nil
	})
	z, err := zipdir.Read(bytes.NewReader(arch), arch, int64(len(arch)))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Release()
	for i := range z.Files {
		f := &z.Files[i]
		if string(f.Name) != key {
			continue
		}
		raw, off, err := rawRecord(source{data: arch, size: int64(len(arch))}, f, func(_ int64, err error) error { return err })
		if err != nil {
			t.Fatal(err)
		}
		in := newInflater(bytes.NewReader(raw), int64(len(raw)), int64(f.UncompressedSize64), off, key)
		for _, at := range []int64{inflateWhole, 10, inflateWhole + 4000, 0} {
			p := make([]byte, 96)
			if _, err := in.ReadAt(p, off+at); err != nil || !bytes.Equal(p, big[at:at+96]) {
				t.Fatalf("ReadAt %d: %v", at, err)
			}
		}
		// A directory that claims more than the stream holds fails at the read past it.
		short := newInflater(bytes.NewReader(raw), int64(len(raw)), int64(f.UncompressedSize64)+1000, off, key)
		p := make([]byte, 500)
		if _, err := short.ReadAt(p, off+int64(len(big))+100); !errors.Is(err, ckpterr.ErrCorrupt) {
			t.Fatalf("read past the stream: %v", err)
		}
	}

	// Through a reader that is not a mapping (an object in a bucket), opening reads the
	// directory and pickle, not the deflated record; reading the tensors streams it.
	cr := &countingReaderAt{r: bytes.NewReader(arch)}
	root, err := DecodeAt(cr, 0, int64(len(arch)), "remote.pt")
	if err != nil {
		t.Fatal(err)
	}
	if cr.n.Load() > 1<<20 {
		t.Errorf("opening read %d of the archive's %d bytes (its deflated record whole)", cr.n.Load(), len(arch))
	}
	mapped, err := Decode(arch, "mapped.pt", 0)
	if err != nil {
		t.Fatal(err)
	}
	read := tensorBytes(t, root)
	for name, b := range tensorBytes(t, mapped) {
		if !bytes.Equal(read[name], b) {
			t.Errorf("%s read through a reader differs from the mapped read", name)
		}
	}

	// 64 MiB of zeros deflates ~1000×: beyond the ratio cap.
	bomb := rezip(t, small, key, func(n string) []byte {
		if n == key {
			return make([]byte, 64<<20)
		}
		return nil
	})
	if _, err := Decode(bomb, "bomb.pt", 0); !errors.Is(err, ckpterr.ErrUnsupported) || !strings.Contains(err.Error(), "zip bomb") {
		t.Fatalf("deflate bomb: %v", err)
	}
}

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}
