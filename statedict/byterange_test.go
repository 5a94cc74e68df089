package statedict

import (
	"bytes"
	"errors"
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
