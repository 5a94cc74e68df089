package statedict

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

// TestPyFloat compares PyFloat with CPython's repr() of the same float64 bits
// (testdata/pyfloat.json, written by testdata/gen_pyfloat.py).
func TestPyFloat(t *testing.T) {
	b, err := os.ReadFile("testdata/pyfloat.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Bits uint64 `json:"bits"`
		Repr string `json:"repr"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 200 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		if got := PyFloat(math.Float64frombits(c.Bits)); got != c.Repr {
			t.Errorf("PyFloat(%#x) = %s, Python says %s", c.Bits, got, c.Repr)
		}
	}
}

func TestDTypeRegistry(t *testing.T) {
	for _, d := range DTypes() {
		if p, ok := ParseDType("torch." + d.String()); !ok || p != d {
			t.Errorf("%s does not parse back", d)
		}
		if s := d.Safetensors(); s != "" {
			if p, ok := DTypeForSafetensors(s); !ok || p != d {
				t.Errorf("%s: safetensors %s maps to %s", d, s, p)
			}
		}
		if c := d.StorageClass(); c != "" {
			if p, ok := DTypeForStorage(c); !ok || p != d {
				t.Errorf("%s: storage class %s maps to %s", d, c, p)
			}
		}
		if d.Size() == 0 {
			t.Errorf("%s has no size", d)
		}
	}
	for alias, want := range map[string]DType{"half": Float16, "long": Int64, "cfloat": Complex64} {
		if d, _ := ParseDType(alias); d != want {
			t.Errorf("alias %s = %s", alias, d)
		}
	}
}

func view(size int64, dt DType, off int64, shape, strides []int64) *Tensor {
	st := NewMappedStorage("s", "cpu", dt, make([]byte, size))
	return &Tensor{DType: dt, Shape: shape, Strides: strides, Offset: off, Storage: st}
}

// TestValidate: views that reach outside their storage or overflow are refused, so reading
// a hostile checkpoint can never index out of bounds.
func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		t    *Tensor
		err  string
	}{
		{"fits", view(24, Float32, 0, []int64{2, 3}, []int64{3, 1}), ""},
		{"offset past end", view(24, Float32, 1, []int64{2, 3}, []int64{3, 1}), "reaches byte 28 of a 24-byte storage"},
		{"transposed fits", view(24, Float32, 0, []int64{3, 2}, []int64{1, 3}), ""},
		{"stride too big", view(24, Float32, 0, []int64{2, 3}, []int64{4, 1}), "reaches byte 28"},
		{"empty anywhere", view(0, Float32, 100, []int64{0, 3}, []int64{3, 1}), ""},
		{"negative size", view(24, Float32, 0, []int64{-1}, []int64{1}), "negative size"},
		{"negative stride", view(24, Float32, 0, []int64{2}, []int64{-1}), "negative stride"},
		{"shape overflow", view(24, Float32, 0, []int64{1 << 40, 1 << 40}, []int64{0, 0}), "overflows"},
		{"stride overflow", view(24, Float32, 0, []int64{2, 2}, []int64{math.MaxInt64 / 2, 1}), "overflow"},
		{"rank mismatch", view(24, Float32, 0, []int64{2, 3}, []int64{1}), "1 strides for 2 dims"},
		{"packed view", view(3, QUInt4x2, 1, []int64{5}, []int64{1}), "packed dtypes must be dense"},
	}
	for _, c := range cases {
		err := c.t.Validate()
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		}
	}
}

// TestWriteToGathers checks strided reads against the element order they must produce,
// through both the mapped path and the ReaderAt path with a small buffer crossing.
func TestWriteToGathers(t *testing.T) {
	data := make([]byte, 24)
	for i := range data {
		data[i] = byte(i)
	}
	base := NewMappedStorage("s", "cpu", Int16, data)
	reader := NewReaderStorage("r", "cpu", Int16, bytes.NewReader(data), 0, 24)
	for _, st := range []*Storage{base, reader} {
		// int16 [3,4] viewed transposed [4,3] with offset 0: element (i,j) = storage[j*4+i].
		tr := &Tensor{DType: Int16, Shape: []int64{4, 3}, Strides: []int64{1, 4}, Storage: st}
		var b bytes.Buffer
		if _, err := tr.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		want := []byte{0, 1, 8, 9, 16, 17, 2, 3, 10, 11, 18, 19, 4, 5, 12, 13, 20, 21, 6, 7, 14, 15, 22, 23}
		if !bytes.Equal(b.Bytes(), want) {
			t.Errorf("%s transposed: %v", st.Key, b.Bytes())
		}
		// Negated int16 view: two's complement of each element.
		neg := &Tensor{DType: Int16, Shape: []int64{2}, Strides: []int64{1}, Storage: st, Neg: true}
		b.Reset()
		neg.WriteTo(&b)
		if !bytes.Equal(b.Bytes(), []byte{0x00, 0xff, 0xfe, 0xfc}) { // -(0x0100), -(0x0302)
			t.Errorf("%s neg: %x", st.Key, b.Bytes())
		}
	}
}
