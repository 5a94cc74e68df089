package safetensors

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

var testdata = filepath.Join(repoRoot, "testdata", "safetensors")

// listing is the JSON gen.py writes: a file's tensors as safetensors' torch loader sees them.
type listing struct {
	Tensors  []listedTensor    `json:"tensors"`
	Metadata map[string]string `json:"metadata"`
}

type listedTensor struct {
	Name   string  `json:"name"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	NBytes int64   `json:"nbytes"`
	SHA256 string  `json:"sha256"`
}

func readListing(t *testing.T, data []byte) listing {
	t.Helper()
	var l listing
	if err := json.Unmarshal(data, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// listCheckpoint lists an opened checkpoint the way gen.py lists a file, hashing the bytes each
// tensor's WriteTo produces.
func listCheckpoint(t *testing.T, ck *statedict.Checkpoint) []listedTensor {
	t.Helper()
	var out []listedTensor
	for _, e := range ck.Root.(*statedict.Dict).Entries() {
		tensor := e.Value.(*statedict.Tensor)
		h := sha256.New()
		n, err := tensor.WriteTo(h)
		if err != nil {
			t.Fatalf("%s: WriteTo: %v", e.Key, err)
		}
		dtype := tensor.DType.String()
		if tensor.Foreign != "" {
			dtype = tensor.Foreign
		}
		out = append(out, listedTensor{e.Key.(string), dtype, tensor.Shape, n, hex.EncodeToString(h.Sum(nil))})
	}
	return out
}

func diffListings(t *testing.T, got, want []listedTensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d tensors, want %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("tensor %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// TestEveryDType opens the file safetensors wrote from one tensor of every dtype and checks
// names, order, torch dtypes and shapes and the sha256 of every tensor's bytes against what
// safetensors + torch report.
func TestEveryDType(t *testing.T) {
	path := filepath.Join(testdata, "every_dtype.safetensors")
	want := readListing(t, must(os.ReadFile(filepath.Join(testdata, "every_dtype.json"))))
	ck, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.Format != "safetensors" || ck.Path != path {
		t.Errorf("Format, Path = %q, %q", ck.Format, ck.Path)
	}
	diffListings(t, listCheckpoint(t, ck), want.Tensors)

	file := must(os.ReadFile(path))
	for _, e := range ck.Root.(*statedict.Dict).Entries() {
		tensor := e.Value.(*statedict.Tensor)
		s := tensor.Storage
		data, mapped := s.Mapped()
		if !mapped || s.Key != e.Key || s.Location != "cpu" || s.DType != tensor.DType || s.File != path {
			t.Errorf("%s: storage %+v (mapped %v)", e.Key, s, mapped)
		}
		if !bytes.Equal(data, file[s.Offset:s.Offset+s.Size]) {
			t.Errorf("%s: storage bytes are not the file bytes at %d", e.Key, s.Offset)
		}
	}

	f := must(os.Open(path))
	defer f.Close()
	h, err := ReadHeader(f, must(f.Stat()).Size())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h.Metadata, want.Metadata) {
		t.Errorf("Metadata = %q, want %q", h.Metadata, want.Metadata)
	}
	if h.DataStart%8 != 0 {
		t.Errorf("DataStart = %d, not a multiple of 8", h.DataStart)
	}
	for _, ti := range h.Tensors {
		if ti.Name == "t.f4_e2m1fn_x2" && (ti.DType != "F4" || !reflect.DeepEqual(ti.Shape, []int64{16, 32})) {
			t.Errorf("F4 header entry %+v, want F4 [16 32]", ti)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// crafted is crafted.json: what safetensors 0.8 says of each hand-made file.
type craftedVerdict struct {
	What      string            `json:"what"`
	SafeOpen  string            `json:"safe_open"`
	GetTensor map[string]string `json:"get_tensor"`
}

func readCrafted(t *testing.T) map[string]craftedVerdict {
	t.Helper()
	var c map[string]craftedVerdict
	if err := json.Unmarshal(must(os.ReadFile(filepath.Join(testdata, "crafted.json"))), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// offsetFn computes the expected error offset from the file's bytes.
type offsetFn func(file []byte) int64

// at is the offset of the first occurrence of s after the length field, plus delta.
func at(s string, delta int) offsetFn {
	return func(b []byte) int64 { return int64(8 + bytes.Index(b[8:], []byte(s)) + delta) }
}

// last is the offset of the last occurrence of s.
func last(s string) offsetFn {
	return func(b []byte) int64 { return int64(bytes.LastIndex(b, []byte(s))) }
}

func abs(n int64) offsetFn { return func([]byte) int64 { return n } }

func eof(delta int64) offsetFn { return func(b []byte) int64 { return int64(len(b)) + delta } }

// TestHostile checks that every hostile file fails with a *ckpterr.FormatError naming the expected
// tensor and byte offset, and that safetensors rejects it too, except for the files where ckpt
// is stricter on purpose (refAccepts).
func TestHostile(t *testing.T) {
	verdicts := readCrafted(t)
	tests := []struct {
		file       string
		tensor     string
		off        offsetFn
		msg        string
		refAccepts bool
	}{
		{"short", "", abs(0), "too short", false},
		{"header_too_large", "", abs(0), "exceeds the limit", false},
		{"header_past_eof", "", abs(0), "past the end", false},
		{"empty_header", "", abs(8), "ends early", false},
		{"not_utf8_name", "", at("\xff", 0), "not valid UTF-8", false},
		{"lone_surrogate", "", at(`\ud800`, 0), "lone UTF-16 surrogate", false},
		{"not_object", "", abs(8), "not a JSON object", false},
		{"trailing_json", "", at("} x", 2), "trailing data", false},
		{"dup_tensor", "a", last(`"a"`), `duplicate key "a"`, true},
		{"dup_field", "a", last(`"dtype"`), `duplicate field "dtype"`, false},
		{"dup_metadata_key", "", last(`"k"`), `duplicate key "k" in __metadata__`, true},
		{"metadata_not_string", "", at(`:1}`, 1), "not a string", false},
		{"metadata_null", "", at("null", 0), "not an object", true},
		{"entry_array", "a", at(`[`, 0), "not an object", true},
		{"dtype_map", "a", at(`{"F32"`, 0), "not a dtype string", true},
		{"dtype_malformed", "a", at(`"f32"`, 0), "not a dtype string", false},
		{"missing_offsets", "a", at(`"a"`, 0), `missing field "data_offsets"`, false},
		{"offsets_three", "a", at(`,4]`, 1), "more than 2 elements", false},
		{"shape_negative", "a", at("-1", 0), "not a non-negative integer", false},
		{"shape_float", "a", at("1.0", 0), "not a non-negative integer", false},
		{"shape_huge_zero", "a", at("18446744073709551615", 0), "does not fit in an int64", true},
		{"too_deep", "a", at(`"x":`, 4+125), "nested deeper than 127", false},
		{"overlap", "b", at(`"b"`, 0), "overlap the previous tensor", false},
		{"gap", "b", at(`"b"`, 0), "leave a gap", false},
		{"not_at_zero", "a", at(`"a"`, 0), "leave a gap", false},
		{"end_before_begin", "a", at(`"a"`, 0), "end before they begin", false},
		{"shape_overflow", "a", at(`"a"`, 0), "element count overflows", false},
		{"bits_overflow", "a", at(`"a"`, 0), "size in bits overflows", false},
		{"f4_odd_count", "a", at(`"a"`, 0), "not a whole number of bytes", false},
		{"size_mismatch", "b", at(`"b"`, 0), "needs 8 bytes", false},
		{"trailing_bytes", "", eof(-1), "1 bytes after the last tensor", false},
		{"truncated", "b", eof(0), "run past the end of the file", false},
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			seen[tc.file] = true
			v, ok := verdicts[tc.file]
			if !ok {
				t.Fatalf("%s not in crafted.json", tc.file)
			}
			if refOK := v.SafeOpen == "ok"; refOK != tc.refAccepts {
				t.Errorf("safetensors safe_open says %q; test expects accepted=%v", v.SafeOpen, tc.refAccepts)
			}
			path := filepath.Join(testdata, "crafted", tc.file+".safetensors")
			data := must(os.ReadFile(path))
			_, err := Open(context.Background(), path)
			var fe *ckpterr.FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("Open: %v, want a *ckpterr.FormatError", err)
			}
			wantOff := tc.off(data)
			if fe.File != path || fe.Item != tc.tensor || fe.Offset != wantOff || !strings.Contains(fe.Err.Error(), tc.msg) {
				t.Errorf("got  %s\nwant file %s, tensor %q, offset %d, message containing %q\n(safetensors: %s)",
					err, path, tc.tensor, wantOff, tc.msg, v.SafeOpen)
			}
			for _, want := range []string{path, fmt.Sprintf("byte %d", wantOff)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q does not mention %q", err, want)
				}
			}
			// ReadHeader on a plain io.ReaderAt gives the same error without a file name.
			_, err2 := ReadHeader(bytes.NewReader(data), int64(len(data)))
			if fe2, ok := err2.(*ckpterr.FormatError); !ok || fe2.Offset != fe.Offset || fe2.Item != fe.Item || fe2.File != "" {
				t.Errorf("ReadHeader: %v", err2)
			}
		})
	}
	for name := range verdicts {
		if !seen[name] && !acceptedCrafted[name] {
			t.Errorf("crafted file %s has no test", name)
		}
	}
}

// acceptedCrafted are the crafted files TestAccepted covers.
var acceptedCrafted = map[string]bool{"f6": true, "unknown_dtype": true, "deep_ok": true, "metadata_only": true, "f4_odd_last_dim": true}

// TestAccepted covers the hand-made files that are valid: foreign dtypes, the deepest nesting
// serde_json accepts, a metadata-only file, and an F4 tensor that is valid in the header but
// not representable in torch.
func TestAccepted(t *testing.T) {
	verdicts := readCrafted(t)
	tests := []struct {
		file    string
		want    []listedTensor // nbytes and shapes; hashes checked separately when set
		openErr string         // Open fails (ReadHeader succeeds) with this message
	}{
		{file: "f6", want: []listedTensor{
			{Name: "w.f32", DType: "float32", Shape: []int64{2}, NBytes: 8},
			{Name: "w.e3m2", DType: "F6_E3M2", Shape: []int64{6}, NBytes: 6},
			{Name: "w.e2m3", DType: "F6_E2M3", Shape: []int64{3}, NBytes: 3},
		}},
		{file: "unknown_dtype", want: []listedTensor{
			{Name: "x", DType: "F128", Shape: []int64{16}, NBytes: 16},
			{Name: "y", DType: "uint8", Shape: []int64{2}, NBytes: 2},
		}},
		{file: "deep_ok", want: []listedTensor{{Name: "a", DType: "float32", Shape: []int64{1}, NBytes: 4}}},
		{file: "metadata_only"},
		{file: "f4_odd_last_dim", openErr: "odd last dimension"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			if !acceptedCrafted[tc.file] {
				t.Fatalf("%s missing from acceptedCrafted", tc.file)
			}
			v := verdicts[tc.file]
			path := filepath.Join(testdata, "crafted", tc.file+".safetensors")
			data := must(os.ReadFile(path))
			h, err := ReadHeader(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatalf("ReadHeader: %v (safetensors: %s)", err, v.SafeOpen)
			}
			ck, err := Open(context.Background(), path)
			if tc.openErr != "" {
				var fe *ckpterr.FormatError
				if !errors.As(err, &fe) || !strings.Contains(fe.Err.Error(), tc.openErr) || fe.Item != h.Tensors[0].Name ||
					fe.Offset != at(`"`+h.Tensors[0].Name+`"`, 0)(data) {
					t.Fatalf("Open: %v, want a ckpterr.FormatError %q at the entry", err, tc.openErr)
				}
				if got := v.GetTensor[h.Tensors[0].Name]; !strings.Contains(got, "divisible by 2") {
					t.Errorf("safetensors get_tensor: %q, expected it to refuse too", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			got := listCheckpoint(t, ck)
			for i := range got {
				got[i].SHA256 = ""
			}
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			diffListings(t, got, tc.want)
			for _, lt := range tc.want {
				if strings.HasPrefix(lt.DType, "F") && v.GetTensor[lt.Name] == "ok" {
					t.Errorf("%s: safetensors loads it, ckpt treats it as foreign", lt.Name)
				}
			}
		})
	}
	mo := must(os.ReadFile(filepath.Join(testdata, "crafted", "metadata_only.safetensors")))
	if h, err := ReadHeader(bytes.NewReader(mo), int64(len(mo))); err != nil ||
		!reflect.DeepEqual(h.Metadata, map[string]string{"k": "v"}) || len(h.Tensors) != 0 {
		t.Errorf("metadata_only: %+v, %v", h, err)
	}
}

// TestWriterMatchesReference writes the every-dtype tensors with ckpt's writer and compares the
// file with the one safetensors wrote: byte for byte, both when the layout is copied from the
// header and when it is rebuilt from the statedict tensors with SortLikeReference.
func TestWriterMatchesReference(t *testing.T) {
	path := filepath.Join(testdata, "every_dtype.safetensors")
	want := must(os.ReadFile(path))
	h := must(ReadHeader(bytes.NewReader(want), int64(len(want))))
	ck := must(Open(context.Background(), path))
	defer ck.Close()
	dict := ck.Root.(*statedict.Dict)

	rebuilt := make([]TensorInfo, 0, dict.Len())
	for _, e := range dict.Entries() {
		rebuilt = append(rebuilt, must(TensorInfoFor(e.Key.(string), e.Value.(*statedict.Tensor))))
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(rebuilt), func(i, j int) { rebuilt[i], rebuilt[j] = rebuilt[j], rebuilt[i] })
	SortLikeReference(rebuilt)

	for _, tc := range []struct {
		name string
		plan []TensorInfo
	}{{"header layout", h.Tensors}, {"SortLikeReference", rebuilt}} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewWriter(&buf, tc.plan, h.Metadata)
			if err != nil {
				t.Fatal(err)
			}
			for _, ti := range tc.plan {
				v, _ := dict.Get(ti.Name)
				if err := w.WriteTensor(ti.Name, v.(*statedict.Tensor)); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if got := buf.Bytes(); !bytes.Equal(got, want) {
				i := 0
				for i < min(len(got), len(want)) && got[i] == want[i] {
					i++
				}
				t.Errorf("output differs from safetensors' file at byte %d (len %d vs %d):\n got %q\nwant %q",
					i, len(got), len(want), got[max(0, i-40):min(len(got), i+40)], want[max(0, i-40):min(len(want), i+40)])
			}
		})
	}
}

// TestWriterRoundTripOracle writes the every-dtype tensors with ckpt's writer in a layout the
// reference would never choose (reverse name order, so nothing is aligned) and with different
// metadata, has safetensors + torch load the file, and checks it sees the same tensors.
func TestWriterRoundTripOracle(t *testing.T) {
	want := readListing(t, must(os.ReadFile(filepath.Join(testdata, "every_dtype.json"))))
	ck := must(Open(context.Background(), filepath.Join(testdata, "every_dtype.safetensors")))
	defer ck.Close()
	dict := ck.Root.(*statedict.Dict)
	var plan []TensorInfo
	for _, e := range dict.Entries() {
		plan = append(plan, must(TensorInfoFor(e.Key.(string), e.Value.(*statedict.Tensor))))
	}
	slices.SortFunc(plan, func(a, b TensorInfo) int { return strings.Compare(b.Name, a.Name) })
	dir, rel := oracleTempDir(t)
	out := must(os.Create(filepath.Join(dir, "ours.safetensors")))
	meta := map[string]string{"format": "pt", "": "empty key", "ünï\x00": "\x1f\"\\"}
	w := must(NewWriter(out, plan, meta))
	for _, ti := range plan {
		v, _ := dict.Get(ti.Name)
		if err := w.WriteTensor(ti.Name, v.(*statedict.Tensor)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	got := readListing(t, oracle(t, "testdata/safetensors/gen.py", "list", rel+"/ours.safetensors"))
	// Empty tensors share offsets, and safetensors orders ties at random: compare by name.
	byName := func(l []listedTensor) []listedTensor {
		return slices.SortedFunc(slices.Values(l), func(a, b listedTensor) int { return strings.Compare(a.Name, b.Name) })
	}
	diffListings(t, byName(got.Tensors), byName(want.Tensors))
	if !reflect.DeepEqual(got.Metadata, meta) {
		t.Errorf("safetensors reads metadata %q, want %q", got.Metadata, meta)
	}
}
