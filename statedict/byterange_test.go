package statedict

import (
	"bytes"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"strings"
	"testing"
)

// rangeSink records what reaches it as bytes and as ranges.
type rangeSink struct {
	bytes.Buffer
	ranges []Range
}

func (s *rangeSink) WriteRange(r Range) (int64, error) {
	s.ranges = append(s.ranges, r)
	return r.Len(), nil
}

// TestWriteRangeSrc: a range held by a reader reaches a RangeWriter whole, with the sums of
// the writers in between added; a plain writer gets its bytes (copied through a bounded
// buffer, several reads for a range larger than it) with every sum fed; a reader short of
// the range is an error, not a short copy.
func TestWriteRangeSrc(t *testing.T) {
	data := make([]byte, 3*copyBuf+123)
	for i := range data {
		data[i] = byte(i * 13)
	}
	src := bytes.NewReader(data)
	r := Range{Src: src, Off: 100, N: int64(len(data)) - 200}
	want := data[100 : len(data)-100]

	sink := &rangeSink{}
	tee := &Tee{W: &Counter{W: sink}, Sum: crc32.NewIEEE()}
	if n, err := WriteRange(tee, r); err != nil || n != r.N || len(sink.ranges) != 1 || sink.ranges[0].Src != src || len(sink.ranges[0].Sums) != 1 {
		t.Fatalf("through a RangeWriter: %d, %v, %+v", n, err, sink.ranges)
	}

	var plain bytes.Buffer
	sum := crc32.NewIEEE()
	tee = &Tee{W: &plain, Sum: sum}
	r2 := r
	r2.Sums = []hash.Hash{crc32.NewIEEE()}
	if n, err := WriteRange(tee, r2); err != nil || n != r.N || !bytes.Equal(plain.Bytes(), want) {
		t.Fatalf("through a plain writer: %d, %v, equal %v", n, err, bytes.Equal(plain.Bytes(), want))
	}
	if sum.Sum32() != crc32.ChecksumIEEE(want) || r2.Sums[0].(hash.Hash32).Sum32() != crc32.ChecksumIEEE(want) {
		t.Error("a sum was not fed every byte")
	}

	short := Range{Src: strings.NewReader("only this"), N: 100}
	if _, err := WriteRange(io.Discard, short); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a reader short of the range: %v", err)
	}
}

// TestRangeSlice: a part of a range holds the same bytes as the range at the same offsets,
// whether in memory, in a file or in a reader, and keeps its sums.
func TestRangeSlice(t *testing.T) {
	data := []byte("0123456789abcdef")
	sums := []hash.Hash{crc32.NewIEEE()}
	for _, r := range []Range{
		{Data: data[2:], Path: "f", Off: 2, Sums: sums},
		{Src: bytes.NewReader(data), Off: 2, N: 14, Sums: sums},
	} {
		s := r.Slice(3, 9)
		got := make([]byte, s.Len())
		if err := s.ReadAt(got, 0); err != nil || string(got) != "56789a" || s.Off != 5 || len(s.Sums) != 1 {
			t.Errorf("%+v: slice reads %q (%v) at offset %d", r, got, err, s.Off)
		}
	}
}

// lender is a statedict.Lender over data that lends at most most bytes at a time and
// records what it was asked.
type lender struct {
	data   []byte
	most   int64
	asked  [][2]int64
	leased int
	err    error
}

func (l *lender) ReadAt(p []byte, off int64) (int, error) { return copy(p, l.data[off:]), nil }

func (l *lender) Lend(off, n int64) ([]byte, func(), bool, error) {
	l.asked = append(l.asked, [2]int64{off, n})
	if l.err != nil {
		return nil, nil, false, l.err
	}
	l.leased++
	return l.data[off : off+min(n, l.most)], func() { l.leased-- }, true, nil
}

// TestLend: a range lends through a Storage whose reader lends, with offsets moved by the
// range's and the storage's, and never past either's end; a storage or a source that does
// not lend says so, and a lender's error names the storage and the byte.
func TestLend(t *testing.T) {
	data := []byte("0123456789abcdefghij")
	l := &lender{data: data, most: 4}
	st := NewReaderStorage("s0", "cpu", Uint8, l, 3, 15) // "3456789abcdefgh"
	r := Range{Src: st, Off: 2, N: 13}.Slice(1, 9)       // storage bytes 3..11: "6789abcd"
	var got []byte
	for done := int64(0); done < r.Len(); {
		b, release, ok, err := r.Lend(done, r.Len()-done)
		if !ok || err != nil || len(b) == 0 {
			t.Fatalf("lend at %d: %q ok %v %v", done, b, ok, err)
		}
		got = append(got, b...)
		release()
		done += int64(len(b))
	}
	if string(got) != "6789abcd" || l.leased != 0 {
		t.Errorf("lent %q, %d not released", got, l.leased)
	}
	// Asked at the storage's offset in the object, for no more than the range holds.
	if want := [][2]int64{{6, 8}, {10, 4}}; fmt.Sprint(l.asked) != fmt.Sprint(want) {
		t.Errorf("asked %v, want %v", l.asked, want)
	}
	if _, _, ok, err := st.Lend(14, 100); !ok || err != nil || fmt.Sprint(l.asked[len(l.asked)-1]) != "[17 1]" {
		t.Errorf("lend of the storage's last byte: ok %v %v, asked %v", ok, err, l.asked[len(l.asked)-1])
	}
	for _, c := range []struct {
		name string
		r    Range
	}{
		{"reader that does not lend", Range{Src: bytes.NewReader(data), N: 5}},
		{"mapped storage", Range{Src: NewMappedStorage("m", "cpu", Uint8, data), N: 5}},
		{"past the storage", Range{Src: st, Off: 15, N: 1}},
	} {
		if b, _, ok, err := c.r.Lend(0, 5); ok || err != nil || b != nil {
			t.Errorf("%s: lent %q ok %v %v", c.name, b, ok, err)
		}
	}
	l.err = io.ErrUnexpectedEOF
	if _, _, _, err := (Range{Src: st, Off: 4, N: 2}).Lend(0, 2); err == nil || !strings.Contains(err.Error(), `storage "s0" at byte 7`) {
		t.Errorf("lender's error: %v", err)
	}
}

// planner is an io.ReaderAt that records what it is told will be read (ReadPlanner).
type planner struct {
	*bytes.Reader
	told [][2]int64
}

func (p *planner) WillRead(off, n int64) { p.told = append(p.told, [2]int64{off, n}) }

// TestWriteToPlans: writing a contiguous tensor of a storage read from a reader tells the
// reader which bytes it is about to read whole, at their offsets in the reader, whether
// they pass as they are or are converted (a byte-swap); a mapped storage tells no one.
func TestWriteToPlans(t *testing.T) {
	data := []byte("0123456789abcdefghijklmnopqrstuv")
	for _, bigEndian := range []bool{false, true} {
		p := &planner{Reader: bytes.NewReader(data)}
		st := NewReaderStorage("s", "cpu", Int16, p, 4, 24) // bytes 4..27
		st.BigEndian = bigEndian
		tt := &Tensor{Shape: []int64{5}, Strides: []int64{1}, Offset: 3, Storage: st, DType: Int16}
		var sink bytes.Buffer
		if n, err := tt.WriteTo(&sink); err != nil || n != 10 {
			t.Fatalf("big-endian %v: wrote %d, %v", bigEndian, n, err)
		}
		if fmt.Sprint(p.told) != "[[10 10]]" {
			t.Errorf("big-endian %v: told %v, want [[10 10]]", bigEndian, p.told)
		}
	}
}
