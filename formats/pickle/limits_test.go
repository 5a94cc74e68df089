package pickle

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// allocDuring returns the bytes allocated while f runs.
func allocDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestLimits(t *testing.T) {
	small := Limits{MaxMemo: 3, MaxStack: 10, MaxMarkDepth: 5, MaxStringLen: 16, MaxBytesLen: 16,
		MaxAlloc: 4096, MaxLongBytes: 16, MaxContainerItems: 4}
	tests := []struct {
		name   string
		in     []byte
		lim    Limits
		limit  string // LimitError.Limit, or "" for a truncation error
		offset int64
		op     string
	}{
		{"BINUNICODE8 2^62", new(pb).op(opBinUnicode8).u64(1 << 62).Bytes(), Limits{}, "MaxStringLen", 0, "BINUNICODE8"},
		{"BINUNICODE8 2^64-1", new(pb).op(opBinUnicode8).u64(^uint64(0)).Bytes(), Limits{}, "MaxStringLen", 0, "BINUNICODE8"},
		{"BINBYTES8 2^62", new(pb).op(opBinBytes8).u64(1 << 62).Bytes(), Limits{}, "MaxBytesLen", 0, "BINBYTES8"},
		{"BYTEARRAY8 2^62", new(pb).op(opNone, opPop, opByteArray8).u64(1 << 62).Bytes(), Limits{}, "MaxBytesLen", 2, "BYTEARRAY8"},
		{"BINUNICODE 4 GiB", new(pb).op(opBinUnicode).u32(^uint32(0)).Bytes(), Limits{}, "MaxStringLen", 0, "BINUNICODE"},
		{"BINSTRING 2 GiB", new(pb).op(opBinString).u32(1<<31 - 1).Bytes(), Limits{}, "MaxStringLen", 0, "BINSTRING"},
		{"BINUNICODE within limit but truncated", new(pb).op(opBinUnicode).u32(1 << 20).op('a').Bytes(), Limits{}, "", 0, "BINUNICODE"},
		{"BINBYTES8 2^62 raised limits", new(pb).op(opBinBytes8).u64(1 << 62).Bytes(), Limits{MaxBytesLen: 1 << 62}, "", 0, "BINBYTES8"},
		{"LONG4 2 GiB", new(pb).op(opLong4).u32(1<<31 - 1).Bytes(), Limits{}, "MaxLongBytes", 0, "LONG4"},
		{"LONG1 small limit", append(new(pb).op(opLong1, 17).Bytes(), make([]byte, 17)...), small, "MaxLongBytes", 0, "LONG1"},
		{"LONG text digits", []byte("L" + strings.Repeat("9", 50) + "L\n."), Limits{MaxLongBytes: 16}, "MaxLongBytes", 0, "LONG"},
		{"INT text digits", []byte("I" + strings.Repeat("9", 50) + "\n."), Limits{MaxLongBytes: 16}, "MaxLongBytes", 0, "INT"},
		{"FRAME 2^62", new(pb).proto(4).op(opFrame).u64(1 << 62).Bytes(), Limits{}, "", 2, "FRAME"},
		{"MaxStringLen", new(pb).str(strings.Repeat("a", 17)).stop(), small, "MaxStringLen", 0, "BINUNICODE"},
		{"MaxStringLen text line", []byte("V" + strings.Repeat("a", 17) + "\n."), small, "MaxStringLen", 0, "UNICODE"},
		{"MaxStringLen text line without newline", []byte("V" + strings.Repeat("a", 17)), small, "MaxStringLen", 0, "UNICODE"},
		{"MaxBytesLen", new(pb).sbytes(make([]byte, 17)).stop(), small, "MaxBytesLen", 0, "SHORT_BINBYTES"},
		{"MaxMemo", []byte("Nq\x00q\x01q\x01q\x02q\x03."), small, "MaxMemo", 9, "BINPUT"},
		{"MaxMemo sparse", []byte("Nr\xff\xff\xff\xffr\xfe\xff\xff\xffq\x00q\x05."), small, "MaxMemo", 13, "BINPUT"},
		{"MaxStack", []byte(strings.Repeat("N", 11) + "."), small, "MaxStack", 10, "NONE"},
		{"MaxMarkDepth", []byte(strings.Repeat("(", 6) + "."), small, "MaxMarkDepth", 5, "MARK"},
		{"MaxAlloc", []byte(strings.Repeat("U\x0aaaaaaaaaaa0", 20) + "N."), Limits{MaxAlloc: 100}, "MaxAlloc", 13 * 5, "SHORT_BINSTRING"},
		{"MaxContainerItems TUPLE", []byte("(NNNNNt."), small, "MaxContainerItems", 6, "TUPLE"},
		{"MaxContainerItems APPENDS", []byte("](NNNe(NNe."), small, "MaxContainerItems", 9, "APPENDS"},
		{"MaxContainerItems SETITEMS", []byte("}(K\x01NK\x02NK\x03NK\x04NK\x05Nu."), Limits{MaxContainerItems: 4}, "MaxContainerItems", 17, "SETITEMS"},
		{"MaxContainerItems FROZENSET", []byte("(K\x01K\x02K\x03K\x04K\x05\x91."), small, "MaxContainerItems", 11, "FROZENSET"},
		// Depth is tracked as values are built: refused at the level past the limit.
		{"MaxDepth TUPLE1", []byte(")\x85\x85\x85\x85."), Limits{MaxDepth: 3}, "MaxDepth", 4, "TUPLE1"},
		{"MaxDepth through the memo", []byte(")q\x000" + strings.Repeat("h\x00\x85q\x000", 4) + "h\x00."), Limits{MaxDepth: 3}, "MaxDepth", 24, "TUPLE1"},
		{"MaxDepth APPEND", []byte("]]]]]aaaa."), Limits{MaxDepth: 3}, "MaxDepth", 8, "APPEND"},
		{"MaxDepth REDUCE", []byte("\x80\x04\x8c\x01m\x8c\x01f\x93q\x00)q\x010" + strings.Repeat("h\x00h\x01\x85Rq\x010", 2) + "h\x01."), Limits{MaxDepth: 3}, "MaxDepth", 29, "REDUCE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := allocDuring(func() { _, err = NewDecoder(tc.in, Options{Limits: tc.lim}).Decode() })
			var perr *ckpterr.FormatError
			if !errors.As(err, &perr) || perr.Offset != tc.offset || perr.Item != tc.op {
				t.Fatalf("got %v, want *ckpterr.FormatError at %d (%s)", err, tc.offset, tc.op)
			}
			var le *LimitError
			switch {
			case tc.limit == "" && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Errorf("got %v, want unexpected EOF", err)
			case tc.limit != "" && (!errors.As(err, &le) || le.Limit != tc.limit || !errors.Is(err, ErrLimit)):
				t.Errorf("got %v, want LimitError %s", err, tc.limit)
			}
			if n > 1<<20 {
				t.Errorf("allocated %d bytes", n)
			}
		})
	}
}

// A memo index of 2^32-1 lives in the sparse memo: no large allocation.
func TestSparseMemo(t *testing.T) {
	in := []byte("K\x07r\xff\xff\xff\xff0j\xff\xff\xff\xff.")
	var v Value
	if n := allocDuring(func() { v = decodeOne(t, in, Options{}) }); n > 1<<16 {
		t.Errorf("allocated %d bytes", n)
	}
	if v != int64(7) {
		t.Errorf("got %v", v)
	}
	// Filling the dense memo up to an index held sparsely moves it over.
	in = []byte("K\x01q\x01K\x00q\x00h\x01.")
	if v := decodeOne(t, in, Options{}); v != int64(1) {
		t.Errorf("got %v", v)
	}
}

// The allocation budget is shared by the pickles of one Decoder.
func TestMaxAllocAcrossPickles(t *testing.T) {
	one := new(pb).str(strings.Repeat("a", 600)).stop()
	data := append(append([]byte{}, one...), one...)
	d := NewDecoder(data, Options{Limits: Limits{MaxAlloc: 1000}})
	if _, err := d.Decode(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Decode(); !errors.Is(err, ErrLimit) {
		t.Fatalf("second pickle: %v, want limit error", err)
	}
}

func TestDefaultLimits(t *testing.T) {
	l := DefaultLimits()
	if l.MaxAlloc != 1<<30 || l.MaxStringLen != 256<<20 || l.MaxMemo != 1<<24 || l.MaxStack != 1<<20 || l.MaxMarkDepth != 10000 {
		t.Errorf("DefaultLimits() = %+v", l)
	}
	if (Limits{}).withDefaults() != l {
		t.Error("zero Limits do not take the defaults")
	}
}
