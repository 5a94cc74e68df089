package safetensors

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// file assembles a safetensors file from header text and data.
func file(hdr string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	return append(append(b, hdr...), data...)
}

// TestReadHeaderValid covers headers the reference accepts that the fixtures do not spell out.
func TestReadHeaderValid(t *testing.T) {
	f32 := func(name string, b, e int) string {
		return `"` + name + `":{"dtype":"F32","shape":[` + map[bool]string{true: "1", false: "0"}[e > b] +
			`],"data_offsets":[` + strconv.Itoa(b) + `,` + strconv.Itoa(e) + `]}`
	}
	tests := []struct {
		name  string
		hdr   string
		data  int
		names []string
		meta  map[string]string
	}{
		{"whitespace around", " \n\t{" + f32("a", 0, 4) + "}\r \t\n", 4, []string{"a"}, nil},
		{"empty", "{}", 0, nil, nil},
		{"metadata last, empty", "{" + f32("a", 0, 4) + `,"__metadata__":{}}`, 4, []string{"a"}, map[string]string{}},
		{"unknown fields", `{"a":{"x":{"y":[1,{"z":null}]},"dtype":"F32","data_offsets":[0,4],"shape":[1],"w":"s"}}`, 4, []string{"a"}, nil},
		{"escaped names", `{"\u0041\ud83d\ude00\/\"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"\ufffd":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`,
			2, []string{"A😀/\"", "\ufffd"}, nil},
		{"ties keep header order", "{" + f32("z", 4, 4) + "," + f32("b", 0, 4) + "," + f32("y", 4, 4) + "," + f32("a", 0, 0) + "}",
			4, []string{"a", "b", "z", "y"}, nil},
		{"header order is not offset order", "{" + f32("b", 4, 8) + "," + f32("a", 0, 4) + "}", 8, []string{"a", "b"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := file(tc.hdr, make([]byte, tc.data))
			h, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, ti := range h.Tensors {
				names = append(names, ti.Name)
			}
			if !reflect.DeepEqual(names, tc.names) || !reflect.DeepEqual(h.Metadata, tc.meta) || h.DataStart != int64(8+len(tc.hdr)) {
				t.Errorf("got %q, %q, DataStart %d", names, h.Metadata, h.DataStart)
			}
		})
	}
}

// TestReadHeaderInvalid covers malformed headers beyond the crafted fixtures; off is the
// expected offset within the header text.
func TestReadHeaderInvalid(t *testing.T) {
	a := `"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}`
	tests := []struct {
		name, hdr string
		tensor    string
		off       int
		msg       string
	}{
		{"duplicate __metadata__", `{"__metadata__":{},"__metadata__":{},` + a + `}`, "", 19, `duplicate key "__metadata__"`},
		{"trailing comma", `{` + a + `,}`, "", 53, "invalid JSON"},
		{"second value", `{` + a + `} {}`, "", 54, "trailing data"},
		{"entry is a number", `{"a":1}`, "a", 5, "tensor entry is number 1"},
		{"dtype is a number", `{"a":{"dtype":8,"shape":[1],"data_offsets":[0,1]}}`, "a", 14, "dtype is number 8"},
		{"missing dtype", `{"a":{"shape":[1],"data_offsets":[0,1]}}`, "a", 1, `missing field "dtype"`},
		{"empty offsets", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[]}}`, "a", 47, "0 elements, want 2"},
		{"shape not array", `{"a":{"dtype":"U8","shape":1,"data_offsets":[0,1]}}`, "a", 27, "shape is number 1"},
		{"offset beyond int64", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,9223372036854775808]}}`, "a", 49, "does not fit"},
		{"exponent", `{"a":{"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}}`, "a", 28, "not a non-negative integer"},
		{"lone low surrogate in metadata", `{"__metadata__":{"k":"x\udc00"},` + a + `}`, "", 23, "lone UTF-16 surrogate"},
		{"high surrogate then non-surrogate", `{"\ud800\u0041":{}}`, "", 2, "lone UTF-16 surrogate"},
		{"unclosed", `{` + a, "", 52, "ends early"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := file(tc.hdr, []byte{0})
			_, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
			fe, ok := err.(*ckpterr.FormatError)
			if !ok || fe.Item != tc.tensor || fe.Offset != int64(8+tc.off) || !strings.Contains(fe.Err.Error(), tc.msg) {
				t.Errorf("got %v\nwant tensor %q at byte %d, %q", err, tc.tensor, 8+tc.off, tc.msg)
			}
		})
	}
}

type failingReaderAt struct{}

func (failingReaderAt) ReadAt([]byte, int64) (int, error) { return 0, errors.New("EIO") }

// TestReadHeaderIO checks that a reader shorter than the size it claims is a ckpterr.FormatError and
// that an I/O error is passed through as such.
func TestReadHeaderIO(t *testing.T) {
	b := file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{0})
	_, err := ReadHeader(bytes.NewReader(b[:20]), int64(len(b)))
	if fe, ok := err.(*ckpterr.FormatError); !ok || fe.Offset != 20 {
		t.Errorf("short reader: %v", err)
	}
	_, err = ReadHeader(failingReaderAt{}, 100)
	if _, ok := err.(*ckpterr.FormatError); ok || err == nil || !strings.Contains(err.Error(), "EIO") {
		t.Errorf("failing reader: %v", err)
	}
}

// TestFormatErrorMessage checks the message names file, format, tensor and offset.
func TestFormatErrorMessage(t *testing.T) {
	b := file(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 4))
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), path)
	want := path + `: safetensors: "w": byte 66: data_offsets [0, 8] run past the end of the file (byte 66 ends 4 bytes into the data)`
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	if !errors.Is(err, ckpterr.ErrCorrupt) {
		t.Errorf("%v is not ErrCorrupt", err)
	}
}

// writerTo writes n bytes of value b.
type writerTo struct {
	n int
	b byte
}

func (w writerTo) WriteTo(dst io.Writer) (int64, error) {
	n, err := dst.Write(bytes.Repeat([]byte{w.b}, w.n))
	return int64(n), err
}

type failingWriterTo struct{}

func (failingWriterTo) WriteTo(io.Writer) (int64, error) { return 0, errors.New("disk on fire") }

// TestWriterErrors checks layout validation in NewWriter and the byte-count and order checks of
// WriteTensor and Close.
func TestWriterErrors(t *testing.T) {
	u8 := func(name string, n int64) TensorInfo { return TensorInfo{Name: name, DType: "U8", Shape: []int64{n}} }
	newErr := []struct {
		name    string
		tensors []TensorInfo
		meta    map[string]string
		want    string
	}{
		{"duplicate", []TensorInfo{u8("a", 1), u8("a", 2)}, nil, `"a" appears twice`},
		{"metadata name", []TensorInfo{u8("__metadata__", 1)}, nil, "cannot be named __metadata__"},
		{"invalid UTF-8 name", []TensorInfo{u8("a\xff", 1)}, nil, "not valid UTF-8"},
		{"invalid UTF-8 metadata", nil, map[string]string{"k": "\xff"}, "not valid UTF-8"},
		{"unknown dtype", []TensorInfo{{Name: "a", DType: "F128", Shape: []int64{1}}}, nil, "not a safetensors 0.8 dtype"},
		{"negative dim", []TensorInfo{u8("a", -1)}, nil, "negative dimension"},
		{"odd F4 count", []TensorInfo{{Name: "a", DType: "F4", Shape: []int64{3}}}, nil, "not a whole number of bytes"},
		{"overflow", []TensorInfo{{Name: "a", DType: "U64", Shape: []int64{1 << 40, 1 << 40}}}, nil, "overflows"},
		{"total overflow", []TensorInfo{u8("a", 1<<60), u8("b", 1<<60), u8("c", 1<<60), u8("d", 1<<60),
			u8("e", 1<<60), u8("f", 1<<60), u8("g", 1<<60), u8("h", 1<<60)}, nil, `"h": file size overflows`},
		{"header too large", []TensorInfo{u8(strings.Repeat("x", MaxHeaderSize), 1)}, nil, "exceeds the limit"},
	}
	for _, tc := range newErr {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewWriter(io.Discard, tc.tensors, tc.meta)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewWriter: %v, want %q", err, tc.want)
			}
		})
	}

	type call struct {
		name string
		src  io.WriterTo
	}
	streamErr := []struct {
		name  string
		calls []call
		want  string // from the last call, or from Close when all calls succeed
	}{
		{"short", []call{{"a", writerTo{1, 0}}}, "wrote 1 bytes, its U8 shape [2] needs 2"},
		{"long", []call{{"a", writerTo{3, 0}}}, "1 bytes more than its dtype and shape need"},
		{"out of order", []call{{"b", writerTo{1, 0}}}, `"b" written out of order: tensor "a" comes next`},
		{"too many", []call{{"a", writerTo{2, 0}}, {"b", writerTo{1, 0}}, {"c", writerTo{0, 0}}}, "all 2 tensors of the layout are written"},
		{"source fails", []call{{"a", failingWriterTo{}}}, "disk on fire"},
		{"missing", []call{{"a", writerTo{2, 0}}}, `1 of 2 tensors not written, starting with "b"`},
		{"sticky", []call{{"a", writerTo{1, 0}}, {"a", writerTo{2, 0}}}, "wrote 1 bytes"},
	}
	for _, tc := range streamErr {
		t.Run(tc.name, func(t *testing.T) {
			w, err := NewWriter(io.Discard, []TensorInfo{u8("a", 2), u8("b", 1)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tc.calls {
				err = w.WriteTensor(c.name, c.src)
			}
			if err == nil {
				err = w.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
			if cerr := w.Close(); cerr == nil {
				t.Error("Close after a failure succeeded")
			}
		})
	}
}

// TestWriterLayout checks offsets, padding and the header text, and that the output reads back.
func TestWriterLayout(t *testing.T) {
	plan := []TensorInfo{
		{Name: "b", DType: "BF16", Shape: []int64{3}, Begin: 99, End: 7}, // Begin/End are ignored
		{Name: "a\n", DType: "F4", Shape: []int64{2, 2}},
		{Name: "s", DType: "F64", Shape: []int64{}},
	}
	var buf bytes.Buffer
	w := must(NewWriter(&buf, plan, map[string]string{"z": "1", "a": "é"}))
	for _, c := range []struct {
		name string
		n    int
	}{{"b", 6}, {"a\n", 2}, {"s", 8}} {
		if err := w.WriteTensor(c.name, writerTo{c.n, byte(c.n)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	n := binary.LittleEndian.Uint64(b)
	wantHdr := `{"__metadata__":{"a":"é","z":"1"},"b":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},` +
		`"a\n":{"dtype":"F4","shape":[2,2],"data_offsets":[6,8]},"s":{"dtype":"F64","shape":[],"data_offsets":[8,16]}}`
	if got := strings.TrimRight(string(b[8:8+n]), " "); got != wantHdr || (8+n)%8 != 0 {
		t.Errorf("header (N=%d)\n got %s\nwant %s", n, got, wantHdr)
	}
	h, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	for i, ti := range h.Tensors {
		if ti.Name != plan[i].Name || ti.DType != plan[i].DType || !reflect.DeepEqual(ti.Shape, plan[i].Shape) {
			t.Errorf("tensor %d read back as %+v", i, ti)
		}
	}
}

// TestSortLikeReference checks the order of the reference writer: dtype descending in enum
// order, then name.
func TestSortLikeReference(t *testing.T) {
	var ts []TensorInfo
	for _, s := range []string{"U8 z", "BF16 a", "F32 b", "F64 c", "F8_E4M3 e", "BOOL a", "F4 a", "U64 a", "F6_E3M2 x", "F6_E2M3 x", "C64 q", "F32 a", "NEW a"} {
		d, n, _ := strings.Cut(s, " ")
		ts = append(ts, TensorInfo{Name: n, DType: d})
	}
	SortLikeReference(ts)
	var got []string
	for _, ti := range ts {
		got = append(got, ti.DType+" "+ti.Name)
	}
	want := []string{"U64 a", "F64 c", "C64 q", "F32 a", "F32 b", "BF16 a", "F8_E4M3 e", "U8 z", "F6_E3M2 x", "F6_E2M3 x", "F4 a", "BOOL a", "NEW a"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// TestTensorInfoFor covers the torch → safetensors mapping of shapes and dtypes.
func TestTensorInfoFor(t *testing.T) {
	tests := []struct {
		name   string
		tensor statedict.Tensor
		dtype  string
		shape  []int64
		err    string
	}{
		{"bf16", statedict.Tensor{DType: statedict.BFloat16, Shape: []int64{2, 3}}, "BF16", []int64{2, 3}, ""},
		{"scalar", statedict.Tensor{DType: statedict.Float8E4M3FN}, "F8_E4M3", []int64{}, ""},
		{"f4", statedict.Tensor{DType: statedict.Float4E2M1FNx2, Shape: []int64{2, 4}}, "F4", []int64{2, 8}, ""},
		{"f4 scalar", statedict.Tensor{DType: statedict.Float4E2M1FNx2}, "", nil, "0-dim float4_e2m1fn_x2"},
		{"complex128", statedict.Tensor{DType: statedict.Complex128, Shape: []int64{1}}, "", nil, "no safetensors equivalent"},
		{"f6 foreign", statedict.Tensor{DType: statedict.Uint8, Shape: []int64{6}, Foreign: "F6_E2M3"}, "F6_E2M3", []int64{8}, ""},
		{"f6 odd bytes", statedict.Tensor{DType: statedict.Uint8, Shape: []int64{4}, Foreign: "F6_E2M3"}, "", nil, "cannot write foreign dtype"},
		{"unknown foreign", statedict.Tensor{DType: statedict.Uint8, Shape: []int64{4}, Foreign: "F128"}, "", nil, "cannot write foreign dtype"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TensorInfoFor("w", &tc.tensor)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got.Name != "w" || got.DType != tc.dtype || !reflect.DeepEqual(got.Shape, tc.shape) {
				t.Errorf("got %+v, %v; want %s %v", got, err, tc.dtype, tc.shape)
			}
		})
	}
}

// TestForeignRoundTrip reads the F6 fixture and writes it back: the F6 bytes travel unchanged.
func TestForeignRoundTrip(t *testing.T) {
	ck := must(Open(context.Background(), filepath.Join(testdata, "crafted", "f6.safetensors")))
	defer ck.Close()
	var plan []TensorInfo
	dict := ck.Root.(*statedict.Dict)
	for _, e := range dict.Entries() {
		plan = append(plan, must(TensorInfoFor(e.Key.(string), e.Value.(*statedict.Tensor))))
	}
	var buf bytes.Buffer
	w := must(NewWriter(&buf, plan, nil))
	for _, ti := range plan {
		v, _ := dict.Get(ti.Name)
		if err := w.WriteTensor(ti.Name, v.(*statedict.Tensor)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	h := must(ReadHeader(bytes.NewReader(buf.Bytes()), int64(buf.Len())))
	want := []struct {
		dtype string
		shape []int64
	}{{"F32", []int64{2}}, {"F6_E3M2", []int64{8}}, {"F6_E2M3", []int64{4}}}
	for i, ti := range h.Tensors {
		got := buf.Bytes()[h.DataStart+ti.Begin : h.DataStart+ti.End]
		v, _ := dict.Get(ti.Name)
		var orig bytes.Buffer
		must(v.(*statedict.Tensor).WriteTo(&orig))
		if ti.DType != want[i].dtype || !reflect.DeepEqual(ti.Shape, want[i].shape) || !bytes.Equal(got, orig.Bytes()) {
			t.Errorf("%s: %s %v, bytes %x; want %s %v, bytes %x", ti.Name, ti.DType, ti.Shape, got, want[i].dtype, want[i].shape, orig.Bytes())
		}
	}
}

// TestFloat32s: values stream as little-endian float32 bytes across its 64 KiB buffer's
// boundaries (16 384 values fill one exactly).
func TestFloat32s(t *testing.T) {
	for _, n := range []int{0, 1, 16383, 16384, 16385, 40000} {
		v := make(Float32s, n)
		for i := range v {
			v[i] = float32(i) * -0.37
		}
		var b bytes.Buffer
		m, err := v.WriteTo(&b)
		if err != nil || m != int64(4*n) || b.Len() != 4*n {
			t.Fatalf("%d values: wrote %d bytes (%d buffered), %v", n, m, b.Len(), err)
		}
		for i, x := range v {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(b.Bytes()[4*i:])); got != x {
				t.Fatalf("%d values: value %d reads back %v, want %v", n, i, got, x)
			}
		}
	}
}
