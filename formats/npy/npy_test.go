package npy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// file builds an .npy header of the given version around the literal.
func file(major byte, literal string) []byte {
	b := []byte(Magic)
	b = append(b, major, 0)
	if major == 1 {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(literal)))
	} else {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(literal)))
	}
	return append(b, literal...)
}

// TestReadHeader: headers as numpy writes them, in each version, say whether the data is a
// pickle; the ones numpy refuses are errors, the ones this reader does not follow are
// MaybeObjects (the scan then reads the data as a pickle).
func TestReadHeader(t *testing.T) {
	for _, c := range []struct {
		literal string
		major   byte
		want    Objects
		err     bool
	}{
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }          \n", 1, NoObjects, false},
		{"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }\n", 1, HasObjects, false},
		{"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }\n", 2, HasObjects, false},
		{"{'descr': '<U5', 'fortran_order': True, 'shape': (), }\n", 3, NoObjects, false},
		{"{'descr': [('a', '<f4'), ('b', '|O')], 'fortran_order': False, 'shape': (2,), }\n", 1, HasObjects, false},
		{"{'descr': [('a', '<f4'), ('b', '<i8', (2,))], 'fortran_order': False, 'shape': (2,), }\n", 1, NoObjects, false},
		{"{'descr': ('|O', (3,)), 'fortran_order': False, 'shape': (2,)}\n", 1, HasObjects, false},
		{"{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (2,)}", 1, NoObjects, false},
		{"{'descr': 'object', 'fortran_order': False, 'shape': (2,)}", 1, MaybeObjects, false},
		{"{'descr': 'i4,O', 'fortran_order': False, 'shape': (2,)}", 1, MaybeObjects, false},
		{"{'descr': '<f4', # a comment\n 'fortran_order': False, 'shape': (2,)}", 1, MaybeObjects, false},
		{"{'descr': '<f4', 'shape': (2,)}", 1, 0, true},
		{"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", 1, 0, true},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", 1, 0, true},
		{"['descr']", 1, 0, true},
	} {
		b := file(c.major, c.literal)
		h, err := ReadHeader(b, int64(len(b)))
		if c.err {
			var e *ckpterr.FormatError
			if !errors.As(err, &e) || e.Format != Format || !errors.Is(err, ckpterr.ErrCorrupt) {
				t.Errorf("%q: %v, want a corrupt npy *ckpterr.FormatError", c.literal, err)
			}
			continue
		}
		if err != nil || h.Objects != c.want || h.Data != int64(len(b)) {
			t.Errorf("%q: %+v, %v; want %v with data at %d", c.literal, h, err, c.want, len(b))
		}
	}
	for _, b := range [][]byte{[]byte("\x93NUMPY\x04\x00\x10\x00"), file(1, "{}")[:9], append(file(1, "x")[:8], 0xff, 0xff)} {
		if _, err := ReadHeader(b, int64(len(b))); err == nil {
			t.Errorf("%q: no error", b)
		}
	}
}

// TestReadHeaderNumpy reads the headers numpy itself wrote (the .npy fixtures of
// testdata/hostile/round3, written by numpy 2.4 in the oracle).
func TestReadHeaderNumpy(t *testing.T) {
	for name, want := range map[string]Objects{"numpy_object.npy": HasObjects, "numpy_structured.npy": HasObjects, "numpy_folder/weights.npy": NoObjects} {
		b, err := os.ReadFile(filepath.Join("../../testdata/hostile/round3", name))
		if err != nil {
			t.Fatal(err)
		}
		h, err := ReadHeader(b, int64(len(b)))
		if err != nil || h.Objects != want || h.Data%64 != 0 {
			t.Errorf("%s: %+v, %v; want %v", name, h, err, want)
		}
	}
}

// FuzzReadHeader: any bytes give a header or a *ckpterr.FormatError, never a panic; the data offset is
// inside the file.
func FuzzReadHeader(f *testing.F) {
	for _, l := range []string{"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }\n", "{'descr': [('a', '<f4'), ('b', ('|O', (2,)))], 'fortran_order': True, 'shape': (1, 2)}", `{"descr": "<f8", "fortran_order": False, "shape": ()}`} {
		f.Add(file(1, l))
		f.Add(file(3, l))
	}
	for _, name := range []string{"numpy_object.npy", "numpy_structured.npy", "numpy_folder/weights.npy"} {
		if b, err := os.ReadFile(filepath.Join("../../testdata/hostile/round3", name)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHeader(b, int64(len(b)))
		if err != nil {
			var e *ckpterr.FormatError
			if !errors.As(err, &e) {
				t.Fatalf("error %v", err)
			}
			return
		}
		if h.Data < 10 || h.Data > int64(len(b)) || h.Objects < NoObjects || h.Objects > MaybeObjects {
			t.Fatalf("%+v for %d bytes", h, len(b))
		}
		_ = fmt.Sprint(h)
	})
}
