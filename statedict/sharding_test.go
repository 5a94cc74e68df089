package statedict

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// arange is a float32 storage holding 0, 1, 2, … n-1.
func arange(n int) *Storage {
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(i))
	}
	return NewMappedStorage("s", "cpu", Float32, b)
}

// elementsOf reads back the element values of contiguous float32 bytes.
func elementsOf(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

// naiveBox lists the storage indices of the box of a view, row-major, by plain indexing.
func naiveBox(t *Tensor, off, size []int64) []uint32 {
	var out []uint32
	idx := make([]int64, len(size))
	for _, s := range size {
		if s == 0 {
			return nil
		}
	}
	for {
		e := t.Offset
		for d := range idx {
			e += (off[d] + idx[d]) * t.Strides[d]
		}
		out = append(out, uint32(e))
		d := len(idx) - 1
		for ; d >= 0; d-- {
			if idx[d]++; idx[d] < size[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return out
		}
	}
}

func TestBoxContiguous(t *testing.T) {
	base := &Tensor{DType: Float32, Shape: []int64{5, 7, 3}, Strides: []int64{21, 3, 1}, Storage: arange(5 * 7 * 3)}
	// The same storage seen transposed (dims 0 and 2 swapped) and with a storage offset.
	transposed := &Tensor{DType: Float32, Shape: []int64{3, 7, 4}, Strides: []int64{1, 3, 21}, Offset: 21, Storage: base.Storage}
	cases := []struct {
		name      string
		t         *Tensor
		off, size []int64
		contig    bool // the box is contiguous in the storage
	}{
		{"whole", base, []int64{0, 0, 0}, []int64{5, 7, 3}, true},
		{"rows", base, []int64{2, 0, 0}, []int64{2, 7, 3}, true},
		{"last row, uneven", base, []int64{4, 0, 0}, []int64{1, 7, 3}, true},
		{"columns", base, []int64{0, 3, 0}, []int64{5, 2, 3}, false},
		{"inner", base, []int64{1, 2, 1}, []int64{3, 4, 2}, false},
		{"empty", base, []int64{5, 0, 0}, []int64{0, 7, 3}, true},
		{"transposed rows", transposed, []int64{1, 0, 0}, []int64{2, 7, 4}, false},
		{"transposed box", transposed, []int64{0, 5, 1}, []int64{3, 2, 3}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := c.t.Box(c.off, c.size)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Validate(); err != nil {
				t.Fatal(err)
			}
			ct, err := v.Contiguous()
			if err != nil {
				t.Fatal(err)
			}
			if (ct == v) != c.contig && v.NumEl() > 0 {
				t.Errorf("Contiguous returned the view itself: %v, want %v", ct == v, c.contig)
			}
			want := naiveBox(c.t, c.off, c.size)
			got, err := ct.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if g := elementsOf(got); !equalU32(g, want) {
				t.Fatalf("box bytes %v, want %v", g, want)
			}
			// Reads at any offset, on element boundaries or not, agree with the whole.
			start := ct.Offset * 4 // a contiguous view is read from its storage directly
			for off := int64(0); off < int64(len(got)); off += 7 {
				for _, n := range []int64{1, 3, 4, 9, 64} {
					p := make([]byte, n)
					k, err := ct.Storage.ReadAt(p, start+off)
					end := min(off+n, int64(len(got)))
					if ct == v {
						k = min(k, int(end-off))
					}
					if int64(k) != end-off || (err != nil && end == off+n) {
						t.Fatalf("ReadAt(%d bytes, %d) = %d, %v", n, off, k, err)
					}
					if !bytes.Equal(p[:k], got[off:end]) {
						t.Fatalf("ReadAt(%d bytes, %d) = %x, want %x", n, off, p[:k], got[off:end])
					}
				}
			}
		})
	}
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBoxErrors(t *testing.T) {
	base := &Tensor{DType: Float32, Shape: []int64{4, 4}, Strides: []int64{4, 1}, Storage: arange(16)}
	packed := &Tensor{DType: QUInt4x2, Shape: []int64{8}, Strides: []int64{1}, Storage: NewMappedStorage("p", "cpu", QUInt4x2, make([]byte, 4))}
	for _, c := range []struct {
		t         *Tensor
		off, size []int64
		want      string
	}{
		{base, []int64{0}, []int64{4}, "1 offsets"},
		{base, []int64{3, 0}, []int64{2, 4}, "outside"},
		{base, []int64{-1, 0}, []int64{1, 4}, "outside"},
		{packed, []int64{0}, []int64{4}, "packed"},
	} {
		if _, err := c.t.Box(c.off, c.size); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Box(%v, %v) = %v, want an error saying %q", c.off, c.size, err, c.want)
		}
	}
}

// TestContiguousFixup: a big-endian, negated view is gathered as its logical value.
func TestContiguousFixup(t *testing.T) {
	b := make([]byte, 4*6)
	for i := range 6 {
		binary.BigEndian.PutUint32(b[4*i:], uint32(i+1))
	}
	st := NewMappedStorage("be", "cpu", Int32, b)
	st.BigEndian = true
	x := &Tensor{DType: Int32, Shape: []int64{3, 2}, Strides: []int64{1, 3}, Storage: st, Neg: true}
	ct, err := x.Contiguous()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ct.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := x.Bytes()
	if !bytes.Equal(got, want) {
		t.Fatalf("gathered %x, WriteTo %x", got, want)
	}
}

func TestTensorShardingCheck(t *testing.T) {
	x := &Tensor{DType: Float32, Shape: []int64{5, 4}, Strides: []int64{4, 1}, Storage: arange(20)}
	p := func(o0, s0 int64, ranks ...int) Piece {
		return Piece{Offsets: []int64{o0, 0}, Sizes: []int64{s0, 4}, Ranks: ranks}
	}
	for _, c := range []struct {
		ts   TensorSharding
		want string
	}{
		{TensorSharding{Pieces: []Piece{p(0, 2, 0), p(2, 2, 1), p(4, 1, 2), p(5, 0, 3)}}, ""},
		{TensorSharding{Pieces: []Piece{p(0, 3, 0), p(2, 3, 1, 2, 3)}}, "overlap"},
		{TensorSharding{Pieces: []Piece{p(0, 2, 0), p(2, 2, 1, 2, 3)}}, "16 elements"},
		{TensorSharding{Pieces: []Piece{p(0, 5, 0, 1, 2)}}, "rank 3 holds 0"},
		{TensorSharding{Pieces: []Piece{p(0, 5, 0, 1, 2, 3, 4)}}, "rank 4 is not"},
		{TensorSharding{Pieces: []Piece{p(3, 3, 0, 1, 2, 3)}}, "outside"},
	} {
		err := c.ts.Check(x, 4)
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%v) = %v, want %q", c.ts.Pieces, err, c.want)
		}
	}
	s := &Sharding{Ranks: 3}
	if got := s.Of(x); len(got.Pieces) != 1 || len(got.Pieces[0].Ranks) != 3 || got.Check(x, 3) != nil {
		t.Errorf("an unsharded tensor: %+v", got)
	}
}

func TestPieceRun(t *testing.T) {
	shape := []int64{4, 3, 5}
	for _, c := range []struct {
		off, size []int64
		start, n  int64
		ok        bool
	}{
		{[]int64{0, 0, 0}, []int64{4, 3, 5}, 0, 60, true},
		{[]int64{2, 0, 0}, []int64{2, 3, 5}, 30, 30, true},
		{[]int64{1, 1, 0}, []int64{1, 2, 5}, 20, 10, true},
		{[]int64{3, 2, 1}, []int64{1, 1, 3}, 56, 3, true},
		{[]int64{0, 1, 0}, []int64{2, 2, 5}, 0, 0, false},
		{[]int64{0, 0, 1}, []int64{4, 3, 2}, 0, 0, false},
		{[]int64{4, 0, 0}, []int64{0, 3, 5}, 0, 0, true},
	} {
		start, n, ok := Piece{Offsets: c.off, Sizes: c.size}.Run(shape)
		if start != c.start || n != c.n || ok != c.ok {
			t.Errorf("Run(%v, %v) = %d, %d, %v; want %d, %d, %v", c.off, c.size, start, n, ok, c.start, c.n, c.ok)
		}
	}
}
