package safetensors

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/storage"
)

// FuzzReadHeader feeds arbitrary files to ReadHeader and the tensor mapping of Open. It checks
// that they never panic, that every failure is a *ckpterr.FormatError inside the file, that an accepted
// layout tiles the file exactly, and that a header the writer can express (known dtypes)
// survives a write and re-read unchanged, bytes included.
func FuzzReadHeader(f *testing.F) {
	for _, pattern := range []string{"*.safetensors", "crafted/*.safetensors"} {
		files, err := filepath.Glob(filepath.Join(testdata, pattern))
		if err != nil {
			f.Fatal(err)
		}
		for _, name := range files {
			f.Add(must(os.ReadFile(name)))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		size := int64(len(b))
		checkErr := func(what string, err error) {
			var fe *ckpterr.FormatError
			if !errors.As(err, &fe) || fe.Offset < 0 || fe.Offset > size {
				t.Fatalf("%s: %v (%T), want a *ckpterr.FormatError within the %d-byte file", what, err, err, size)
			}
		}
		h, err := ReadHeader(bytes.NewReader(b), size)
		if err != nil {
			checkErr("ReadHeader", err)
			return
		}
		var end int64
		for _, ti := range h.Tensors {
			if ti.Begin != end || ti.End < ti.Begin {
				t.Fatalf("tensor %q at [%d, %d) after byte %d", ti.Name, ti.Begin, ti.End, end)
			}
			end = ti.End
		}
		if h.DataStart+end != size {
			t.Fatalf("tensors end at %d in a %d-byte file", h.DataStart+end, size)
		}
		if _, err := tensors("", storage.FromBytes(b), h); err != nil {
			checkErr("tensors", err)
		}
		for _, ti := range h.Tensors {
			if _, ok := DTypeBits(ti.DType); !ok {
				return
			}
		}
		var buf bytes.Buffer
		w, err := NewWriter(&buf, h.Tensors, h.Metadata)
		if err != nil {
			t.Fatalf("NewWriter on a valid header: %v", err)
		}
		for _, ti := range h.Tensors {
			if err := w.WriteTensor(ti.Name, bytes.NewReader(b[h.DataStart+ti.Begin:h.DataStart+ti.End])); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		out := buf.Bytes()
		h2, err := ReadHeader(bytes.NewReader(out), int64(len(out)))
		if err != nil {
			t.Fatalf("re-reading our own output: %v", err)
		}
		if !reflect.DeepEqual(h2.Metadata, h.Metadata) || len(h2.Tensors) != len(h.Tensors) {
			t.Fatalf("re-read metadata %q and %d tensors, want %q and %d", h2.Metadata, len(h2.Tensors), h.Metadata, len(h.Tensors))
		}
		for i, ti := range h.Tensors {
			t2 := h2.Tensors[i]
			if t2.Name != ti.Name || t2.DType != ti.DType || !reflect.DeepEqual(t2.Shape, ti.Shape) || t2.Begin != ti.Begin || t2.End != ti.End ||
				!bytes.Equal(out[h2.DataStart+t2.Begin:h2.DataStart+t2.End], b[h.DataStart+ti.Begin:h.DataStart+ti.End]) {
				t.Fatalf("tensor %d re-read as %+v, want %+v", i, t2, ti)
			}
		}
	})
}
